"""Running a study: the Hydra entry point, jobs, multiruns and what follows them.

`hydra_run` is the entry point `python -m lme` reaches for a run; `multirun` and `parent` hold a sweep's parent
run and its after-sweep stages (`arbiter`: the cross-run re-read); `job` runs one design over one seed (its
questions through `lme.answer.run`, its MLflow run through `lme.tracking`); `before_run` checks what a run needs
before any call; `resume` finds and continues an unfinished job; `estimate` prices a design without a call.

May import every package below it (provenance, config, tracking, answer, reporting, judge, memory, retrieval,
models, data, util); only `lme.cli` and `lme.__main__` import it.
"""
