"""OmegaConf resolvers lme's configs use; registered once, on import."""

from __future__ import annotations

from omegaconf import OmegaConf


def _sample_path() -> str:
    from lme.data.sample import SAMPLE_PATH

    return str(SAMPLE_PATH)


def register() -> None:
    if not OmegaConf.has_resolver("lme_sample_path"):
        OmegaConf.register_new_resolver("lme_sample_path", _sample_path)


register()
