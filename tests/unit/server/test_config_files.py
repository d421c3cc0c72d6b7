"""The JSON config files: round trips, the .bak fallback, dirty tracking and table semantics."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rayq.actors.server.table_files import (
    CONSUMER_OFFSET_FILE_NAME,
    DELAY_OFFSET_FILE_NAME,
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    SUBSCRIPTION_GROUP_FILE_NAME,
    TOPICS_FILE_NAME,
    ConsumerOffsetFile,
    DeliverAtProgress,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicsFile,
    is_readable,
    is_writeable,
)
from rayq.actors.server.tables import ConfigStore, ConsumerOffsetTable, TopicConfigTable
from rayq.store.errors import (
    ClosedError,
    ConfigError,
    InvalidGroupError,
    InvalidMessageError,
    InvalidOffsetError,
    InvalidTopicError,
    StoreError,
)
from rayq.store.json_file import JsonFile, encode_json, lenient_json

LOGGER_NAME = "rayq.actors.server.tables"


def topics_path(root: Path) -> Path:
    return root / "config" / TOPICS_FILE_NAME


def save_two_generations(root: Path) -> None:
    """topics.json ends holding topics a and b; topics.json.bak holds only a."""
    with ConfigStore(root) as store:
        store.topics.put(TopicConfig(topic_name="a", read_queue_nums=3, write_queue_nums=3))
    with ConfigStore(root) as store:
        store.topics.put(TopicConfig(topic_name="b"))


# --- round trips ---------------------------------------------------------------------------------


def test_topic_table_round_trips_through_a_fresh_store(tmp_path: Path) -> None:
    ordered = TopicConfig(topic_name="orders", read_queue_nums=8, write_queue_nums=2, order=True)
    readonly = TopicConfig(topic_name="audit", perm=PERM_READ, topic_sys_flag=3)
    with ConfigStore(tmp_path) as store:
        store.topics.put(ordered)
        store.topics.put(readonly)
        version = store.topics.data_version

    reopened = ConfigStore(tmp_path)

    assert reopened.topics.topics() == ["audit", "orders"]
    assert reopened.topics.get("orders") == ordered
    assert reopened.topics.get("audit") == readonly
    assert reopened.topics.data_version == version == 2
    assert not reopened.topics.dirty


def test_subscription_group_table_round_trips_through_a_fresh_store(tmp_path: Path) -> None:
    group = SubscriptionGroupConfig(
        group_name="billing", consume_broadcast_enable=False, retry_max_times=3, broker_id=1
    )
    with ConfigStore(tmp_path) as store:
        store.subscription_groups.put(group)
        store.subscription_groups.put(SubscriptionGroupConfig(group_name="audit"))

    reopened = ConfigStore(tmp_path)

    assert reopened.subscription_groups.groups() == ["audit", "billing"]
    assert reopened.subscription_groups.get("billing") == group
    assert reopened.subscription_groups.data_version == 2


def test_consumer_offsets_round_trip_with_queue_ids_back_as_ints(tmp_path: Path) -> None:
    with ConfigStore(tmp_path) as store:
        store.consumer_offsets.commit_many("g1", "t1", {0: 10, 1: 11, 10: 20})
        store.consumer_offsets.commit("g2", "t1", 3, 7)
    raw = json.loads((tmp_path / "config" / CONSUMER_OFFSET_FILE_NAME).read_bytes())

    reopened = ConfigStore(tmp_path)

    assert raw["offset_table"]["t1@g1"] == {"0": 10, "1": 11, "10": 20}
    assert reopened.consumer_offsets.query_all("g1", "t1") == {0: 10, 1: 11, 10: 20}
    assert all(
        type(queue_id) is int for queue_id in reopened.consumer_offsets.query_all("g1", "t1")
    )
    assert reopened.consumer_offsets.query("g2", "t1", 3) == 7


def test_delay_offsets_round_trip_through_a_fresh_store(tmp_path: Path) -> None:
    with ConfigStore(tmp_path) as store:
        store.delay_offsets.set(1, 100)
        store.delay_offsets.set(18, 5)

    reopened = ConfigStore(tmp_path)

    assert reopened.delay_offsets.levels() == [1, 18]
    assert reopened.delay_offsets.get(1) == 100
    assert reopened.delay_offsets.get(18) == 5
    assert (tmp_path / "config" / DELAY_OFFSET_FILE_NAME).exists()


@given(
    st.dictionaries(
        st.tuples(st.from_regex(r"[a-zA-Z0-9_%|-]{1,8}", fullmatch=True), st.sampled_from("gh")),
        st.dictionaries(st.integers(0, 1023), st.integers(0, 2**63 - 1), min_size=1),
    )
)
def test_consumer_offset_file_codec_round_trips(
    table: dict[tuple[str, str], dict[int, int]],
) -> None:
    value = ConsumerOffsetFile(
        offset_table={f"{t}@{g}": queues for (t, g), queues in table.items()}
    )

    assert msgspec.json.decode(encode_json(value), type=ConsumerOffsetFile) == value


# --- write protocol ------------------------------------------------------------------------------


def test_second_save_keeps_the_previous_content_in_bak(tmp_path: Path) -> None:
    save_two_generations(tmp_path)
    bak = topics_path(tmp_path).with_name(TOPICS_FILE_NAME + ".bak")

    previous = msgspec.json.decode(bak.read_bytes(), type=TopicsFile)
    current = msgspec.json.decode(topics_path(tmp_path).read_bytes(), type=TopicsFile)

    assert sorted(previous.topic_config_table) == ["a"]
    assert sorted(current.topic_config_table) == ["a", "b"]
    assert not topics_path(tmp_path).with_name(TOPICS_FILE_NAME + ".tmp").exists()


def test_first_save_creates_no_bak(tmp_path: Path) -> None:
    with ConfigStore(tmp_path) as store:
        store.topics.put(TopicConfig(topic_name="a"))

    assert topics_path(tmp_path).exists()
    assert not topics_path(tmp_path).with_name(TOPICS_FILE_NAME + ".bak").exists()


def test_persist_does_not_create_the_file_when_nothing_changed(tmp_path: Path) -> None:
    store = ConfigStore(tmp_path)

    assert store.persist_all() == 0
    assert list((tmp_path / "config").iterdir()) == []


def test_persist_does_not_rewrite_a_clean_table(tmp_path: Path) -> None:
    table = TopicConfigTable(tmp_path / TOPICS_FILE_NAME)
    table.put(TopicConfig(topic_name="a"))
    assert table.persist() is True
    (tmp_path / TOPICS_FILE_NAME).unlink()

    assert table.persist() is False
    assert not (tmp_path / TOPICS_FILE_NAME).exists()


def test_putting_an_identical_config_is_not_a_change(tmp_path: Path) -> None:
    table = TopicConfigTable(tmp_path / TOPICS_FILE_NAME)
    table.put(TopicConfig(topic_name="a"))
    table.persist()

    table.put(TopicConfig(topic_name="a"))

    assert not table.dirty
    assert table.data_version == 1


def test_failed_save_raises_store_error_and_leaves_the_table_dirty(tmp_path: Path) -> None:
    table = TopicConfigTable(tmp_path / "missing-dir" / TOPICS_FILE_NAME)
    table.put(TopicConfig(topic_name="a"))

    with pytest.raises(StoreError):
        table.persist()
    assert table.dirty


def test_store_error_when_the_config_directory_cannot_be_created(tmp_path: Path) -> None:
    (tmp_path / "config").write_bytes(b"a file where the directory should be")

    with pytest.raises(StoreError):
        ConfigStore(tmp_path)


def test_close_persists_dirty_tables_and_then_refuses_persist_all(tmp_path: Path) -> None:
    store = ConfigStore(tmp_path)
    store.consumer_offsets.commit("g", "t", 0, 5)

    store.close()
    store.close()

    assert ConfigStore(tmp_path).consumer_offsets.query("g", "t", 0) == 5
    with pytest.raises(ClosedError):
        store.persist_all()


# --- load protocol -------------------------------------------------------------------------------


def _delete(path: Path) -> None:
    path.unlink()


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _writer(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text)


DAMAGES: dict[str, Callable[[Path], None]] = {
    "missing": _delete,
    "empty": _empty,
    "truncated": _truncate,
    "not-json": _writer("\xff garbage"),
    "json-array": _writer("[1, 2, 3]"),
    "json-null": _writer("null"),
    "missing-table-field": _writer('{"data_version": 3}'),
    "key-differs-from-name": _writer(
        '{"data_version": 3, "topic_config_table": {"x": {"topic_name": "y"}}}'
    ),
    "perm-out-of-range": _writer(
        '{"data_version": 3, "topic_config_table": {"x": {"topic_name": "x", "perm": 99}}}'
    ),
    "negative-data-version": _writer('{"data_version": -1, "topic_config_table": {}}'),
}


@pytest.mark.parametrize("damage", DAMAGES.values(), ids=DAMAGES.keys())
def test_load_falls_back_to_bak_when_the_main_file_is_damaged(
    tmp_path: Path, damage: Callable[[Path], None], caplog: pytest.LogCaptureFixture
) -> None:
    save_two_generations(tmp_path)
    damage(topics_path(tmp_path))

    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        store = ConfigStore(tmp_path)

    assert store.topics.topics() == ["a"]
    assert store.topics.get("a") == TopicConfig(
        topic_name="a", read_queue_nums=3, write_queue_nums=3
    )
    assert "backup" in caplog.text


@pytest.mark.parametrize(
    "text",
    [
        '{"offset_table": {"no-separator": {"0": 1}}}',
        '{"offset_table": {"t@g": {"zero": 1}}}',
        '{"offset_table": {"t@g": {"0": -5}}}',
        '{"offset_table": {"t@g": [1, 2]}}',
    ],
)
def test_consumer_offsets_fall_back_to_bak_on_a_wrong_shape(tmp_path: Path, text: str) -> None:
    with ConfigStore(tmp_path) as store:
        store.consumer_offsets.commit("g", "t", 0, 1)
    with ConfigStore(tmp_path) as store:
        store.consumer_offsets.commit("g", "t", 0, 2)
    (tmp_path / "config" / CONSUMER_OFFSET_FILE_NAME).write_text(text)

    assert ConfigStore(tmp_path).consumer_offsets.query_all("g", "t") == {0: 1}


def test_both_files_damaged_beyond_salvage_refuse_to_start_naming_the_files_and_the_fix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: start empty with a warning. Now: StoreError, and copies of both files are kept."""
    save_two_generations(tmp_path)
    _writer("\xff garbage")(topics_path(tmp_path))
    _empty(topics_path(tmp_path).with_name(TOPICS_FILE_NAME + ".bak"))

    with pytest.raises(StoreError) as info, caplog.at_level(logging.ERROR):
        ConfigStore(tmp_path)

    text = str(info.value)
    assert str(topics_path(tmp_path)) in text
    assert "restore" in text and "delete" in text
    assert len(damaged_copies(tmp_path, TOPICS_FILE_NAME)) == 2
    assert topics_path(tmp_path).read_text() == "\xff garbage"  # the original stays in place
    with pytest.raises(StoreError):  # a second start refuses too: never a silent empty table
        ConfigStore(tmp_path)


