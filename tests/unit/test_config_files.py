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

from rayq.actors.server.tables import (
    CONSUMER_OFFSET_FILE_NAME,
    DELAY_OFFSET_FILE_NAME,
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    QUEUE_OFFSET_UNKNOWN,
    SUBSCRIPTION_GROUP_FILE_NAME,
    TOPICS_FILE_NAME,
    ConfigStore,
    ConsumerOffsetFile,
    ConsumerOffsetTable,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicConfigTable,
    TopicsFile,
    delay_level_to_queue_id,
    is_readable,
    is_writeable,
    queue_id_to_delay_level,
)
from rayq.store.errors import (
    ClosedError,
    ConfigError,
    InvalidGroupError,
    InvalidMessageError,
    InvalidOffsetError,
    InvalidTopicError,
    StoreError,
)
from rayq.store.json_file import JsonFile, encode_json

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


def test_both_files_damaged_starts_empty_and_logs_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    save_two_generations(tmp_path)
    _truncate(topics_path(tmp_path))
    _empty(topics_path(tmp_path).with_name(TOPICS_FILE_NAME + ".bak"))

    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        store = ConfigStore(tmp_path)

    assert store.topics.topics() == []
    assert store.topics.data_version == 0
    assert any(
        r.levelno == logging.WARNING and "starting empty" in r.getMessage() for r in caplog.records
    )


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


def test_compare_and_set_commits_only_when_the_current_offset_is_expected(tmp_path: Path) -> None:
    table = ConsumerOffsetTable(tmp_path / CONSUMER_OFFSET_FILE_NAME)

    assert table.compare_and_set("g", "t", 0, QUEUE_OFFSET_UNKNOWN, 5) is True
    assert table.compare_and_set("g", "t", 0, 4, 9) is False
    assert table.query("g", "t", 0) == 5
    assert table.compare_and_set("g", "t", 0, 5, 9) is True
    assert table.query("g", "t", 0) == 9


def test_compare_and_set_on_a_known_queue_fails_when_expecting_unknown(tmp_path: Path) -> None:
    table = ConsumerOffsetTable(tmp_path / CONSUMER_OFFSET_FILE_NAME)
    table.commit("g", "t", 0, 0)

    assert table.compare_and_set("g", "t", 0, QUEUE_OFFSET_UNKNOWN, 3) is False
    assert table.query("g", "t", 0) == 0


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
    assert delay_level_to_queue_id(1) == 0
    assert queue_id_to_delay_level(17) == 18


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
