"""LongMemEval records, validation, neutral ids, dates and the bundled sample."""

from lme.data.records import ABSTENTION_MARK, QUESTION_TYPES, Question, Session, Turn

__all__ = ["ABSTENTION_MARK", "QUESTION_TYPES", "Question", "Session", "Turn"]