def test_fresh_store_logs_no_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        ConfigStore(tmp_path)

    assert caplog.records == []


def test_leftover_tmp_from_a_crash_is_ignored_and_replaced(tmp_path: Path) -> None:
    with ConfigStore(tmp_path) as store:
        store.topics.put(TopicConfig(topic_name="committed"))
    tmp = topics_path(tmp_path).with_name(TOPICS_FILE_NAME + ".tmp")
    tmp.write_bytes(encode_json(TopicsFile(data_version=9, topic_config_table={})))

    with ConfigStore(tmp_path) as store:
        assert store.topics.topics() == ["committed"]
        store.topics.put(TopicConfig(topic_name="next"))

    assert not tmp.exists()
    assert ConfigStore(tmp_path).topics.topics() == ["committed", "next"]


def test_json_file_load_returns_none_when_nothing_was_ever_saved(tmp_path: Path) -> None:
    assert JsonFile(tmp_path / "x.json", TopicsFile).load() is None


def damaged_copies(root: Path, name: str) -> list[Path]:
    return sorted((root / "config").glob(f"{name}*.damaged-*"))


def _poison(path: Path, table_field: str, key: str, value: object) -> None:
    """Write ``value`` under ``key`` of ``table_field`` in ``path`` (a bad entry no mutator can
    produce any more), keeping the rest of the file."""
    document = json.loads(path.read_text())
    document[table_field][key] = value
    path.write_text(json.dumps(document))


