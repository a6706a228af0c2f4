"""Small shared utilities with no knowledge of LongMemEval, models or MLflow.

`errors` (LmeError, the one-sentence failure; the bottom of every layer), `files` (atomic writes), `sqlite`
(opening lme's SQLite stores), `yamlfile` (a safe YAML reader), `hashing` (canonical JSON and digests), `secrets`
(finding and cleaning API keys), `text`, `budget` (byte budgets), `memo`, `heap`, `progress` (tqdm or a line
every 30 s), `interrupts` (Ctrl-C over slow imports), `code_version` (which code made a result) and
`stored_state` (the registry of every file lme keeps).

Imports nothing from lme but `lme.util` itself (and `lme`'s package root).
"""
