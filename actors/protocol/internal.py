"""Operations between server actors only (registration, replication, metadata
sync, flush targets): never part of the client transport."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from rayq.actors.protocol.routes import QueueData


class ReplicaStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A slave as its master sees it: how far it has the commit log, and how far behind."""

    broker_id: int
    acked_offset: int  # the slave has every commit-log byte below this
    lag_bytes: int  # the master's written offset minus acked_offset
    lag_ms: int  # how long ago the oldest record the slave lacks was stored (0: none)
    connected: bool  # fetched within ha_housekeeping_ms


class BrokerInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What a broker replica tells the coordinator when it registers or heartbeats."""

    broker_name: str
    node_id: str
    store_dir: str
    topics: dict[str, QueueData]
    data_version: int = 0
    broker_id: int = 0  # 0: the master
    role: str = "ASYNC_MASTER"
    epoch: int = 0
    written_offset: int = 0
    replicas: list[ReplicaStatus] = []  # a master's slaves
    auto_failover: bool = True
    disk_ratio: float = 0.0  # the store disk's last measured used-space ratio
    put_tps: float = 0.0  # messages stored per second, over the last few seconds
    # A SYNC_MASTER: the commit-log offset its sends are acknowledged up to (its
    # min_in_sync_replicas slaves have it). A slave: the highest such offset its master
    # told it. -1: none known. A failover promotes no slave whose log ends below it.
    acked_offset: int = -1
    # This server's life (random at its start): within one life, registrations carry
    # ever higher data_versions, so one with a lower data_version than the coordinator
    # has (a heartbeat sent before a topic change, processed after it) has stale topics.
    instance: str = ""


class HaFetch(msgspec.Struct, frozen=True, kw_only=True):
    """A slave's fetch from its master (server-internal): it holds the commit log up to
    ``offset`` in ``epoch`` (so every byte below is acknowledged) and asks for the bytes
    from there, waiting up to ``wait_ms`` for some."""

    broker_id: Annotated[int, Meta(ge=1)]
    offset: Annotated[int, Meta(ge=0)]
    epoch: Annotated[int, Meta(ge=0)]
    max_bytes: Annotated[int, Meta(gt=0)]
    wait_ms: Annotated[int, Meta(ge=0)] = 0


class HaChunk(msgspec.Struct, frozen=True, kw_only=True):
    """The master's answer: commit-log bytes from ``offset`` (maybe none). With
    ``truncate_to`` >= 0 the slave's log diverged: it cuts it there first (after checking
    that its bytes just below equal ``tail``); ``epochs`` is the master's epoch history,
    sent when the slave's differs."""

    offset: int
    data: bytes = b""
    master_offset: int
    epochs: list[tuple[int, int]] = []
    truncate_to: int = -1
    tail: bytes = b""
    topics_version: int = 0  # the master's topic table version: a slave behind syncs at once
    sync: bool = False  # the master is a SYNC_MASTER: sends wait for the slave's next fetch
    acked_offset: int = -1  # a SYNC_MASTER's sends are acknowledged up to here (-1: none)


class MetadataRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A slave's periodic metadata sync (server-internal), carrying the consumer offsets
    committed on it since the last sync ("topic@group" -> queue -> offset)."""

    broker_id: Annotated[int, Meta(ge=1)]
    offsets: dict[str, dict[int, int]] = {}


class MetadataReply(msgspec.Struct, frozen=True, kw_only=True):
    """The master's config tables, each as its JSON file's bytes."""

    topics: bytes
    groups: bytes
    consumer_offsets: bytes
    delay_offsets: bytes


class FlushTargets(msgspec.Struct, frozen=True, kw_only=True):
    """What the flusher asks its broker each round (server-internal): commit-log bytes
    written, and the offset below which consume queues and index are written."""

    written: int
    dispatched: int
