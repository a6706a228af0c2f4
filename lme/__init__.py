"""lme: evaluate the long-term memory of chat assistants on LongMemEval."""

__version__ = "0.1.0"