def _fill_all_tables(root: Path) -> None:
    """Two saves of every table, so each has a main file and a .bak."""
    for offset in (1, 2):
        with ConfigStore(root) as store:
            store.topics.put(TopicConfig(topic_name="good", write_queue_nums=offset))
            store.topics.put(TopicConfig(topic_name="other"))
            store.subscription_groups.put(
                SubscriptionGroupConfig(group_name="cg", broker_id=offset)
            )
            store.subscription_groups.put(SubscriptionGroupConfig(group_name="cg2"))
            store.consumer_offsets.commit_many("cg", "good", {0: 10 * offset, 1: 20 * offset})
            store.consumer_offsets.commit("cg2", "other", 0, 5 * offset)
            store.delay_offsets.set(1, 7 * offset)
            store.delay_offsets.set(2, 8 * offset)


# Per table: the file, its table field, a bad entry, and how to read back what survived.
POISONS = {
    "topics": (
        TOPICS_FILE_NAME,
        "topic_config_table",
        "bad",
        {"topic_name": "bad", "perm": 1.5},
        lambda s: (s.topics.topics(), s.topics.get("good").write_queue_nums),
        (["good", "other"], 2),
    ),
    "subscription-groups": (
        SUBSCRIPTION_GROUP_FILE_NAME,
        "subscription_group_table",
        "x",
        {"group_name": "y"},
        lambda s: (s.subscription_groups.groups(), s.subscription_groups.get("cg").broker_id),
        (["cg", "cg2"], 2),
    ),
    "consumer-offsets": (
        CONSUMER_OFFSET_FILE_NAME,
        "offset_table",
        "good@cg",
        {"0": 1.5, "1": 40, "x": 3, "2": -1},
        lambda s: (
            s.consumer_offsets.query_all("cg", "good"),
            s.consumer_offsets.query_all("cg2", "other"),
        ),
        ({1: 40}, {0: 10}),
    ),
    "delay-offsets": (
        DELAY_OFFSET_FILE_NAME,
        "offset_table",
        "3",
        True,
        lambda s: (s.delay_offsets.levels(), s.delay_offsets.get(1), s.delay_offsets.get(2)),
        ([1, 2], 14, 16),
    ),
}


