"""Reading the console's form fields: each bad value is a rayq error whose message
names the field and says what it takes, and the page shows it (HTTP 400) having
changed nothing.

Times are taken as milliseconds since the epoch or as an ISO 8601 date and time
(``2026-11-28T09:30``, what a browser's ``datetime-local`` field sends), read as UTC
when it names no zone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Final

from rayq.actors.protocol import MessageQueue
from rayq.admin.offset_reset import RESET_TO, OffsetChange
from rayq.store.errors import InvalidOffsetError, InvalidRequestError, RayqError

INT_MAX: Final[int] = 2**63 - 1
MAX_NUM_MAX: Final[int] = 1000  # messages one lookup shows


def text(form: Mapping[str, str], name: str, what: str) -> str:
    """The field ``name``, stripped; InvalidRequestError when it is empty."""
    value = str(form.get(name, "")).strip()
    if not value:
        raise InvalidRequestError(f"{what} is empty: enter one")
    return value


def optional_text(form: Mapping[str, str], name: str) -> str | None:
    value = str(form.get(name, "")).strip()
    return value or None


def integer(
    form: Mapping[str, str],
    name: str,
    what: str,
    *,
    lo: int = 0,
    hi: int = INT_MAX,
    default: int | None = None,
    error: type[RayqError] = InvalidRequestError,
) -> int:
    """The field ``name`` as a whole number in ``lo..hi`` (``default`` when it is empty
    and one is given); ``error`` else."""
    raw = str(form.get(name, "")).strip()
    if not raw and default is not None:
        return default
    try:
        value = int(raw.replace("_", ""), 10)
    except ValueError:
        raise error(f"{what} must be a whole number, got {raw!r}", value=raw) from None
    if not lo <= value <= hi:
        raise error(f"{what} must be in {lo}..{hi}, got {value}", value=raw)
    return value


def timestamp_ms(raw: str, what: str) -> int:
    """``raw`` (ms since the epoch, or an ISO 8601 date and time, UTC unless it says)
    as ms since the epoch; InvalidRequestError else."""
    raw = raw.strip()
    if not raw:
        raise InvalidRequestError(f"{what} is empty: enter a date and time or ms since the epoch")
    if raw.isdigit():
        value = int(raw)
        if value > INT_MAX:
            raise InvalidRequestError(f"{what} is too large: {raw}", value=raw)
        return value
    try:
        when = dt.datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidRequestError(
            f"{what} must be a date and time like 2026-11-28T09:30 (UTC) or ms since the "
            f"epoch, got {raw!r}",
            value=raw,
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    ms = int(when.timestamp() * 1000)
    if ms < 0:
        raise InvalidRequestError(f"{what} is before 1970: {raw!r}", value=raw)
    return ms


def show_time(ms: int) -> str:
    """``ms`` since the epoch as ``2026-11-28 09:30:00.123 UTC`` ("-" for 0)."""
    if ms <= 0:
        return "-"
    when = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"


def reset_value(to: str, raw: str) -> int | None:
    """The value an offset reset ``to`` needs, read from the form's ``raw`` text:
    none for earliest and latest, an offset, +/- N for a shift, a time for time."""
    if to not in RESET_TO:
        raise InvalidOffsetError(f"reset to must be one of {', '.join(RESET_TO)}, got {to!r}")
    if to in ("earliest", "latest"):
        return None
    if to == "time":
        return timestamp_ms(raw, "the time to reset to")
    what = "the offset" if to == "offset" else "the shift (+/- N messages)"
    lo = 0 if to == "offset" else -INT_MAX
    return integer({"v": raw.replace("+", "", 1)}, "v", what, lo=lo, error=InvalidOffsetError)


def check_shift(
    plan: list[OffsetChange], shift: int, bounds: Mapping[MessageQueue, tuple[int, int]]
) -> None:
    """InvalidOffsetError when a shift by ``shift`` moves a queue of ``plan`` past its
    ``bounds`` (min, max offset): ``Admin.reset_offsets`` would clamp it there, the
    console asks for a shift that fits (or earliest/latest) instead. A shift starts at
    the committed offset, or at the queue's min offset when nothing is committed."""
    for change in plan:
        lo, hi = bounds.get(change.queue, (change.target, change.target))
        base = change.current if change.current >= 0 else lo
        wanted = base + shift
        if lo <= wanted <= hi:
            continue
        q = change.queue
        edge = f"before its first offset {lo}" if wanted < lo else f"past its last offset {hi}"
        fits = (lo if wanted < lo else hi) - base
        raise InvalidOffsetError(
            f"a shift by {shift:+d} moves queue {q.queue_id} of {q.topic!r} on {q.broker_name} "
            f"from {base} to {wanted}, {edge}: shift by {fits:+d} at most there, or reset "
            f"to {'earliest' if wanted < lo else 'latest'}",
            value=str(shift),
        )
