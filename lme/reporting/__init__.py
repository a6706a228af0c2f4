"""Reporting: pure functions from outcomes to numbers, tables, plots and files.

`measures` holds the measures (accuracy by type, paired bootstrap intervals, per-step tables, retrieval and cost
figures); `report` turns runs' outcomes into the printed and Markdown report; `plots` draws its figures;
`interop` reads and writes LongMemEval's official formats. Nothing here reads MLflow (`lme.tracking.report_source`
does) or calls a model.

May import `lme.judge`, `lme.models` (prices), `lme.data` and `lme.util`.
"""