@pytest.mark.parametrize("table", POISONS.values(), ids=POISONS.keys())
def test_damaged_main_and_bak_load_every_valid_entry_drop_the_bad_and_keep_copies(
    tmp_path: Path, table: tuple, caplog: pytest.LogCaptureFixture
) -> None:
    """One bad entry in both files costs only that entry, loudly, never the whole table."""
    name, field, key, bad, read_back, expected = table
    _fill_all_tables(tmp_path)
    main = tmp_path / "config" / name
    _poison(main, field, key, bad)
    _poison(main.with_name(name + ".bak"), field, key, bad)
    poisoned = main.read_bytes()

    with caplog.at_level(logging.ERROR):
        store = ConfigStore(tmp_path)

    assert read_back(store) == expected
    assert any(
        r.levelno == logging.ERROR and name in r.getMessage() and "dropped" in r.getMessage()
        for r in caplog.records
    )
    copies = damaged_copies(tmp_path, name)
    assert len(copies) == 2
    assert poisoned in [c.read_bytes() for c in copies]
    assert store.persist_all() == 1  # the salvaged table is written back at once
    assert read_back(ConfigStore(tmp_path)) == expected


# Per table: the first entry of the fully written file (which a cut near the end keeps).
FIRST_ENTRIES = {
    TOPICS_FILE_NAME: lambda s: s.topics.get("good").write_queue_nums == 2,
    SUBSCRIPTION_GROUP_FILE_NAME: lambda s: s.subscription_groups.get("cg").broker_id == 2,
    CONSUMER_OFFSET_FILE_NAME: lambda s: s.consumer_offsets.query("cg", "good", 0) == 20,
    DELAY_OFFSET_FILE_NAME: lambda s: s.delay_offsets.get(1) == 14,
}


@pytest.mark.parametrize("name", FIRST_ENTRIES)
def test_truncated_main_and_empty_bak_keep_the_entries_before_the_cut(
    tmp_path: Path, name: str
) -> None:
    _fill_all_tables(tmp_path)
    main = tmp_path / "config" / name
    data = main.read_bytes()
    main.write_bytes(data[: data.rindex(b",") - 2])  # inside the last complete entry
    main.with_name(name + ".bak").write_bytes(b"")

    store = ConfigStore(tmp_path)

    assert FIRST_ENTRIES[name](store)
    assert len(damaged_copies(tmp_path, name)) == 2
    assert store.persist_all() == 1


