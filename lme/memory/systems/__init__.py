"""External memory systems as memory builders (issue 40): one adapter protocol (`base.MemorySystem`), the
builder that ingests each history once and searches it (`base.SystemMemoryBuilder`), the ingestion journal
(`journal`), and one module per system (`local`: an offline SQLite FTS5 system for tests and local runs)."""
