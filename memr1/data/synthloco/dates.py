"""Session dates in LoCoMo's format, and the relative time expressions that turns use.

A fact turn may say when something happened relative to the session ("I adopted a dog yesterday").
The gold answer to "When did ...?" is then the absolute date at the precision the turn gave: a day
("7 May 2023"), a month ("April 2023") or a year ("2022"), the way LoCoMo's annotators resolved
"yesterday" and "last year". :class:`EventDate` holds such a date and knows its precision.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random

# How LoCoMo writes session times: "1:56 pm on 8 May, 2023". Parse with this strptime format.
LOCOMO_DATE_FORMAT = "%I:%M %p on %d %B, %Y"

MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip

# The relative expressions a fact turn can use, with the precision they resolve to.
DAY_OFFSETS = {"today": 0, "yesterday": 1, "two days ago": 2}
MONTH_EXPRESSION = "last month"
YEAR_EXPRESSION = "last year"
EXPRESSIONS = (*DAY_OFFSETS, MONTH_EXPRESSION, YEAR_EXPRESSION)


def format_date_time(moment: dt.datetime) -> str:
    """Writes a session time as LoCoMo does: 12-hour clock, lower-case am/pm, unpadded day."""
    hour = moment.hour % 12 or 12
    suffix = "am" if moment.hour < 12 else "pm"
    return f"{hour}:{moment.minute:02d} {suffix} on {format_day(moment.date(), comma=True)}"


def parse_date_time(text: str) -> dt.datetime:
    """Parses a LoCoMo session time ("1:56 pm on 8 May, 2023")."""
    return dt.datetime.strptime(text, LOCOMO_DATE_FORMAT)


def format_day(day: dt.date, comma: bool = False) -> str:
    """Writes "8 May 2023", or LoCoMo's event-summary form "8 May, 2023" with ``comma``."""
    separator = ", " if comma else " "
    return f"{day.day} {MONTHS[day.month - 1]}{separator}{day.year}"


def month_year(year: int, month: int) -> str:
    """Writes "September 2023"."""
    return f"{MONTHS[month - 1]} {year}"


def session_times(
    rng: random.Random, count: int, gap_days: tuple[int, int], years: range
) -> list[dt.datetime]:
    """Draws ``count`` strictly increasing session datetimes.

    The first session falls on a random day of one of ``years``; each later one comes
    ``gap_days`` (inclusive range) days after the previous one, at a random minute of the day.
    """
    start = dt.date(rng.choice(list(years)), 1, 1) + dt.timedelta(days=rng.randrange(365))
    days = [start]
    for _ in range(count - 1):
        days.append(days[-1] + dt.timedelta(days=rng.randint(*gap_days)))
    return [dt.datetime.combine(day, dt.time(rng.randrange(24), rng.randrange(60))) for day in days]


@dataclasses.dataclass(frozen=True, order=True)
class EventDate:
    """When an event happened, known to the day, the month or only the year.

    ``month`` and ``day`` are None beyond the precision the speaker gave. Ordering compares
    (year, month, day) with missing parts first; use :meth:`before_end_of` to reason about a
    date of unknown precision.
    """

    year: int
    month: int | None = None
    day: int | None = None

    @classmethod
    def of_day(cls, day: dt.date) -> EventDate:
        """The date of a known day."""
        return cls(day.year, day.month, day.day)

    def answer(self) -> str:
        """The gold answer form: "7 May 2023", "April 2023" or "2022"."""
        if self.day is not None:
            return format_day(dt.date(self.year, self.month, self.day))
        if self.month is not None:
            return month_year(self.year, self.month)
        return str(self.year)

    def phrase(self) -> str:
        """The form used inside a memory: "on 7 May 2023", "in April 2023", "in 2022"."""
        return f"on {self.answer()}" if self.day is not None else f"in {self.answer()}"

    def before_end_of(self, year: int, month: int) -> bool | None:
        """Whether the event surely happened by the end of ``month``/``year``.

        Returns True or False when that is certain, and None when the precision is too coarse to
        tell (a year-only date in the same year as the month asked about, other than December).
        """
        if self.month is None:
            if self.year != year:
                return self.year < year
            return True if month == 12 else None
        return (self.year, self.month) <= (year, month)


def resolve(expression: str, session_day: dt.date) -> EventDate:
    """Turns a relative time expression said on ``session_day`` into an absolute EventDate.

    "yesterday" on 8 May 2023 gives 7 May 2023; "last month" gives April 2023; "last year" gives
    2022. Raises ValueError for an expression the generator does not use.
    """
    if expression in DAY_OFFSETS:
        return EventDate.of_day(session_day - dt.timedelta(days=DAY_OFFSETS[expression]))
    if expression == MONTH_EXPRESSION:
        first_of_month = session_day.replace(day=1)
        previous = first_of_month - dt.timedelta(days=1)
        return EventDate(previous.year, previous.month)
    if expression == YEAR_EXPRESSION:
        return EventDate(session_day.year - 1)
    raise ValueError(f"unknown relative time expression {expression!r}; expected {EXPRESSIONS}")


def months_between(first: dt.date, last: dt.date) -> list[tuple[int, int]]:
    """Lists the (year, month) pairs from ``first``'s month to ``last``'s month, inclusive."""
    months = []
    year, month = first.year, first.month
    while (year, month) <= (last.year, last.month):
        months.append((year, month))
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return months
