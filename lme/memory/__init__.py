"""Memory builders: turn a question and its rankings into the text a reader sees."""
