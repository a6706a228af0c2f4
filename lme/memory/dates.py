"""Relative time expressions in a message, resolved to calendar dates (deterministic rules, no model).

`resolve_relative_dates(text, anchor)` finds every relative time expression in
`text`, in text order, non-overlapping, and resolves it against `anchor` (the
session date for a user message, the question date for the question). The
format functions turn the results into the "Resolved dates: ..." line the
user-log memory shows after a message.

Matching
    Case-insensitive; any apostrophe (' ’ ‘ ʼ `) works. Leftmost-longest: at the
    leftmost place where one combined regex matches, every rule is tried and the
    longest match wins (ties: the earlier rule), so "the day before yesterday"
    is one expression, not "yesterday", and "this past weekend" is not "past
    weekend". A longest match that resolves to nothing still consumes its text,
    which is how these stay silent: explicit years ("in May 2018", "March 15,
    2023", "Christmas 2019": absolute, not relative), "USA Today", generic
    "today" ("in today's world", "still relevant today"). "recently", "lately",
    "the other day", "a while ago" give no date and are never matched.
    The month May is "May"/"MAY", or a lowercase "may" followed by punctuation
    or the end ("in may."), or by a day number after a preposition ("on may
    5"): the verb ("may I", "it may be") is never a date; bare month names
    never are either, only "in|last|this|next May", "early|mid|late May" and
    month-day forms. An abbreviated month with a bare number ("Nov 22") is a
    day only with an ordinal ("Nov 22nd") or after a preposition ("on Nov 22"):
    in tables it is a month and a two-digit year.
    Speed: the combined regex costs about a microsecond per character when it
    scans, so it is only tried at word starts up to 48 characters before a
    keyword (a unit, weekday, month, holiday or season word, found with
    `bytes.translate`/`split`/`str.find`); a test checks this gives the same
    matches as the full scan on real text. Matches are cached per text, since
    histories repeat messages.

Conventions (decisions)
    * Weeks run Monday to Sunday; a weekend is the Saturday and Sunday of a week.
    * Days: today/tonight/this morning|afternoon|evening/earlier|later today = the
      anchor; yesterday (morning...)/last night = -1; the day before yesterday
      = -2; tomorrow = +1; the day after tomorrow = +2.
    * "N days|weeks|fortnights|months|years ago|back|from now": N is digits, one..
      twenty, thirty..sixty, "a"/"an"; "a couple (of)" = 2, "a few" = 3,
      "several" = 4 (approximate, the reading is in the note). Days and weeks
      count exact days (a week = 7); months and years move the calendar (same
      day N months earlier, clamped to the month's end) and are approximate.
      "and a half", or a qualifier (about, around, almost, over, more than,
      ...) makes a reading approximate.
    * last/this/next week|month|year: calendar ranges; "earlier this week|month|
      year" runs from the period's first day to the day before the anchor,
      "later this ..." from the day after to the period's last day;
      "the week|month|year before last", "... after next"; "this time last year".
    * "the past|last|next|coming (N) days|weeks|months|years", "this past week|
      month|year": the range from N units before the anchor to the anchor (or
      from the anchor to N units after), approximate.
    * Weekends: "this weekend" = this week's; "last weekend" = the previous
      week's; "this past weekend" = the previous week's (said on a Sunday it may
      mean the current one: listed as the alternative); "next weekend" = next
      week's (said Monday to Friday it may mean this week's coming one: the
      alternative); "over the weekend" = the most recent weekend on or before
      the anchor (Monday to Friday also the coming one as alternative).
    * Weekdays: "last Friday" = the Friday of the previous week; when a Friday
      of the current week already passed, that most recent Friday is the
      alternative (said on a Saturday: 8 days ago, or yesterday). "this past
      Friday" / "this last Friday" = the most recent Friday strictly before the
      anchor. "this Friday" = the coming Friday (the anchor itself when it is a
      Friday); when this week's Friday already passed, it is the alternative.
      "next Friday" = the Friday of the next week; when a Friday is still to come
      this week, that one is the alternative. "this coming Friday" = the next
      Friday strictly after the anchor. "on Friday" = the most recent Friday on
      or before the anchor, with the next one after the anchor as alternative
      (the tense decides, and rules do not read tense). A part of the day may
      follow ("last Friday night"); habits ("on Fridays", "on Friday nights")
      and "last Friday of the month" are not dates.
    * Months: "in|during May" = the most recent May on or before the anchor's
      month, with the next May as alternative unless the anchor is in May;
      "last May" / "this past May" = the most recent May strictly before the
      anchor's month; "this May" = May of the anchor's year; "next May" / "this
      coming May" = the first May after the anchor's month; "May of last year"
      etc. fix the year. "early|mid|late May" = days 1-10, 11-20, 21-end
      (approximate). "May 5th", "the 5th of May", "Friday, May 5" (no year): the
      most recent May 5 on or before the anchor, the next one as alternative (a
      given weekday picks the reading it matches); "May 5-7", "the 5th to 7th
      of May" are ranges; "the 15th of last|this|next month" is one day.
    * Holidays, fixed (Valentine's Day, St. Patrick's Day, April Fools' Day,
      Cinco de Mayo, Independence Day / the Fourth of July, Halloween, Christmas
      Eve/Day, Boxing Day, New Year's Eve/Day) and computed (Easter Sunday/Monday,
      Good Friday, US Mother's Day, Father's Day, Memorial Day, Labor Day,
      Thanksgiving, Black Friday): "last X" / "this past X" = the most recent
      strictly before the anchor, "this X" = the anchor's year, "next X" / "this
      coming X" = the first strictly after; otherwise the most recent on or before
      the anchor, the next one as alternative ("since X": no alternative);
      "X last|this|next year" fixes the year; "X weekend" is the nearest
      Saturday and Sunday stretched to include the holiday ("Labor Day
      weekend" = Saturday to Monday), approximate. Short
      names that are often no date (Christmas, Halloween, Easter, Thanksgiving,
      New Year's, Valentine's, Black Friday) need a preposition or modifier
      before them ("for Christmas", "last Halloween") and are skipped before
      words like tree, gifts, horror, island, eggs, deals.
    * Seasons (meteorological, northern hemisphere: spring Mar-May, summer Jun-
      Aug, fall/autumn Sep-Nov, winter Dec-Feb), approximate: "this summer" = the
      one containing the anchor, else the nearer of the last and the next;
      "last summer" = the one before that (when "this summer" already ended, it
      is the alternative); "this past summer" = the most recent ended; "next
      summer" = the first starting after the anchor.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import lru_cache

from lme.data.dates import WEEKDAYS, format_day

Range = tuple[date, date]


@dataclass(frozen=True, slots=True)
class ResolvedDate:
    """One relative time expression and the calendar day or range it denotes."""

    expression: str  # the exact text matched, as written
    start: date
    end: date  # inclusive; == start for a single day
    approximate: bool = False
    alternatives: tuple[Range, ...] = ()  # other readings when ambiguous
    note: str = ""  # "" or e.g. "ambiguous: ..." / '"a few" read as 3'
    span: tuple[int, int] = (0, 0)  # character offsets in the text


@dataclass(frozen=True, slots=True)
class _Reading:
    start: date
    end: date
    approximate: bool = False
    alternatives: tuple[Range, ...] = ()
    note: str = ""


# --------------------------------------------------------------------------- calendar helpers

def _as_date(value: date | datetime) -> date:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    raise TypeError(f"expected a date or datetime, found {type(value).__name__}")


def _add_months(day: date, months: int) -> date:
    """The same day `months` later (negative: earlier), clamped to the month's last day."""
    years, month0 = divmod(day.month - 1 + months, 12)
    year, month = day.year + years, month0 + 1
    return date(year, month, min(day.day, calendar.monthrange(year, month)[1]))


