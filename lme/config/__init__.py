"""The composition root: Hydra's composed config becomes a typed `Design` here and nowhere else.

`compose` composes a config from overrides without a run; `resolvers` registers lme's OmegaConf resolvers;
`components` builds the parts a config names (retriever, memory builder, reader, judge); `check` validates a
composed config in one sentence per fault; `design` is the one module that reads a composed config and turns it
into the `Design` every lower layer takes.

Only this package, `lme.study.hydra_run`, `lme.study.multirun` and `lme.cli` import Hydra or OmegaConf (an
import-linter contract). May import tracking, answer and everything below them.
"""
