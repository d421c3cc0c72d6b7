"""The console's pure parts: sessions (login key, expiry, CSRF, pending plans), rates
from two readings, and form fields. No web server, no Ray."""

from __future__ import annotations

import pytest

import rayq
from rayq.actors.protocol import MessageQueue, QueueStats
from rayq.admin.offset_reset import OffsetChange
from rayq.console.forms import check_shift, integer, reset_value, show_time, timestamp_ms
from rayq.console.rates import RateMeter, total
from rayq.console.sessions import SessionTable, check_login_key

KEY = bytes(range(32))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ------------------------------------------------------------------- sessions
def test_the_login_key_must_be_the_deployments() -> None:
    check_login_key(KEY, KEY.hex())
    check_login_key(KEY, f"  {KEY.hex().upper()}\n")  # as pasted from the key file
    for wrong, why in [
        ("", "enter the deployment key"),
        ("zz" * 32, "not a deployment key"),
        (KEY.hex()[:-2], "not a deployment key"),
        (bytes(32).hex(), "wrong deployment key"),
    ]:
        with pytest.raises(rayq.PermissionDeniedError, match=why):
            check_login_key(KEY, wrong)


def test_a_session_ends_when_idle_too_long_or_too_old_and_at_logout() -> None:
    clock = Clock()
    table = SessionTable(idle_s=60, max_age_s=300, clock=clock)
    sid = table.open(admin=object(), access_key="ops")
    clock.now += 59
    assert table.get(sid) is not None  # a request restarts its idle time
    clock.now += 59
    assert table.get(sid) is not None
    clock.now += 61
    assert table.get(sid) is None  # idle past 60 s: gone
    assert table.get(sid) is None

    old = table.open(admin=object(), access_key="ops")
    for _ in range(6):
        clock.now += 50
        assert table.get(old) is not None
    clock.now += 1
    assert table.get(old) is None  # 300 s after its login, however busy

    sid = table.open(admin=object(), access_key="")
    table.close(sid)
    assert table.get(sid) is None and len(table) == 0
    assert table.get(None) is None and table.get(123) is None


def test_forms_need_the_sessions_csrf_token_and_plans_are_confirmed_once() -> None:
    table = SessionTable()
    session = table.get(table.open(admin=object(), access_key=""))
    assert session is not None
    session.check_csrf(session.csrf)
    for bad in ("", "x", session.csrf + "x"):
        with pytest.raises(rayq.PermissionDeniedError, match="stale"):
            session.check_csrf(bad)
    plan_id = session.keep("plan")
    assert session.take(plan_id) == "plan"
    with pytest.raises(rayq.InvalidRequestError, match="no plan"):
        session.take(plan_id)
    ids = [session.keep(i) for i in range(20)]
    with pytest.raises(rayq.InvalidRequestError):
        session.take(ids[0])  # only the last 16 are kept
    assert session.take(ids[-1]) == 19


def test_session_lifetimes_must_be_positive() -> None:
    with pytest.raises(rayq.ConfigError, match="> 0"):
        SessionTable(idle_s=0)


# ---------------------------------------------------------------------- rates
def stats(*max_offsets: int) -> list[QueueStats]:
    return [
        QueueStats(
            queue=MessageQueue("t", "broker-a", i),
            min_offset=0,
            max_offset=m,
            last_store_timestamp=0,
        )
        for i, m in enumerate(max_offsets)
    ]


def test_rates_come_from_two_readings_of_the_max_offsets() -> None:
    clock = Clock()
    meter = RateMeter(window_s=600, min_interval_s=1, clock=clock)
    first = meter.observe(stats(10, 0))
    assert list(first.values()) == [None, None] and total(first) is None
    clock.now += 10
    second = meter.observe(stats(110, 50))
    assert list(second.values()) == [10.0, 5.0] and total(second) == 15.0
    clock.now += 0.5  # too soon: the rate shown before, the reading kept
    assert list(meter.observe(stats(500, 50)).values()) == [10.0, 5.0]
    clock.now += 9.5
    assert list(meter.observe(stats(210, 50)).values()) == [10.0, 0.0]
    clock.now += 10
    assert list(meter.observe(stats(5, 60)).values()) == [None, 1.0]  # q0 went down
    clock.now += 601
    assert list(meter.observe(stats(6, 61)).values()) == [None, None]  # too old to compare


# ---------------------------------------------------------------------- forms
def test_integer_fields_say_what_they_take() -> None:
    assert integer({"n": " 42 "}, "n", "n") == 42
    assert integer({}, "n", "n", default=7) == 7
    with pytest.raises(
        rayq.InvalidRequestError, match="the offset must be a whole number, got 'ten'"
    ):
        integer({"n": "ten"}, "n", "the offset")
    with pytest.raises(rayq.InvalidOffsetError, match=r"must be in 0\.\.10, got -1"):
        integer({"n": "-1"}, "n", "x", hi=10, error=rayq.InvalidOffsetError)


def test_times_are_ms_or_iso_dates_in_utc() -> None:
    assert timestamp_ms("1700000000000", "t") == 1_700_000_000_000
    assert timestamp_ms("2023-11-14T22:13:20", "t") == 1_700_000_000_000
    assert timestamp_ms("2023-11-14T23:13:20+01:00", "t") == 1_700_000_000_000
    assert show_time(1_700_000_000_123) == "2023-11-14 22:13:20.123 UTC"
    assert show_time(0) == "-"
    for bad, why in [
        ("", "empty"),
        ("yesterday", "date and time like"),
        ("1969-01-01T00:00", "before 1970"),
    ]:
        with pytest.raises(rayq.InvalidRequestError, match=why):
            timestamp_ms(bad, "the time")


def test_reset_values_per_kind() -> None:
    assert reset_value("earliest", "ignored") is None
    assert reset_value("offset", "12") == 12
    assert reset_value("shift", "-3") == -3
    assert reset_value("shift", "+3") == 3
    assert reset_value("time", "1700000000000") == 1_700_000_000_000
    with pytest.raises(rayq.InvalidOffsetError, match="whole number, got 'abc'"):
        reset_value("offset", "abc")
    with pytest.raises(rayq.InvalidOffsetError, match="must be in 0"):
        reset_value("offset", "-1")
    with pytest.raises(rayq.InvalidOffsetError, match="one of earliest"):
        reset_value("sideways", "1")


def test_a_shift_past_a_queues_bounds_is_refused_with_what_fits() -> None:
    q0, q1 = MessageQueue("t", "b", 0), MessageQueue("t", "b", 1)
    bounds = {q0: (0, 10), q1: (4, 10)}
    check_shift([OffsetChange(q0, 5, 2), OffsetChange(q1, 8, 5)], -3, bounds)
    with pytest.raises(
        rayq.InvalidOffsetError, match=r"from 5 to -1, before its first offset 0: shift by -5"
    ):
        check_shift([OffsetChange(q0, 5, 0)], -6, bounds)
    with pytest.raises(rayq.InvalidOffsetError, match=r"past its last offset 10: shift by \+2"):
        check_shift([OffsetChange(q0, 8, 10)], 3, bounds)
    # nothing committed: a shift starts at the queue's first offset
    check_shift([OffsetChange(q1, -1, 6)], 2, bounds)
    with pytest.raises(rayq.InvalidOffsetError, match="from 4 to 3"):
        check_shift([OffsetChange(q1, -1, 4)], -1, bounds)
