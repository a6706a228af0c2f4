"""Test shorthands over the composition root (`lme.config.design`): a composed config's instructions and questions."""

from __future__ import annotations

from lme.data.dataset import load_dataset as load_spec
from lme.config.design import design_from_config


def compose_instructions(cfg):
    """(first-pass instruction, rule steps, {step: instruction}) of a composed config."""
    instructions = design_from_config(cfg, check=False).instructions
    return instructions.first_pass, instructions.rules, dict(instructions.texts)


def load_dataset(cfg):
    """(data file, selected questions) of a composed config."""
    return load_spec(design_from_config(cfg, check=False).dataset)
