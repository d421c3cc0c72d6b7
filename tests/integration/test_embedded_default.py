"""The embedded default keeps its data: ``rayq.start()`` without ``store_dir`` uses
``$RAYQ_HOME`` (else ``./rayq-data``), says where in one line, and a second start of
the same directory after a shutdown finds the topics, groups, offsets and messages of
the first. A store a running deployment holds is refused at once, and a config file
is applied. One Ray session for the module; each start is shut down in its test."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

import rayq
from rayq.cluster import START_LOGGER, running_actors

pytestmark = pytest.mark.integration

NAMESPACE = "rayq-test-embedded"
TOPIC = "kept"
GROUP = "kept-cg"
FIRST = [f"first-{i}".encode() for i in range(10)]
LATER = [f"later-{i}".encode() for i in range(5)]


@pytest.fixture(scope="module", autouse=True)
def ray_session() -> Iterator[None]:
    if ray.is_initialized():
        pytest.skip("Ray is already initialized in this process; this module starts its own")
    ray.init(address="local", num_cpus=2, namespace=NAMESPACE, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def _poll_all(consumer: rayq.PullConsumer, count: int) -> list[rayq.MessageExt]:
    got: list[rayq.MessageExt] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        got.extend(consumer.poll(timeout=1.0))
    return got


def _first_life() -> str:
    """Create the topic, send, consume and commit FIRST, send LATER; the first msg id."""
    rayq.Admin().create_topic(TOPIC, queues=2)
    with rayq.Producer(group="kept-pg") as producer:
        first_id = producer.send(rayq.Message(TOPIC, FIRST[0], keys=["k0"])).msg_id
        producer.send_batch([rayq.Message(TOPIC, body) for body in FIRST[1:]])
        consumer = rayq.PullConsumer(
            GROUP, consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET, auto_commit=False
        )
        consumer.subscribe(TOPIC)
        consumer.start()
        try:
            assert sorted(m.body for m in _poll_all(consumer, len(FIRST))) == sorted(FIRST)
            consumer.commit()
        finally:
            consumer.shutdown()
        producer.send_batch([rayq.Message(TOPIC, body) for body in LATER])
    return first_id


def test_a_second_start_of_the_default_home_sees_what_the_first_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Given RAYQ_HOME, when rayq.start() runs, one message is sent, consumed and
    committed, and rayq starts again after a shutdown, expect the same topic, the
    group's committed offsets, the message by id, and only LATER left to consume."""
    home = tmp_path / "home"
    monkeypatch.setenv("RAYQ_HOME", str(home))
    caplog.set_level(logging.INFO, logger=START_LOGGER)
    first = rayq.start(namespace=NAMESPACE)
    try:
        assert first.store_dir == home.absolute()
        first_id = _first_life()
    finally:
        first.shutdown()
    said = [r.getMessage() for r in caplog.records if r.name == START_LOGGER]
    assert len(said) == 1 and str(home.absolute()) in said[0]

    second = rayq.start(namespace=NAMESPACE)
    try:
        admin = rayq.Admin()
        assert TOPIC in admin.topics()
        progress = admin.consumer_progress(GROUP)
        assert sum(p.committed_offset for p in progress) == len(FIRST)
        assert sum(p.max_offset for p in progress) == len(FIRST) + len(LATER)
        assert admin.view_message(first_id).body == FIRST[0]
        consumer = rayq.PullConsumer(GROUP)
        consumer.subscribe(TOPIC)
        consumer.start()
        try:
            assert sorted(m.body for m in _poll_all(consumer, len(LATER))) == sorted(LATER)
        finally:
            consumer.shutdown()
    finally:
        second.shutdown()


def test_a_config_file_is_applied_and_a_held_store_is_refused_at_once(tmp_path: Path) -> None:
    """Given a deployment started from a TOML file, expect its broker name and queue
    count from the file; a second start of its store from another namespace raises
    StoreLockedError and starts nothing there."""
    config = tmp_path / "broker.toml"
    config.write_text('broker_name = "broker-toml"\ndefault_topic_queue_nums = 3\n')
    store = tmp_path / "store"
    cluster = rayq.start(store, config=str(config), namespace=NAMESPACE)
    try:
        assert cluster.broker_names == ["broker-toml"]
        with rayq.Producer(group="toml-pg") as producer:  # auto-created with the file's count
            producer.send(rayq.Message("auto-made", b"x"))
        assert len(rayq.Admin().topic_stats("auto-made")) == 3
        with pytest.raises(rayq.StoreLockedError, match="held by a running rayq deployment"):
            rayq.start(store, config=config, namespace=f"{NAMESPACE}-other")
        assert running_actors(f"{NAMESPACE}-other") == []
    finally:
        cluster.shutdown()
