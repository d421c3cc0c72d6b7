"""Replication requests (RocketMQ's HA service): a slave's fetches and metadata syncs
at its master, the master's and the slave's views of it.

A part of ``BrokerServer`` (actors/server/broker_server.py), which builds the shared
state (store, tables, services) these methods serve from; no Ray.
"""

from __future__ import annotations

from rayq.actors.protocol import (
    HaChunk,
    HaFetch,
    MetadataReply,
    MetadataRequest,
    ReplicationRequest,
    ReplicationStats,
)
from rayq.actors.server.processor_base import ProcessorBase
from rayq.actors.server.replication import (
    apply_tables,
    merge_slave_offsets,
    snapshot_tables,
)
from rayq.actors.server.table_files import split_offset_key
from rayq.store import SYSTEM_CLOCK
from rayq.store.errors import (
    InvalidRequestError,
    NotMasterError,
    ReplicationError,
)


class ReplicationProcessor(ProcessorBase):
    """A master's side and a slave's side of replication requests."""

    # ------------------------------------------------------- replication
    def _check_master(self, what: str) -> None:
        if self.slave is not None:
            raise NotMasterError(
                f"broker {self.config.replica_name} is a SLAVE: it {what}; they go to its "
                f"master {self.name}",
                broker=self.config.replica_name,
            )

    def ha_fetch(self, req: HaFetch) -> HaChunk | None:
        """A slave's fetch (None: it has everything; the actor parks it)."""
        if self.master is None:
            raise ReplicationError(
                f"broker {self.config.replica_name} is a SLAVE, not a master: slave "
                f"{req.broker_id} fetches from the wrong broker",
                offset=req.offset,
            )
        return self.master.fetch(req, SYSTEM_CLOCK.now_ms())

    @property
    def acked_offset(self) -> int:
        """A master's acknowledged offset, or the highest one its master told this slave
        (BrokerInfo, ReplicationStats, HaChunk)."""
        if self.master is not None:
            return self.master.acknowledged()
        return self.slave.master_acked if self.slave is not None else -1

    def replication(self, req: ReplicationRequest) -> ReplicationStats:
        """This broker's role, epoch and written offset; a master's slaves and their lag."""
        slaves = self.master.status(SYSTEM_CLOCK.now_ms()) if self.master else []
        return ReplicationStats(
            broker_name=self.name,
            broker_id=self.config.broker_id,
            role=self.role.value,
            epoch=self.epochs.current,
            written_offset=self.store.written_offset,
            replicas=slaves,
            error=self.replication_error,
            acked_offset=self.acked_offset,
        )

    def ha_metadata(self, req: MetadataRequest) -> MetadataReply:
        """A slave's metadata sync: merge the offsets committed on it, answer the tables."""
        if self.master is None:
            raise ReplicationError(f"broker {self.config.replica_name} is a SLAVE, not a master")
        for key in req.offsets:  # all checked before any is merged
            try:
                split_offset_key(key)
            except ValueError as exc:
                raise InvalidRequestError(f"malformed MetadataRequest: {exc}") from None
        if merge_slave_offsets(self.tables, req):
            self.tables.consumer_offsets.persist()
        return snapshot_tables(self.tables)

    def metadata_request(self) -> MetadataRequest:
        assert self.slave is not None
        return MetadataRequest(
            broker_id=self.config.broker_id,
            offsets={k: dict(v) for k, v in self.slave_commits.items()},
        )

    def apply_metadata(self, sent: MetadataRequest, reply: MetadataReply) -> None:
        """Take the master's tables; the offsets committed here since ``sent`` stay."""
        keep: dict[str, dict[int, int]] = {}
        for key, queues in self.slave_commits.items():
            newer = {q: o for q, o in queues.items() if sent.offsets.get(key, {}).get(q) != o}
            if newer:
                keep[key] = newer
        self.slave_commits = {k: dict(v) for k, v in keep.items()}
        apply_tables(self.tables, reply, keep)
