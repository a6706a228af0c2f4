"""Tracking: everything lme writes to and reads back from MLflow.

`runs` opens the tracking store and logs a job's params, metrics, tags and artifacts; `traces` writes one MLflow
trace per question; `helper` is the background process that writes traces off the study's path;
`store_template` creates a new SQLite store whole (from a template, atomically); `report_source` reads runs and
their outcomes back for a report.

May import `lme.answer` and everything below it; never the config, provenance or study packages.
"""