@pytest.mark.parametrize("name", FIRST_ENTRIES)
def test_every_table_refuses_to_start_empty_when_nothing_can_be_salvaged(
    tmp_path: Path, name: str
) -> None:
    _fill_all_tables(tmp_path)
    main = tmp_path / "config" / name
    main.write_text('{"something": "else"}')
    main.with_name(name + ".bak").write_text("[1, 2")

    with pytest.raises(StoreError, match=name):
        ConfigStore(tmp_path)


def test_after_a_fallback_to_bak_the_next_save_keeps_the_good_bak(tmp_path: Path) -> None:
    """The damaged main is overwritten in place, not rotated onto the only good copy."""
    save_two_generations(tmp_path)
    _truncate(topics_path(tmp_path))

    with ConfigStore(tmp_path) as store:
        assert store.topics.topics() == ["a"]
        store.topics.put(TopicConfig(topic_name="c"))

    bak = JsonFile(topics_path(tmp_path).with_name(TOPICS_FILE_NAME + ".bak"), TopicsFile)
    assert sorted(bak.load().topic_config_table) == ["a"]
    assert ConfigStore(tmp_path).topics.topics() == ["a", "c"]


def test_a_byte_broken_in_the_middle_keeps_the_entries_before_it(tmp_path: Path) -> None:
    """Syntactic damage mid-file (here an invalid UTF-8 byte, which once made load raise
    UnicodeDecodeError): what precedes it is salvaged."""
    _fill_all_tables(tmp_path)
    main = tmp_path / "config" / CONSUMER_OFFSET_FILE_NAME
    data = main.read_bytes()
    cut = data.index(b'"other@cg2"')
    main.write_bytes(data[:cut] + b"\xff" + data[cut + 1 :])
    main.with_name(CONSUMER_OFFSET_FILE_NAME + ".bak").write_bytes(data[:cut] + b"\xff")

    store = ConfigStore(tmp_path)

    assert store.consumer_offsets.query_all("cg", "good") == {0: 20, 1: 40}
    assert store.consumer_offsets.query_all("cg2", "other") == {}


def test_an_invalid_utf8_main_file_falls_back_to_bak(tmp_path: Path) -> None:
    save_two_generations(tmp_path)
    topics_path(tmp_path).write_bytes(b'{"data_version": 1, "topic_config_table": {"\xff": 1}}')

    assert ConfigStore(tmp_path).topics.topics() == ["a"]


def test_lenient_json_closes_a_truncated_document_at_its_last_complete_value() -> None:
    assert lenient_json(b'{"t": {"a": 1, "b": 2, "c": 3') == {"t": {"a": 1, "b": 2}}
    assert lenient_json(b'{"t": {"a": "x,}", "b": [1, 2') == {"t": {"a": "x,}", "b": [1]}}
    assert lenient_json(b"\xff garbage") is None
    assert lenient_json(b'{"t": {"a": 1, "b": 2x, "c": 3}}') == {"t": {"a": 1}}
    assert lenient_json(b'{"t": {"a": 1, "b\xff": 2, "c": 3}}') == {"t": {"a": 1}}
    assert lenient_json(b"") is None


# --- mutators refuse what a load would refuse ---------------------------------------------------

BAD_QUEUE_IDS = [-1, 2**31, True, 1.0, "0", None]
BAD_OFFSETS = [-1, 2**63, True, False, 1.5, float("nan"), "5", None]


@pytest.mark.parametrize("queue_offset", BAD_OFFSETS)
def test_commit_of_a_bad_offset_raises_and_changes_nothing(
    tmp_path: Path, queue_offset: object
) -> None:
    store = ConfigStore(tmp_path)
    store.consumer_offsets.commit("cg", "t", 0, 3)
    store.persist_all()

    with pytest.raises(
        InvalidOffsetError, match=r"queue_offset must be an int in 0\.\.9223372036854775807"
    ):
        store.consumer_offsets.commit("cg", "t", 0, queue_offset)  # type: ignore[arg-type]
    with pytest.raises(InvalidOffsetError):  # a batch is all or nothing
        store.consumer_offsets.commit_many("cg", "t", {1: 4, 2: queue_offset})  # type: ignore[dict-item]

    assert store.consumer_offsets.query_all("cg", "t") == {0: 3}
    assert not store.consumer_offsets.dirty


