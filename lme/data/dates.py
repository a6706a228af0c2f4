"""LongMemEval dates (`2023/05/20 (Sat) 02:21`) and the forms lme writes.

Weekday names come from fixed English tuples, not the locale.
"""

from __future__ import annotations

import re
from datetime import datetime

LME_DATE_FORMAT = "%Y/%m/%d (%a) %H:%M"
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_LME_DATE = re.compile(r"^\s*(\d{4})/(\d{1,2})/(\d{1,2}) \((\w{3})\) (\d{1,2}):(\d{2})\s*$")


def parse_lme_date(text: str) -> datetime:
    """Parse a LongMemEval date; raises ValueError when it does not match the format or is no real date."""
    match = _LME_DATE.match(text)
    if not match:
        raise ValueError(f"not a LongMemEval date: {text!r}")
    year, month, day, weekday, hour, minute = match.groups()
    if weekday.title() not in {name[:3] for name in WEEKDAYS}:
        raise ValueError(f"unknown weekday in {text!r}")
    return datetime(int(year), int(month), int(day), int(hour), int(minute))


def format_day(moment: datetime) -> str:
    """`2023-05-30 (Tuesday)`."""
    return f"{moment:%Y-%m-%d} ({WEEKDAYS[moment.weekday()]})"


def format_moment(moment: datetime) -> str:
    """`2023-05-30 (Tuesday) 14:02`."""
    return f"{format_day(moment)} {moment:%H:%M}"