def _month_range(year: int, month: int) -> Range:
    return date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1])


def _shift_month(year: int, month: int, delta: int) -> tuple[int, int]:
    years, month0 = divmod(month - 1 + delta, 12)
    return year + years, month0 + 1


def _monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _nth_weekday(year: int, month: int, weekday: int, n: int) -> date:
    first = date(year, month, 1)
    return first + timedelta(days=(weekday - first.weekday()) % 7 + 7 * (n - 1))


def _last_weekday(year: int, month: int, weekday: int) -> date:
    last = _month_range(year, month)[1]
    return last - timedelta(days=(last.weekday() - weekday) % 7)


def _easter(year: int) -> date:
    """Western (Gregorian) Easter Sunday, anonymous Gregorian algorithm."""
    a, b, c = year % 19, year // 100, year % 100
    d, e = divmod(b, 4)
    f = (b + 8) // 25
    g = (b - f + 1) // 3
    h = (19 * a + b - d - g + 15) % 30
    i, k = divmod(c, 4)
    l = (32 + 2 * e + 2 * i - h - k) % 7  # noqa: E741
    m = (a + 11 * h + 22 * l) // 451
    month, day = divmod(h + l - 7 * m + 114, 31)
    return date(year, month, day + 1)


def _thanksgiving(year: int) -> date:
    return _nth_weekday(year, 11, 3, 4)


# --------------------------------------------------------------------------- vocabulary

_NUMBER_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50,
    "sixty": 60, "a": 1, "an": 1,
}
_VAGUE_NUMBERS = {"a couple of": 2, "a couple": 2, "couple of": 2, "a few": 3, "few": 3, "several": 4}
_APPROXIMATE_QUALIFIERS = {
    "about", "around", "roughly", "approximately", "almost", "nearly", "over", "more than", "less than",
    "just over", "just under", "under", "maybe", "probably",
}
_EXACT_QUALIFIERS = {"exactly", "precisely", "only", "just"}
_MONTHS = {
    "january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6, "july": 7, "august": 8,
    "september": 9, "october": 10, "november": 11, "december": 12,
    "jan": 1, "feb": 2, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "sept": 9, "oct": 10, "nov": 11,
    "dec": 12,
}
_MONTH_NAMES = (
    "", "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
    "November", "December",
)
_WEEKDAY_INDEX = {name.lower(): index for index, name in enumerate(WEEKDAYS)}
_SEASON_START = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}


def _alternation(words) -> str:
    """Longest first, spaces as `\\s+`."""
    return "|".join(re.escape(word).replace(r"\ ", r"\s+") for word in sorted(words, key=len, reverse=True))


_QUANT = rf"(?P<n>\d{{1,3}}|{_alternation(list(_VAGUE_NUMBERS) + list(_NUMBER_WORDS))})"
_QUAL = rf"(?:(?P<qual>{_alternation(_APPROXIMATE_QUALIFIERS | _EXACT_QUALIFIERS)})\s+)?"
_WD = rf"(?P<wd>{_alternation(_WEEKDAY_INDEX)})"
_MONTH = rf"(?P<month>{_alternation(_MONTHS)})\b"
_DAY_NUMBER = r"3[01]|[12]\d|0?[1-9]"
_ORDINAL = r"(?:st|nd|rd|th)?"
_ABBREVIATION_DOT = r"(?:(?<=jan|feb|apr|jun|jul|aug|sep|oct|nov|dec)\.|(?<=sept)\.)?"
_PART_OF_DAY = r"(?:\s+(?:morning|afternoon|evening|night))?"
_YEAR_TAIL = r"(?P<year>(?:\s+of)?\s+(?P<rel>last|this|next)\s+year\b|,?\s+(?:of\s+)?(?P<digits>\d{4})\b)?"
_GATED_BLOCK = (  # words after a short holiday name that make it no date ("Christmas tree")
    "tree|trees|island|islands|horror|carol|carols|song|songs|music|movie|movies|film|films|card|cards|"
    "light|lights|decoration|decorations|decor|gift|gifts|present|presents|market|markets|cookie|cookies|"
    "stuff|tradition|traditions|theme|themed|egg|eggs|sale|sales|deal|deals|shopping|special|specials|"
    "sweater|sweaters|costume|costumes|candy|spirit|story|stories|list|lists|menu|menus|recipe|recipes|"
    "playlist|playlists|ornament|ornaments|village|show|shows|episode|episodes|parade|pageant|album|"
    "resolution|resolutions|bunny|basket|baskets|ad|ads|campaign|campaigns|collection|edition|fairy"
)
_GENERIC_TODAY_AFTER = re.compile(
    r"'s\s+(?:world|society|age|fast|modern|digital|market|economy|climate|culture|landscape|environment|"
    r"generation|youth|standards|technology|tech|times|media|workforce|job|business|political|social|global|"
    r"competitive|day|rapidly|ever|increasingly|interconnected)"
)
_GENERIC_TODAY_BEFORE = re.compile(
    r"\b(?:world|society|relevant|still|exists?|remains?|nowadays|popular|common|known|used|widely|practiced|"
    r"celebrated|existing|standing|stands|even|of)\s+$"
)