@pytest.mark.parametrize("queue_id", BAD_QUEUE_IDS)
def test_commit_of_a_bad_queue_id_raises_and_changes_nothing(
    tmp_path: Path, queue_id: object
) -> None:
    table = ConsumerOffsetTable(tmp_path / CONSUMER_OFFSET_FILE_NAME)

    with pytest.raises(InvalidOffsetError, match=r"queue_id must be an int in 0\.\.2147483647"):
        table.commit_many("cg", "t", {0: 1, queue_id: 2})  # type: ignore[dict-item]
    with pytest.raises(InvalidOffsetError):
        table.commit_many("cg", "t", [(0, 1)])  # type: ignore[arg-type]

    assert table.query_all("cg", "t") == {}
    assert not table.dirty


def test_numpy_ints_are_committed_as_plain_ints(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    with ConfigStore(tmp_path) as store:
        store.consumer_offsets.commit_many("cg", "t", {np.int32(1): np.int64(9)})
        store.delay_offsets.set(np.int64(2), np.int64(4))
    store = ConfigStore(tmp_path)
    assert store.consumer_offsets.query_all("cg", "t") == {1: 9}
    assert store.delay_offsets.get(2) == 4


@pytest.mark.parametrize("queue_offset", BAD_OFFSETS)
def test_delay_offset_set_refuses_a_bad_offset(tmp_path: Path, queue_offset: object) -> None:
    store = ConfigStore(tmp_path)

    with pytest.raises(InvalidOffsetError):
        store.delay_offsets.set(1, queue_offset)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError):
        store.delay_offsets.set(True, 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError):
        store.delay_offsets.set(2**31, 1)
    assert store.persist_all() == 0


