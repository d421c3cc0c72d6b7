"""Delayed delivery (store/schedule.py) with a fake clock and small delay tables."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.protocol.delay_levels import (
    DEFAULT_DELAY_LEVELS,
    DELIVER_AT_QUEUE_ID,
    DelayLevels,
)
from rayq.actors.server.schedule import SCHEDULE_TICK_MS, ScheduleService
from rayq.actors.server.table_files import SCHEDULE_TOPIC, DelayOffsetFile
from rayq.actors.server.tables import ConfigStore
from rayq.store import FakeClock, InnerMessage, MessageStore, StoreConfig, UniqIdGenerator
from rayq.store import properties as P
from rayq.store.batch import encode_batch
from rayq.store.codec import decode_records
from rayq.store.errors import ConfigError
from rayq.store.message import COMPRESSED_FLAG, MessageExt, PutStatus

IDS = UniqIdGenerator()
CONFIG = StoreConfig.for_tests()
LIMITS = {"max_body_bytes": 16 * 1024, "max_properties_bytes": 4096}


class Broker:
    """A store, its config tables and a schedule service on one directory, reopenable."""

    def __init__(self, root: Path, clock: FakeClock, spec: str = "1s 2s 3s") -> None:
        self.root, self.clock, self.spec = root, clock, spec
        self.open()

    def open(self) -> None:
        self.store = MessageStore(self.root, CONFIG, clock=self.clock)
        self.tables = ConfigStore(self.root)
        self.svc = ScheduleService(
            self.store, self.tables.delay_offsets, DelayLevels.parse(self.spec)
        )

    def close(self, persist: bool = True) -> None:
        if persist:
            self.svc.sync_progress()
            self.tables.close()
        self.store.close()

    def reopen(self, persist: bool = True) -> None:
        self.close(persist)
        self.open()

    def read(self, topic: str = "t", queue_id: int = 0) -> list[MessageExt]:
        got = self.store.get_messages("g", topic, queue_id, 0, 1000)
        return decode_records(got.buffer) if got.count else []

    def advance_and_tick(self, ms: int) -> dict[tuple[str, int], int]:
        self.clock.advance(ms)
        return self.svc.tick()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path / "store", FakeClock())
    yield b
    b.close()


def msg(
    body: bytes = b"x",
    *,
    level: int = 0,
    at: int | None = None,
    key: str = "k",
    topic: str = "t",
    queue_id: int = 0,
    **props: str,
) -> InnerMessage:
    properties = dict(props)
    if level:
        properties[P.DELAY] = str(level)
    if at is not None:
        properties[P.DELIVER_AT_MS] = str(at)
    return InnerMessage(
        topic=topic,
        queue_id=queue_id,
        body=body,
        tags="TagA",
        keys=key,
        uniq_key=IDS.next_id(),
        properties=properties,
    )


# ---------------------------------------------------------------- delay table
def test_default_table_is_rocketmqs_eighteen_levels() -> None:
    assert DEFAULT_DELAY_LEVELS.count == 18
    assert DEFAULT_DELAY_LEVELS.delay_ms(1) == 1000
    assert DEFAULT_DELAY_LEVELS.delay_ms(3) == 10_000
    assert DEFAULT_DELAY_LEVELS.delay_ms(18) == 2 * 3600 * 1000
    assert BrokerConfig().delay_levels.delays_ms == DEFAULT_DELAY_LEVELS.delays_ms


def test_units_and_clamping() -> None:
    levels = DelayLevels.parse(" 2s  3m\t1h 1d ")
    assert levels.delays_ms == (2000, 180_000, 3_600_000, 86_400_000)
    assert levels.clamp(9) == 4
    assert levels.delay_ms(99) == 86_400_000


@pytest.mark.parametrize("spec", ["", "   ", "1x", "0s", "5", "s", "1.5s", "-1s", "1s 2", 7, None])
def test_a_bad_delay_table_is_a_config_error(spec: object) -> None:
    with pytest.raises(ConfigError, match="message_delay_level"):
        DelayLevels.parse(spec)


def test_broker_config_rejects_a_bad_delay_table_at_config_time() -> None:
    with pytest.raises(ConfigError, match="entry 2"):
        BrokerConfig(message_delay_level="1s 2q")
    with pytest.raises(ConfigError):
        BrokerConfig.from_dict({"message_delay_level": "soon"})
    assert BrokerConfig(message_delay_level="1s 1s").delay_levels.count == 2


# ------------------------------------------------------------- batch marking
def test_encode_batch_marks_only_batches_with_a_scheduled_message() -> None:
    plain = encode_batch([msg(), msg()], **LIMITS)
    shared = encode_batch([msg(level=2), msg(level=2)], **LIMITS)  # one shared property dict
    mixed = encode_batch([msg(), msg(at=5)], **LIMITS)
    assert not plain.scheduled
    assert shared.scheduled and mixed.scheduled


# --------------------------------------------------------------- delay levels
def test_a_delayed_message_waits_in_its_level_queue_then_arrives(broker: Broker) -> None:
    res = broker.svc.put_batch(encode_batch([msg(b"late", level=2, key="k1")], **LIMITS))
    assert res.ok
    assert broker.read() == []
    parked = broker.read(SCHEDULE_TOPIC, 1)
    assert len(parked) == 1
    assert parked[0].properties[P.REAL_TOPIC] == "t"
    assert parked[0].properties[P.REAL_QID] == "0"

    assert broker.advance_and_tick(1999) == {}
    assert broker.read() == []  # not before its time
    assert broker.advance_and_tick(1) == {("t", 0): 1}
    [got] = broker.read()
    assert got.body == b"late" and got.tags == "TagA" and got.keys == ["k1"]
    assert got.msg_id == res.msg_ids[0]  # UNIQ_KEY kept
    assert not {P.DELAY, P.REAL_TOPIC, P.REAL_QID} & got.properties.keys()
    assert got.store_timestamp == broker.clock.now_ms()
    assert [m.msg_id for m in broker.store.query_message("t", "k1")] == [got.msg_id]
    assert broker.store.view_message(got.msg_id, "t").queue_offset == 0
    assert broker.advance_and_tick(10_000) == {}  # delivered once


def test_a_mixed_batch_sends_plain_messages_at_once(broker: Broker) -> None:
    res = broker.svc.put([msg(b"now"), msg(b"later", level=1), msg(b"now2")])
    assert res.ok
    assert [m.body for m in broker.read()] == [b"now", b"now2"]
    broker.advance_and_tick(1000)
    assert [m.body for m in broker.read()] == [b"now", b"now2", b"later"]


def test_levels_above_the_table_are_clamped_to_the_last(broker: Broker) -> None:
    broker.svc.put([msg(level=7)])
    [parked] = broker.read(SCHEDULE_TOPIC, 2)
    assert parked.properties[P.DELAY] == "3"
    broker.advance_and_tick(2999)
    assert broker.read() == []
    broker.advance_and_tick(1)
    assert len(broker.read()) == 1


def test_a_level_delivers_in_arrival_order_only_what_is_due(broker: Broker) -> None:
    broker.svc.put([msg(b"a", level=3)])
    broker.clock.advance(1000)
    broker.svc.put([msg(b"b", level=3)])
    broker.advance_and_tick(2000)
    assert [m.body for m in broker.read()] == [b"a"]
    broker.advance_and_tick(999)
    assert [m.body for m in broker.read()] == [b"a"]
    broker.advance_and_tick(1)
    assert [m.body for m in broker.read()] == [b"a", b"b"]


def test_compressed_bodies_and_record_fields_survive_the_detour(broker: Broker) -> None:
    body = b"compress me " * 100
    m = msgspec.structs.replace(
        msg(level=1),
        body=zlib.compress(body),
        sys_flag=COMPRESSED_FLAG,
        flag=7,
        born_timestamp=123,
        reconsume_times=2,
    )
    broker.svc.put([m])
    broker.advance_and_tick(1000)
    [got] = broker.read()
    assert got.body == body and got.flag == 7 and got.born_timestamp == 123
    assert got.reconsume_times == 2


def test_next_wait_sleeps_until_the_head_is_due_but_at_most_one_tick(broker: Broker) -> None:
    assert broker.svc.next_wait_ms() == SCHEDULE_TICK_MS
    broker.svc.put([msg(at=broker.clock.now_ms() + 40)])
    broker.svc.tick()
    assert broker.svc.next_wait_ms() == 40
    broker.svc.put([msg(level=1)])
    broker.advance_and_tick(40)
    assert broker.svc.next_wait_ms() == SCHEDULE_TICK_MS  # level head due in 960 ms


def test_bad_schedule_properties_are_refused_and_nothing_is_written(broker: Broker) -> None:
    now = broker.clock.now_ms()
    for bad in (
        msg(**{P.DELAY: "soon"}),
        msg(at=now + 4 * 86_400_000),
        msg(**{P.DELIVER_AT_MS: "x"}),
        msg(level=1, at=now),
    ):
        res = broker.svc.put([msg(b"fine"), bad])
        assert res.status is PutStatus.MESSAGE_ILLEGAL, bad
        assert res.error
    assert broker.read() == [] and broker.store.topics() == []


def test_level_zero_or_negative_is_not_delayed(broker: Broker) -> None:
    broker.svc.put([msg(**{P.DELAY: "0"}), msg(**{P.DELAY: "-2"})])
    assert len(broker.read()) == 2


def test_a_deleted_real_topic_drops_its_due_messages(tmp_path: Path) -> None:
    clock = FakeClock()
    store = MessageStore(tmp_path, CONFIG, clock=clock)
    tables = ConfigStore(tmp_path)
    svc = ScheduleService(
        store, tables.delay_offsets, DelayLevels.parse("1s"), accept=lambda topic: topic != "gone"
    )
    svc.put([msg(level=1, topic="gone"), msg(level=1)])
    clock.advance(1000)
    assert svc.tick() == {("t", 0): 1}
    assert store.max_offset("gone", 0) == 0
    assert tables.delay_offsets.get(1) == 2
    store.close()


# --------------------------------------------------------------- deliver_at
def test_deliver_at_messages_arrive_in_time_order_never_early(broker: Broker) -> None:
    t0 = broker.clock.now_ms()
    broker.svc.put([msg(b"3", at=t0 + 3000), msg(b"1", at=t0 + 1000), msg(b"2", at=t0 + 2000)])
    assert broker.read(SCHEDULE_TOPIC, DELIVER_AT_QUEUE_ID) != []
    seen = []
    for _ in range(35):
        broker.advance_and_tick(100)
        for m in broker.read()[len(seen) :]:
            seen.append((m.body, m.store_timestamp))
    assert [b for b, _ in seen] == [b"1", b"2", b"3"]
    for body, stored in seen:
        assert stored >= t0 + int(body) * 1000  # never before its time
        assert stored < t0 + int(body) * 1000 + 100  # within one tick
    assert all(P.DELIVER_AT_MS not in m.properties for m in broker.read())


def test_deliver_at_in_the_past_is_delivered_on_the_next_tick(broker: Broker) -> None:
    broker.svc.put([msg(at=0)])
    assert broker.svc.tick() == {("t", 0): 1}


def test_deliver_at_progress_survives_a_restart(broker: Broker) -> None:
    t0 = broker.clock.now_ms()
    broker.svc.put([msg(b"%d" % s, at=t0 + s * 1000) for s in (5, 1, 4, 2, 3)])
    broker.advance_and_tick(2000)
    assert [m.body for m in broker.read()] == [b"1", b"2"]
    broker.reopen()
    saved = json.loads((broker.root / "config" / "delayOffset.json").read_bytes())
    assert saved["deliver_at"] == {"low_offset": 0, "last_due_ms": t0 + 2000, "last_offset": 3}
    assert broker.svc.stats().deliver_at_pending == 3
    broker.svc.put([msg(b"late", at=t0)])  # its due time is raised past what was delivered
    broker.svc.tick()
    assert [m.body for m in broker.read()] == [b"1", b"2", b"late"]
    broker.advance_and_tick(3000)
    broker.reopen()
    broker.advance_and_tick(10_000)
    assert [m.body for m in broker.read()] == [b"1", b"2", b"late", b"3", b"4", b"5"]
    assert broker.svc.stats().deliver_at_pending == 0


# --------------------------------------------------------------- persistence
def test_level_progress_survives_a_restart(broker: Broker) -> None:
    broker.svc.put([msg(b"a", level=1), msg(b"b", level=2), msg(b"c", level=3)])
    broker.advance_and_tick(2000)
    broker.reopen()
    assert broker.tables.delay_offsets.get(1) == 1 and broker.tables.delay_offsets.get(2) == 1
    broker.advance_and_tick(0)
    assert [m.body for m in broker.read()] == [b"a", b"b"]  # nothing delivered twice
    broker.advance_and_tick(1000)
    assert [m.body for m in broker.read()] == [b"a", b"b", b"c"]


def test_without_a_persist_a_crash_delivers_again_never_loses(broker: Broker) -> None:
    """At-least-once: what was delivered since the last persist is delivered again."""
    t0 = broker.clock.now_ms()
    broker.svc.put([msg(b"lvl", level=1), msg(b"at", at=t0 + 500)])
    broker.advance_and_tick(1000)
    broker.store.crash()
    broker.open()
    broker.svc.tick()
    assert sorted(m.body for m in broker.read()) == [b"at", b"at", b"lvl", b"lvl"]


def test_a_shrunk_table_still_delivers_messages_of_removed_levels(tmp_path: Path) -> None:
    b = Broker(tmp_path, FakeClock(), spec="1s 2s 3s")
    b.svc.put([msg(level=3)])
    b.close()
    b.spec = "1s"
    b.open()
    b.advance_and_tick(999)
    assert b.read() == []
    b.advance_and_tick(1)
    assert len(b.read()) == 1
    b.close()


def test_delay_offset_files_without_deliver_at_still_load(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "delayOffset.json").write_text('{"offset_table": {"1": 7}}')
    tables = ConfigStore(tmp_path)
    assert tables.delay_offsets.get(1) == 7
    assert tables.delay_offsets.deliver_at.low_offset == 0
    assert (
        msgspec.json.decode(b'{"offset_table": {}}', type=DelayOffsetFile).deliver_at.last_offset
        == -1
    )


# ------------------------------------------------------- tampered raw batches


def test_a_batch_marked_scheduled_without_any_delay_is_refused(broker: Broker) -> None:
    """put_batch of a batch claiming ``scheduled`` with no DELAY/__DELIVER_AT_MS record."""
    plain = encode_batch([msg(b"a"), msg(b"b")], **LIMITS)
    tampered = msgspec.structs.replace(plain, scheduled=True)

    res = broker.svc.put_batch(tampered)

    assert res.status is PutStatus.MESSAGE_ILLEGAL
    assert "marked scheduled" in res.error and P.DELAY in res.error
    assert broker.read() == [] and broker.store.topics() == []


def test_a_scheduled_batch_with_wrong_tag_codes_is_refused_not_raised(broker: Broker) -> None:
    batch = encode_batch([msg(b"a", level=1), msg(b"b")], **LIMITS)
    tampered = msgspec.structs.replace(batch, tags_codes=bytes(len(batch.tags_codes)))

    res = broker.svc.put_batch(tampered)

    assert res.status is PutStatus.MESSAGE_ILLEGAL
    assert "tag hash" in res.error
    assert broker.store.topics() == []


def test_an_honest_scheduled_batch_still_parks_its_delayed_records(broker: Broker) -> None:
    batch = encode_batch([msg(b"later", level=1), msg(b"now")], **LIMITS)
    assert batch.scheduled

    assert broker.svc.put_batch(batch).ok
    assert [m.body for m in broker.read()] == [b"now"]
    broker.advance_and_tick(1000)
    assert [m.body for m in broker.read()] == [b"now", b"later"]