# --------------------------------------------------------------------------- resolvers

def _number(match: re.Match[str]) -> tuple[int, bool, str]:
    """The quantity, whether it is vague, and the note for a vague one."""
    word = " ".join(match.group("n").split())
    if word.isdigit():
        return int(word), False, ""
    if word in _VAGUE_NUMBERS:
        value = _VAGUE_NUMBERS[word]
        return value, True, f'"{word}" read as {value}'
    return _NUMBER_WORDS[word], False, ""


def _move(anchor: date, unit: str, amount: int, half: bool) -> date:
    """`amount` units after the anchor (negative: before); a half unit added in the same direction."""
    sign = -1 if amount < 0 else 1
    if unit == "day":
        return anchor + timedelta(days=amount)
    if unit in ("week", "fortnight"):
        days = 7 if unit == "week" else 14
        return anchor + timedelta(days=amount * days + sign * (days // 2 if half else 0))
    months = amount * (12 if unit == "year" else 120 if unit == "decade" else 1)
    moved = _add_months(anchor, months)
    if half:
        moved = _add_months(moved, sign * 6) if unit == "year" else moved + timedelta(days=sign * 15)
    return moved


def _unit(word: str) -> str:
    return word[:-1] if word.endswith("s") else word


def _resolve_ago(match: re.Match[str], anchor: date, original: str) -> _Reading | None:
    count, vague, note = _number(match)
    unit = _unit(match.group("unit"))
    half = bool(match.group("half1") or match.group("half2"))
    qualifier = " ".join((match.group("qual") or "").split())
    direction = -1 if match.group("dir").startswith(("ago", "back")) else 1
    day = _move(anchor, unit, direction * count, half)
    approximate = vague or half or unit in ("month", "year") or qualifier in _APPROXIMATE_QUALIFIERS
    return _Reading(day, day, approximate, (), note)


_DAY_OFFSETS = {"today": 0, "tonight": 0, "yesterday": -1, "last night": -1, "tomorrow": 1}


def _resolve_day_word(match: re.Match[str], anchor: date, original: str) -> _Reading | None:
    word = " ".join(match.group("word").split())
    if word == "today" and not match.group("edge"):
        before = match.string[max(0, match.start() - 40) : match.start()]
        possessive = match.string.startswith("'s", match.end())
        if (
            _GENERIC_TODAY_AFTER.match(match.string, match.end())
            or _GENERIC_TODAY_BEFORE.search(before)
            or (possessive and re.search(r"\bin\s+$", before))
        ):
            return None  # "in today's world", "still relevant today": nowadays, not a date
    if word.startswith(("this ", "today", "tonight")):
        offset = 0
    elif "before yesterday" in word:
        offset = -2
    elif "after tomorrow" in word:
        offset = 2
    else:
        offset = _DAY_OFFSETS[word.split()[0] if word.startswith(("yesterday", "tomorrow")) else word]
    day = anchor + timedelta(days=offset)
    return _Reading(day, day)


def _period(anchor: date, unit: str, shift: int) -> Range:
    """The calendar week/month/year `shift` periods from the anchor's."""
    if unit == "week":
        monday = _monday(anchor) + timedelta(days=7 * shift)
        return monday, monday + timedelta(days=6)
    if unit == "month":
        return _month_range(*_shift_month(anchor.year, anchor.month, shift))
    year = anchor.year + shift
    return date(year, 1, 1), date(year, 12, 31)


def _resolve_period(match: re.Match[str], anchor: date, original: str) -> _Reading | None:
    unit = match.group("unit")
    mod = " ".join(match.group("mod").split())
    if mod == "this past":
        return _Reading(_move(anchor, unit, -1, False), anchor, approximate=True)
    shift = {"last": -1, "this": 0, "next": 1, "this coming": 1}[mod]
    start, end = _period(anchor, unit, shift)
    edge = match.group("edge")
    if edge and mod == "this":
        if edge == "earlier":
            return _Reading(start, max(start, anchor - timedelta(days=1)))
        return _Reading(min(end, anchor + timedelta(days=1)), end)
    return _Reading(start, end)


def _resolve_before_last(match: re.Match[str], anchor: date, original: str) -> _Reading | None:
    unit = match.group("unit")
    shift = -2 if "before" in match.group("dir") else 2
    if unit == "weekend":
        saturday = _monday(anchor) + timedelta(days=5 + 7 * shift)
        return _Reading(saturday, saturday + timedelta(days=1))
    return _Reading(*_period(anchor, unit, shift))


def _resolve_this_time(match: re.Match[str], anchor: date, original: str) -> _Reading | None:
    day = _move(anchor, match.group("unit"), -1 if match.group("dir") == "last" else 1, False)
    return _Reading(day, day, approximate=True)


def _weekend(saturday: date) -> Range:
    return saturday, saturday + timedelta(days=1)


def _resolve_weekend(match: re.Match[str], anchor: date, original: str) -> _Reading | None:
    mod = " ".join(match.group("mod").split())
    this_saturday = _monday(anchor) + timedelta(days=5)
    current, previous = _weekend(this_saturday), _weekend(this_saturday - timedelta(days=7))
    following = _weekend(this_saturday + timedelta(days=7))
    weekday = anchor.weekday()
    if mod == "this":
        return _Reading(*current)
    if mod == "last":
        return _Reading(*previous)
    if mod in ("this past", "the past"):
        if weekday == 6:
            return _Reading(*previous, alternatives=(current,), note="ambiguous: the previous weekend or the current one")
        return _Reading(*previous)
    if mod == "next":
        if weekday < 5:
            return _Reading(
                *following, alternatives=(current,), note="ambiguous: the weekend of next week or the coming one"
            )
        return _Reading(*following)
    if mod == "this coming":
        return _Reading(*(current if weekday < 5 else following))
    # over the weekend
    if weekday >= 5:
        return _Reading(*current)
    return _Reading(*previous, alternatives=(current,), note="ambiguous: the weekend just past or the coming one")


def _resolve_span(match: re.Match[str], anchor: date, original: str) -> _Reading | None:
    """the past/last/next/coming (N) days|weeks|months|years."""
    unit_word = match.group("unit")
    unit = _unit(unit_word)
    note = ""
    if match.group("n"):
        count, _vague, note = _number(match)
    elif unit_word.endswith("s"):
        return None  # "the past weeks": no count
    else:
        count = 1
    direction = -1 if match.group("dir") in ("past", "last") else 1
    other = _move(anchor, unit, direction * count, False)
    start, end = (other, anchor) if direction < 0 else (anchor, other)
    return _Reading(start, end, approximate=True, note=note)


def _weekday_reading(anchor: date, target: int, mod: str) -> _Reading:
    name = WEEKDAYS[target]
    monday = _monday(anchor)
    weekday = anchor.weekday()
    back = (weekday - target) % 7
    most_recent_before = anchor - timedelta(days=back or 7)
    coming_after = anchor + timedelta(days=(target - weekday) % 7 or 7)
    if mod == "last":
        primary = monday - timedelta(days=7) + timedelta(days=target)
        if primary != most_recent_before:
            return _Reading(
                primary, primary, alternatives=((most_recent_before, most_recent_before),),
                note=f"ambiguous: the {name} of the previous week or the most recent {name}",
            )
        return _Reading(primary, primary)
    if mod in ("this past", "this last"):
        return _Reading(most_recent_before, most_recent_before)
    if mod == "this":
        coming = anchor + timedelta(days=(target - weekday) % 7)
        if target < weekday:
            earlier = monday + timedelta(days=target)
            return _Reading(
                coming, coming, alternatives=((earlier, earlier),),
                note=f"ambiguous: the coming {name} or the one earlier this week",
            )
        return _Reading(coming, coming)
    if mod == "next":
        primary = monday + timedelta(days=7 + target)
        if primary != coming_after:
            return _Reading(
                primary, primary, alternatives=((coming_after, coming_after),),
                note=f"ambiguous: the {name} of the next week or the coming {name}",
            )
        return _Reading(primary, primary)
    if mod == "this coming":
        return _Reading(coming_after, coming_after)
    # on <weekday>
    on_or_before = anchor - timedelta(days=back)
    return _Reading(
        on_or_before, on_or_before, alternatives=((coming_after, coming_after),),
        note=f"ambiguous: the most recent {name} or the next one",
    )


def _resolve_weekday(match: re.Match[str], anchor: date, original: str) -> _Reading | None:
    return _weekday_reading(anchor, _WEEKDAY_INDEX[match.group("wd")], " ".join(match.group("mod").split()))


def _month_number(match: re.Match[str], original: str) -> int | None:
    """The month of a match; None for "may" that reads as the verb."""
    word = match.group("month")
    if word == "may" and original[match.start("month") : match.end("month")] not in ("May", "MAY"):
        after = match.string[match.end("month") : match.end("month") + 3]
        before = match.string[max(0, match.start("month") - 12) : match.start("month")]
        if not (
            re.match(r"\s*(?:[^\w\s']|$)", after)
            or (re.match(r"\s*\d", after) and _MAY_PREPOSITION.search(before))
        ):
            return None
    return _MONTHS[word]


def _explicit_year(match: re.Match[str], anchor: date) -> int | None:
    rel = match.group("rel")
    return None if rel is None else anchor.year + {"last": -1, "this": 0, "next": 1}[rel]


_MAY_PREPOSITION = re.compile(r"\b(?:on|by|until|till|since|before|after|from|of|in|the)\s+$")
_PARTS = {"early": (1, 10), "mid": (11, 20), "late": (21, 31)}


def _part_of_month(year: int, month: int, part: str | None) -> Range:
    start, end = _month_range(year, month)
    if part is None:
        return start, end
    first, last = _PARTS[part]
    return date(year, month, first), date(year, month, min(last, end.day))


def _resolve_month(match: re.Match[str], anchor: date, original: str) -> _Reading | None:
    month = _month_number(match, original)
    if month is None or match.group("digits"):
        return None  # the verb "may"; an explicit year is absolute, not relative
    mod = " ".join((match.groupdict().get("mod") or "in").split())
    part = match.group("part")
    approximate = part is not None
    year = _explicit_year(match, anchor)
    if year is not None:
        return _Reading(*_part_of_month(year, month, part), approximate=approximate)
    if mod in ("last", "this past"):
        year = anchor.year if month < anchor.month else anchor.year - 1
    elif mod == "this":
        year = anchor.year
    elif mod in ("next", "this coming"):
        year = anchor.year if month > anchor.month else anchor.year + 1
    else:  # in / during / bare early-mid-late
        year = anchor.year if month <= anchor.month else anchor.year - 1
        if month != anchor.month:
            return _Reading(
                *_part_of_month(year, month, part), approximate=approximate,
                alternatives=(_part_of_month(year + 1, month, part),),
                note=f"ambiguous: the most recent {_MONTH_NAMES[month]} or the next one",
            )
    return _Reading(*_part_of_month(year, month, part), approximate=approximate)


def _valid_day(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _resolve_month_day(match: re.Match[str], anchor: date, original: str) -> _Reading | None:
    month = _month_number(match, original)
    if month is None or match.group("year"):
        return None
    if (
        len(match.group("month")) <= 4
        and month not in (5, 6, 7)
        and not re.search(r"\d(?:st|nd|rd|th)", match.group(0))
        and not _MAY_PREPOSITION.search(match.string[max(0, match.start() - 12) : match.start()])
    ):
        return None  # "Nov 22" in a table is a month and a year; "on Nov 22" is a day
    day = int(match.group("day"))
    day2 = match.groupdict().get("day2")
    length = int(day2) - day if day2 and int(day2) > day else 0
    if day > calendar.monthrange(2024, month)[1]:
        return None  # no such day in any year
    candidates = [found for year in range(anchor.year - 8, anchor.year + 9) if (found := _valid_day(year, month, day))]
    before = [found for found in candidates if found <= anchor]
    after = [found for found in candidates if found > anchor]
    if not before or not after:
        return None
    primary, alternative = before[-1], after[0]
    weekday = match.groupdict().get("wd")
    if weekday:
        wanted = _WEEKDAY_INDEX[weekday]
        if alternative.weekday() == wanted and primary.weekday() != wanted:
            primary, alternative = alternative, primary
        if primary.weekday() == wanted:
            alternative = None
    end = primary + timedelta(days=length)
    if primary == anchor or alternative is None:
        return _Reading(primary, end)
    label = f"{_MONTH_NAMES[month]} {day}"
    return _Reading(
        primary, end, alternatives=((alternative, alternative + timedelta(days=length)),),
        note=f"ambiguous: the most recent {label} or the next one",
    )


def _resolve_day_of_month(match: re.Match[str], anchor: date, original: str) -> _Reading | None:
    year, month = _shift_month(anchor.year, anchor.month, {"last": -1, "this": 0, "next": 1}[match.group("mod")])
    day = _valid_day(year, month, int(match.group("day")))
    return None if day is None else _Reading(day, day)


# holiday key -> (label, date in a year)
_HOLIDAYS: dict[str, tuple[str, Callable[[int], date]]] = {
    "valentine": ("Valentine's Day", lambda year: date(year, 2, 14)),
    "patrick": ("St. Patrick's Day", lambda year: date(year, 3, 17)),
    "fools": ("April Fools' Day", lambda year: date(year, 4, 1)),
    "cinco": ("Cinco de Mayo", lambda year: date(year, 5, 5)),
    "july4": ("Independence Day", lambda year: date(year, 7, 4)),
    "halloween": ("Halloween", lambda year: date(year, 10, 31)),
    "christmas_eve": ("Christmas Eve", lambda year: date(year, 12, 24)),
    "christmas": ("Christmas", lambda year: date(year, 12, 25)),
    "boxing": ("Boxing Day", lambda year: date(year, 12, 26)),
    "new_years_eve": ("New Year's Eve", lambda year: date(year, 12, 31)),
    "new_year": ("New Year's Day", lambda year: date(year, 1, 1)),
    "easter": ("Easter", _easter),
    "easter_monday": ("Easter Monday", lambda year: _easter(year) + timedelta(days=1)),
    "good_friday": ("Good Friday", lambda year: _easter(year) - timedelta(days=2)),
    "mother": ("Mother's Day", lambda year: _nth_weekday(year, 5, 6, 2)),
    "father": ("Father's Day", lambda year: _nth_weekday(year, 6, 6, 3)),
    "memorial": ("Memorial Day", lambda year: _last_weekday(year, 5, 0)),
    "labor": ("Labor Day", lambda year: _nth_weekday(year, 9, 0, 1)),
    "thanksgiving": ("Thanksgiving", _thanksgiving),
    "black_friday": ("Black Friday", lambda year: _thanksgiving(year) + timedelta(days=1)),
}
_HOLIDAY_KEYS = (  # first substring found in the normalised name decides
    ("valentine", "valentine"), ("patrick", "patrick"), ("paddy", "patrick"), ("fools", "fools"),
    ("cinco", "cinco"), ("july", "july4"), ("independence", "july4"), ("halloween", "halloween"),
    ("christmas eve", "christmas_eve"), ("christmas", "christmas"), ("xmas", "christmas"), ("boxing", "boxing"),
    ("eve", "new_years_eve"), ("new year", "new_year"), ("easter monday", "easter_monday"),
    ("good friday", "good_friday"), ("easter", "easter"), ("mother", "mother"), ("father", "father"),
    ("memorial", "memorial"), ("labo", "labor"), ("thanksgiving", "thanksgiving"), ("black", "black_friday"),
)


def _holiday_key(name: str) -> str:
    return next(key for part, key in _HOLIDAY_KEYS if part in name)


def _holiday_weekend(day: date) -> Range:
    """The Saturday and Sunday nearest to a holiday, stretched to include it ("Labor Day weekend": Sat-Mon)."""
    saturday = day + timedelta(days=5 - day.weekday())  # this week's Saturday
    if (saturday - day).days > 3:  # Monday or Tuesday: the weekend before
        saturday -= timedelta(days=7)
    sunday = saturday + timedelta(days=1)
    return min(day, saturday), max(day, sunday)


def _resolve_holiday(match: re.Match[str], anchor: date, original: str) -> _Reading | None:
    if match.group("digits"):
        return None  # "Christmas 2019": absolute
    label, on = _HOLIDAYS[_holiday_key(" ".join(match.group("name").split()))]
    mod = " ".join((match.group("mod") or "").split())
    weekend = match.group("weekend") is not None

    def reading(day: date, alternative: date | None = None) -> _Reading:
        if alternative is None:
            return _Reading(*(_holiday_weekend(day) if weekend else (day, day)), approximate=weekend)
        return _Reading(
            *(_holiday_weekend(day) if weekend else (day, day)), approximate=weekend,
            alternatives=(_holiday_weekend(alternative) if weekend else (alternative, alternative),),
            note=f"ambiguous: the most recent {label} or the next one",
        )

    year = _explicit_year(match, anchor)
    if year is not None:
        return reading(on(year))
    this_year = on(anchor.year)
    if mod in ("last", "this past"):
        return reading(this_year if this_year < anchor else on(anchor.year - 1))
    if mod == "this":
        return reading(this_year)
    if mod in ("next", "this coming"):
        return reading(this_year if this_year > anchor else on(anchor.year + 1))
    day = this_year if this_year <= anchor else on(anchor.year - 1)
    if day == anchor or mod == "since":
        return reading(day)
    return reading(day, this_year if this_year > anchor else on(anchor.year + 1))


def _season(year: int, name: str) -> Range:
    start_month = _SEASON_START[name]
    end_year, end_month = _shift_month(year, start_month, 2)
    return date(year, start_month, 1), _month_range(end_year, end_month)[1]


def _resolve_season(match: re.Match[str], anchor: date, original: str) -> _Reading | None:
    name = match.group("season")
    mod = " ".join(match.group("mod").split())
    seasons = [_season(year, name) for year in range(anchor.year - 3, anchor.year + 3)]

    def gap(season: Range) -> int:
        return max((season[0] - anchor).days, (anchor - season[1]).days, 0)

    this = min(seasons, key=gap)  # the one containing the anchor (gap 0), else the nearer
    if mod == "this":
        return _Reading(*this, approximate=True)
    if mod == "this past":
        return _Reading(*[season for season in seasons if season[1] < anchor][-1], approximate=True)
    if mod in ("next", "this coming"):
        return _Reading(*[season for season in seasons if season[0] > anchor][0], approximate=True)
    before_this = seasons[seasons.index(this) - 1]
    if this[1] < anchor:
        return _Reading(
            *before_this, approximate=True, alternatives=(this,),
            note=f"ambiguous: the {name} before the last one or the {name} that just ended",
        )
    return _Reading(*before_this, approximate=True)


def _silent(match: re.Match[str], anchor: date, original: str) -> _Reading | None:
    return None


# --------------------------------------------------------------------------- rules

Resolver = Callable[[re.Match[str], date, str], "_Reading | None"]


@dataclass(frozen=True, slots=True)
class _Rule:
    name: str
    pattern: re.Pattern[str]
    resolve: Resolver


_RULE_SOURCES: tuple[tuple[str, str, Resolver], ...] = (
    ("blocked", r"\busa\s+today\b", _silent),
    (
        "ago",
        rf"\b{_QUAL}{_QUANT}\s+(?:(?P<half1>and\s+a\s+half)\s+)?(?P<unit>days?|weeks?|fortnights?|months?|years?)"
        r"(?:\s+(?P<half2>and\s+a\s+half))?\s+"
        r"(?P<dir>ago|back(?!\s+(?:in|on|at|to|into|when|then|home|from|and|with|up|down|out|over)\b)|from\s+now)\b",
        _resolve_ago,
    ),
    (
        "day_word",
        r"\b(?:(?P<edge>earlier|later)\s+)?(?P<word>(?:the\s+)?day\s+before\s+yesterday|(?:the\s+)?day\s+after\s+tomorrow"
        rf"|today|tonight|yesterday{_PART_OF_DAY}|tomorrow{_PART_OF_DAY}|last\s+night|this\s+(?:morning|afternoon|evening))\b",
        _resolve_day_word,
    ),
    (
        "period",
        r"\b(?:(?P<edge>earlier|later)\s+)?(?P<mod>this\s+past|this\s+coming|this|last|next)\s+(?P<unit>week|month|year)\b"
        r"(?!\s+of\b)",
        _resolve_period,
    ),
    (
        "before_last",
        r"\bthe\s+(?P<unit>weekend|week|month|year)\s+(?P<dir>before\s+last|after\s+next)\b"
        r"(?!\s+(?:weekend|week|month|year|night|monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b)",
        _resolve_before_last,
    ),
    ("this_time", r"\bthis\s+time\s+(?P<dir>last|next)\s+(?P<unit>week|month|year)\b", _resolve_this_time),
    (
        "weekend",
        r"\b(?P<mod>this\s+past|this\s+coming|the\s+past|this|last|next|over\s+the)\s+weekend\b",
        _resolve_weekend,
    ),
    (
        "span",
        rf"\b(?:the|this)\s+(?P<dir>past|last|next|coming)\s+(?:{_QUANT}\s+)?"
        r"(?P<unit>days|weeks?|fortnights?|months?|years?|decades?)\b(?:\s+or\s+so\b)?(?!\s+of\b)",
        _resolve_span,
    ),
    (
        "weekday",
        rf"\b(?P<mod>this\s+past|this\s+coming|this\s+last|this|last|next|on)\s+{_WD}{_PART_OF_DAY}\b(?!\s+of\b)"
        r"(?!\s+(?:mornings|afternoons|evenings|nights)\b)",
        _resolve_weekday,
    ),
    (
        "holiday",
        r"\b(?:(?P<mod>last|this\s+past|this\s+coming|this|next)\s+)?(?P<name>"
        r"(?:st\.?\s+|saint\s+)?valentine'?s'?\s+day|(?:st\.?|saint)\s+(?:patrick|paddy)'?s'?\s+day"
        r"|april\s+fools'?\s+day|cinco\s+de\s+mayo|independence\s+day|(?:the\s+)?(?:fourth|4th)\s+of\s+july"
        r"|halloween\s+night|christmas\s+eve|christmas\s+day|boxing\s+day|new\s+year'?s'?\s+eve|new\s+year'?s'?\s+day"
        r"|easter\s+sunday|easter\s+monday|good\s+friday|mother'?s'?\s+day|father'?s'?\s+day|memorial\s+day"
        r"|labou?r\s+day|thanksgiving\s+day)\b"
        rf"(?P<weekend>\s+weekend\b)?{_YEAR_TAIL}",
        _resolve_holiday,
    ),
    (
        "holiday_gated",
        r"\b(?P<mod>last|this\s+past|this\s+coming|this|next|on|for|at|over|during|around|since|before|after|until"
        r"|till|by|through|throughout)\s+(?P<name>christmas|xmas|halloween|thanksgiving|easter|new\s+year'?s"
        r"|valentine'?s|(?:st\.?|saint)\s+(?:patrick|paddy)'?s|black\s+friday)\b"
        rf"(?!'?[\s-]+(?:{_GATED_BLOCK}|day|eve|sunday|monday|night)\b)(?P<weekend>\s+weekend\b)?{_YEAR_TAIL}",
        _resolve_holiday,
    ),
    (
        "season",
        r"\b(?P<mod>this\s+past|this\s+coming|this|last|next)\s+(?P<season>spring|summer|fall|autumn|winter)\b",
        _resolve_season,
    ),
    (
        "month",
        rf"\b(?P<mod>in|during|this\s+past|this\s+coming|this|last|next)\s+(?:(?P<part>early|mid|late)[\s-]+)?{_MONTH}"
        rf"{_YEAR_TAIL}",
        _resolve_month,
    ),
    ("month_part", rf"\b(?P<part>early|mid|late)[\s-]+{_MONTH}{_YEAR_TAIL}", _resolve_month),
    (
        "month_day",
        rf"\b(?:(?:on\s+)?{_WD},?\s+)?{_MONTH}{_ABBREVIATION_DOT}\s+(?P<day>{_DAY_NUMBER}){_ORDINAL}\b"
        rf"(?:\s*(?:-|–|to|through|until)\s*(?P<day2>{_DAY_NUMBER}){_ORDINAL}\b)?(?P<year>,?\s+\d{{4}}\b)?",
        _resolve_month_day,
    ),
    (
        "day_month",
        rf"\b(?:the\s+)?(?P<day>{_DAY_NUMBER}){_ORDINAL}"
        rf"(?:\s*(?:-|–|to|through|until)\s*(?:the\s+)?(?P<day2>{_DAY_NUMBER}){_ORDINAL})?"
        rf"(?:\s+of)?\s+{_MONTH}{_ABBREVIATION_DOT}(?P<year>,?\s+\d{{4}}\b)?",
        _resolve_month_day,
    ),
    (
        "day_of_month",
        rf"\bthe\s+(?P<day>{_DAY_NUMBER})(?:st|nd|rd|th)\s+of\s+(?P<mod>last|this|next)\s+month\b",
        _resolve_day_of_month,
    ),
)

_RULES = tuple(_Rule(name, re.compile(source), resolve) for name, source, resolve in _RULE_SOURCES)
_GROUP_NAME = re.compile(r"\(\?P<\w+>")
_COMBINED = re.compile("|".join("(?:" + _GROUP_NAME.sub("(?:", source) + ")" for _, source, _ in _RULE_SOURCES))

_APOSTROPHES = ("’", "‘", "ʼ", "`")
# ASCII lower case and one apostrophe; every character maps to exactly one, so offsets are kept.
_NORMALISE = str.maketrans(
    {**{chr(code): chr(code + 32) for code in range(ord("A"), ord("Z") + 1)}, **dict.fromkeys(_APOSTROPHES, "'")}
)


# Every rule match holds one of these words (as a whole word, apostrophes and punctuation splitting words)
# within _WINDOW characters of its start; candidate starts are the word starts up to _WINDOW before one.
_KEYWORDS = frozenset(
    "day days week weeks weekend month months year years fortnight fortnights decade decades "
    "today tonight yesterday tomorrow night morning afternoon evening "
    "valentine valentines patrick patricks paddy paddys fools mayo july independence halloween christmas xmas "
    "boxing easter friday mother mothers father fathers memorial labor labour thanksgiving "
    "spring summer fall autumn winter".split()
) | frozenset(_WEEKDAY_INDEX) | frozenset(_MONTHS)
_KEYWORD_BYTES = frozenset(word.encode() for word in _KEYWORDS)
_WINDOW = 48
# UTF-8 bytes: ASCII letters and digits kept, everything else (punctuation, every non-ASCII byte) splits words.
_BYTE_SPLIT = bytes(code if chr(code).isascii() and chr(code).isalnum() else 32 for code in range(256))
_WORD_START = re.compile(r"\b\w")


def _longest_at(normal: str, start: int) -> tuple[_Rule, re.Match[str]] | None:
    """The longest rule match starting at `start` (ties: the earlier rule)."""
    best: tuple[_Rule, re.Match[str]] | None = None
    for rule in _RULES:
        match = rule.pattern.match(normal, start)
        if match is not None and (best is None or match.end() > best[1].end()):
            best = (rule, match)
    return best


def _scan_all(normal: str) -> list[tuple[_Rule, re.Match[str]]]:
    """Reference scan: the combined regex tried at every position (slow; kept to check `_matches`)."""
    found = []
    position = 0
    while (candidate := _COMBINED.search(normal, position)) is not None:
        best = _longest_at(normal, candidate.start())
        if best is None:  # cannot happen: the combined pattern matched here
            position = candidate.start() + 1
            continue
        found.append(best)
        position = max(best[1].end(), candidate.start() + 1)
    return found


def _keyword_starts(normal: str) -> list[int]:
    """Word starts up to _WINDOW characters before each keyword occurrence, sorted."""
    present = _KEYWORD_BYTES.intersection(normal.encode("utf-8", "ignore").translate(_BYTE_SPLIT).split())
    starts: set[int] = set()
    for word in map(bytes.decode, present):
        index = normal.find(word)
        while index >= 0:
            end = index + len(word)
            if (index == 0 or not normal[index - 1].isalnum()) and (end == len(normal) or not normal[end].isalnum()):
                starts.update(found.start() for found in _WORD_START.finditer(normal, max(0, index - _WINDOW), index + 1))
            index = normal.find(word, end)
    return sorted(starts)


def _normalise(text: str) -> str:
    """Lower case and one apostrophe, character for character (offsets are kept)."""
    lowered = text.lower()
    if len(lowered) != len(text):  # a character whose lower case is longer ("İ"): ASCII-only lowering
        return text.translate(_NORMALISE)
    for apostrophe in _APOSTROPHES:
        if apostrophe in lowered:
            lowered = lowered.replace(apostrophe, "'")
    return lowered


@lru_cache(maxsize=65536)
def _matches(text: str) -> tuple[tuple[_Rule, re.Match[str]], ...]:
    """Leftmost-longest rule matches, non-overlapping, on the normalised text (independent of the anchor).

    Same result as `_scan_all`, but the combined regex is only tried at word starts near a keyword: a
    full regex scan costs about a microsecond per character, the keyword search almost nothing.
    """
    normal = _normalise(text)
    found = []
    consumed = 0
    for start in _keyword_starts(normal):
        if start < consumed or _COMBINED.match(normal, start) is None:
            continue
        best = _longest_at(normal, start)
        if best is not None:
            found.append(best)
            consumed = best[1].end()
    return tuple(found)


def resolve_relative_dates(text: str, anchor: datetime | date) -> list[ResolvedDate]:
    """Every relative time expression in `text`, in text order, resolved against `anchor` (see the module doc)."""
    day = _as_date(anchor)
    resolved = []
    for rule, match in _matches(text):
        try:
            reading = rule.resolve(match, day, text)
        except (OverflowError, ValueError):  # far outside the calendar, e.g. "999 years ago" from year 1
            reading = None
        if reading is None:
            continue
        resolved.append(
            ResolvedDate(
                expression=text[match.start() : match.end()],
                start=reading.start,
                end=reading.end,
                approximate=reading.approximate,
                alternatives=reading.alternatives,
                note=reading.note,
                span=(match.start(), match.end()),
            )
        )
    return resolved


# --------------------------------------------------------------------------- descriptions

def _plural(count: int, unit: str) -> str:
    return f"{count} {unit}" if count == 1 else f"{count} {unit}s"


def _joined(*parts: tuple[int, str]) -> str:
    return " ".join(_plural(count, unit) for count, unit in parts if count)


def _weeks_days(days: int) -> str:
    weeks, rest = divmod(days, 7)
    return _joined((weeks, "week"), (rest, "day")) or "0 days"


def _calendar_months(earlier: date, later: date) -> tuple[int, int]:
    """Whole calendar months from `earlier` to `later`, rounded to the nearest (15 days or more round up),
    and whether the count is exact (1) or rounded (0)."""
    months = (later.year - earlier.year) * 12 + later.month - earlier.month
    if _add_months(earlier, months) > later:
        months -= 1
    rest = (later - _add_months(earlier, months)).days
    return months + (1 if rest >= 15 else 0), int(rest == 0)


def _months_years(earlier: date, later: date) -> str:
    months, exact = _calendar_months(earlier, later)
    if months == 0:
        return _plural((later - earlier).days, "day")
    years, rest = divmod(months, 12)
    return ("" if exact else "about ") + _joined((years, "year"), (rest, "month"))


def _detail(earlier: date, later: date) -> str:
    """The parenthesised breakdown of a distance, "" under a week."""
    days = (later - earlier).days
    if days < 7:
        return ""
    if days < 60:
        return _weeks_days(days)
    if days < 365:
        return f"{_weeks_days(days)}, {_months_years(earlier, later)}"
    return _months_years(earlier, later)


def describe_distance(
    day: date | datetime, reference: date | datetime, reference_name: str = "the question date"
) -> str:
    """How far `day` lies from `reference`, in calendar days.

    * the same day: `the same day as the question date`;
    * under a week: `1 day before ...`, `3 days after ...`;
    * 7 to 59 days: days, then weeks and days: `8 days (1 week 1 day) before the question date`;
    * 60 to 364 days: also calendar months, rounded to the nearest (a rest of 15
      days or more rounds up) and marked "about" unless exact:
      `75 days (10 weeks 5 days, about 2 months) before ...`;
    * a year or more: days, then years and months the same way:
      `400 days (about 1 year 1 month) before the question date`, `730 days (2 years) before ...`.
    """
    day, reference = _as_date(day), _as_date(reference)
    if day == reference:
        return f"the same day as {reference_name}"
    earlier, later = sorted((day, reference))
    days = (later - earlier).days
    detail = _detail(earlier, later)
    side = "before" if day < reference else "after"
    return f"{_plural(days, 'day')}{f' ({detail})' if detail else ''} {side} {reference_name}"


def _range_side(near: Range, far: Range, side: str, reference_name: str) -> str:
    """`16 to 17 days (2 weeks 2 days to 2 weeks 3 days) before ...`; each Range is (earlier, later)."""
    near_days, far_days = (near[1] - near[0]).days, (far[1] - far[0]).days
    if far_days < 7:
        detail = ""
    elif far_days < 365:
        detail = f"{_weeks_days(near_days)} to {_weeks_days(far_days)}"
    else:
        detail = f"{_months_years(*near)} to {_months_years(*far)}"
    return f"{near_days} to {far_days} days{f' ({detail})' if detail else ''} {side} {reference_name}"


def describe_range_distance(
    start: date, end: date, reference: date | datetime, reference_name: str = "the question date"
) -> str:
    """How far the inclusive range `start`..`end` lies from `reference` (nearer end first).

    `16 to 17 days (2 weeks 2 days to 2 weeks 3 days) before the question date`; a
    range that touches the reference starts at 0 (`0 to 6 days before ...`); one
    that contains it reads `from 10 days (1 week 3 days) before to 3 days after ...`.
    Ends a year or more away are given in years and months, as in `describe_distance`.
    """
    start, end, reference = _as_date(start), _as_date(end), _as_date(reference)
    if start == end:
        return describe_distance(start, reference, reference_name)
    if end <= reference:
        return _range_side((end, reference), (start, reference), "before", reference_name)
    if start >= reference:
        return _range_side((reference, start), (reference, end), "after", reference_name)
    before = describe_distance(start, reference, "").rstrip()
    after = describe_distance(end, reference, reference_name)
    return f"from {before} to {after}"


def _dates(start: date, end: date) -> str:
    return format_day(start) if start == end else f"{format_day(start)} to {format_day(end)}"


def format_resolution(resolved: ResolvedDate, question_date: date | datetime) -> str:
    """One item of a "Resolved dates" line, distances measured from `question_date`.

    `"last weekend" = 2023-05-13 (Saturday) to 2023-05-14 (Sunday), 16 to 17 days
    (2 weeks 2 days to 2 weeks 3 days) before the question date`. An approximate
    reading starts with "about"; an ambiguous one lists the other readings after
    ", or " and ends with its note in parentheses (a note on a vague number too).
    """
    about = "about " if resolved.approximate else ""
    readings = [
        f"{about}{_dates(start, end)}, {describe_range_distance(start, end, question_date)}"
        for start, end in ((resolved.start, resolved.end), *resolved.alternatives)
    ]
    expression = " ".join(resolved.expression.split())
    note = f" ({resolved.note})" if resolved.note else ""
    return f'"{expression}" = ' + ", or ".join(readings) + note


def format_resolved_line(resolved: list[ResolvedDate], question_date: date | datetime) -> str:
    """The one "Resolved dates: ..." line for a message (items joined by "; "), "" when there is none."""
    if not resolved:
        return ""
    return "Resolved dates: " + "; ".join(format_resolution(item, question_date) for item in resolved)
