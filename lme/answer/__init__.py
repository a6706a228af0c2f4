"""Reader prompt composition and (later) re-read rules."""