def test_put_refuses_a_record_of_the_wrong_type_or_with_a_bool_or_float_field(
    tmp_path: Path,
) -> None:
    store = ConfigStore(tmp_path)

    with pytest.raises(ConfigError, match="expected a TopicConfig"):
        store.topics.put(SubscriptionGroupConfig(group_name="t"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="expected a SubscriptionGroupConfig"):
        store.subscription_groups.put({"group_name": "g"})  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        store.topics.put(TopicConfig(topic_name="t", read_queue_nums=True))  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        store.topics.put(TopicConfig(topic_name="t", read_queue_nums=2**40))
    with pytest.raises(ConfigError):
        store.subscription_groups.put(SubscriptionGroupConfig(group_name="g", retry_max_times=1.5))  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        store.delay_offsets.set_deliver_at(DeliverAtProgress(low_offset=2**63))
    assert store.persist_all() == 0


# --- table semantics -----------------------------------------------------------------------------


def test_topic_table_put_updates_delete_reports_and_version_counts_changes(tmp_path: Path) -> None:
    table = TopicConfigTable(tmp_path / TOPICS_FILE_NAME)
    table.put(TopicConfig(topic_name="t"))
    table.put(TopicConfig(topic_name="t", write_queue_nums=1))

    assert "t" in table
    assert table.get("t") == TopicConfig(topic_name="t", write_queue_nums=1)
    assert table.delete("t") is True
    assert table.delete("t") is False
    assert "t" not in table
    assert table.get("t") is None
    assert table.data_version == 3


def test_put_rejects_a_config_that_breaks_its_constraints(tmp_path: Path) -> None:
    table = TopicConfigTable(tmp_path / TOPICS_FILE_NAME)

    with pytest.raises(ConfigError):
        table.put(TopicConfig(topic_name="t", perm=8))
    with pytest.raises(ConfigError):
        table.put(TopicConfig(topic_name="t", read_queue_nums=-1))
    assert not table.dirty


def test_put_rejects_an_illegal_name(tmp_path: Path) -> None:
    store = ConfigStore(tmp_path)

    with pytest.raises(InvalidTopicError):
        store.topics.put(TopicConfig(topic_name="../etc"))
    with pytest.raises(InvalidGroupError):
        store.subscription_groups.put(SubscriptionGroupConfig(group_name="a@b"))


@pytest.mark.parametrize("suffix", ["\n", "\r", "\r\n"])
def test_names_with_a_line_break_are_refused_by_every_table(tmp_path: Path, suffix: str) -> None:
    """``$`` matches before a final newline; names must match in full."""
    store = ConfigStore(tmp_path)

    with pytest.raises(InvalidTopicError):
        store.topics.put(TopicConfig(topic_name="orders" + suffix))
    with pytest.raises(InvalidGroupError):
        store.subscription_groups.put(SubscriptionGroupConfig(group_name="cg" + suffix))
    with pytest.raises(InvalidTopicError):
        store.consumer_offsets.commit("cg", "orders" + suffix, 0, 1)
    with pytest.raises(InvalidGroupError):
        store.consumer_offsets.commit("cg" + suffix, "orders", 0, 1)
    assert store.persist_all() == 0
    assert list((tmp_path / "config").iterdir()) == []


def test_perm_helpers_follow_rocketmq_perm_bits() -> None:
    assert TopicConfig(topic_name="t").perm == PERM_READ | PERM_WRITE
    assert is_readable(PERM_READ) and not is_writeable(PERM_READ)
    assert is_writeable(PERM_WRITE | PERM_INHERIT) and not is_readable(PERM_WRITE | PERM_INHERIT)


def test_query_of_an_unknown_queue_is_minus_one(tmp_path: Path) -> None:
    table = ConsumerOffsetTable(tmp_path / CONSUMER_OFFSET_FILE_NAME)
    table.commit("g", "t", 0, 4)

    assert table.query("g", "t", 1) == -1
    assert table.query("other", "t", 0) == -1
    assert table.query_all("other", "t") == {}


def test_offsets_are_indexed_by_topic_and_group_and_removable(tmp_path: Path) -> None:
    table = ConsumerOffsetTable(tmp_path / CONSUMER_OFFSET_FILE_NAME)
    table.commit("g1", "t1", 0, 1)
    table.commit("g2", "t1", 0, 2)
    table.commit("g1", "t2", 0, 3)

    assert table.groups_of("t1") == ["g1", "g2"]
    assert table.topics_of("g1") == ["t1", "t2"]
    assert table.remove_group("g1") == 2
    assert table.topics_of("g1") == []
    assert table.remove_topic("t1") == 1
    assert table.groups_of("t1") == []
    assert table.remove_topic("t1") == 0


def test_committing_the_same_offset_again_is_not_a_change(tmp_path: Path) -> None:
    table = ConsumerOffsetTable(tmp_path / CONSUMER_OFFSET_FILE_NAME)
    table.commit("g", "t", 0, 4)
    table.persist()

    table.commit("g", "t", 0, 4)
    table.commit_many("g", "t", {})

    assert not table.dirty


def test_commit_rejects_negative_values_and_names_with_the_key_separator(tmp_path: Path) -> None:
    table = ConsumerOffsetTable(tmp_path / CONSUMER_OFFSET_FILE_NAME)

    with pytest.raises(InvalidOffsetError):
        table.commit("g", "t", 0, -1)
    with pytest.raises(InvalidOffsetError):
        table.commit("g", "t", -1, 0)
    with pytest.raises(InvalidTopicError):
        table.commit("g", "t@x", 0, 0)
    with pytest.raises(InvalidGroupError):
        table.commit("g@x", "t", 0, 0)
    assert not table.dirty


def test_delay_offsets_default_to_zero_and_reject_level_zero(tmp_path: Path) -> None:
    store = ConfigStore(tmp_path)

    assert store.delay_offsets.get(3) == 0
    with pytest.raises(InvalidMessageError):
        store.delay_offsets.set(0, 1)


def test_file_names_match_rocketmq(tmp_path: Path) -> None:
    with ConfigStore(tmp_path) as store:
        store.topics.put(TopicConfig(topic_name="t"))
        store.subscription_groups.put(SubscriptionGroupConfig(group_name="g"))
        store.consumer_offsets.commit("g", "t", 0, 1)
        store.delay_offsets.set(1, 1)

    names = sorted(path.name for path in (tmp_path / "config").iterdir())

    assert names == sorted(
        [
            TOPICS_FILE_NAME,
            SUBSCRIPTION_GROUP_FILE_NAME,
            CONSUMER_OFFSET_FILE_NAME,
            DELAY_OFFSET_FILE_NAME,
        ]
    )
    assert names == sorted(
        ["topics.json", "subscriptionGroup.json", "consumerOffset.json", "delayOffset.json"]
    )
