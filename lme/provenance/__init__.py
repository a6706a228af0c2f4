"""Provenance: the preregistration record of a frozen design (`prereg`: build, freeze, verify, check a run
against it) and the leakage audit of a design's texts against the benchmark (`audit`).

May import `lme.config` and the packages below it; `lme.study` (a run checked against its record) and
`lme.cli` import it.
"""
