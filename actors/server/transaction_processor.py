"""The transaction processor (RocketMQ ``EndTransactionProcessor`` and the
transaction check service's rounds): commit or roll back, checks asked of producers.

A part of ``BrokerServer`` (actors/server/broker_server.py), which builds the shared
state (store, tables, services) these methods serve from; no Ray.
"""

from __future__ import annotations

from rayq.actors.protocol import (
    EndTransactionReply,
    EndTransactionRequest,
    TransactionCheck,
    TransactionChecksReply,
    TransactionChecksRequest,
)
from rayq.actors.server.processor_base import ProcessorBase
from rayq.actors.server.send_processor import raise_for_put
from rayq.actors.server.table_files import is_writeable
from rayq.store import SYSTEM_CLOCK
from rayq.store.errors import PermissionDeniedError
from rayq.store.names import (
    TRANS_CHECK_MAX_TIME_TOPIC,
    validate_group,
    validate_topic,
)


class TransactionProcessor(ProcessorBase):
    """Transaction ends and the transaction check rounds."""

    def end_transaction(self, req: EndTransactionRequest) -> EndTransactionReply:
        """Commit (the message appended to its real queue) or roll back a transaction;
        an end of a transaction that ended before changes nothing (``ended`` False)."""
        self._check_master("takes no transaction ends")
        validate_group(req.group)
        validate_topic(req.topic)
        with self.writing:
            done = self.transactions.end(
                req.transaction_offset,
                req.group,
                req.msg_id,
                req.topic,
                req.commit,
                self._check_commit_target,
            )
        if done.put is not None:
            raise_for_put(done.put)
        if not done.ended or not done.committed or done.put is None:
            return EndTransactionReply(ended=done.ended, committed=False)
        return EndTransactionReply(
            ended=True,
            committed=True,
            queue_id=done.queue_id,
            queue_offset=done.put.queue_offsets[0],
            offset_msg_id=done.put.offset_msg_ids[0],
        )

    def _check_commit_target(self, topic: str, queue_id: int) -> None:
        cfg = self.topic_config(topic, create=False)
        if not is_writeable(cfg.perm) or not 0 <= queue_id < cfg.write_queue_nums:
            raise PermissionDeniedError(
                f"cannot commit to {topic}/{queue_id} now: the topic is not writeable "
                f"(perm={cfg.perm}) or has {cfg.write_queue_nums} write queues; the "
                "transaction stays open and is checked again",
                topic=topic,
            )

    def transaction_checks(self, req: TransactionChecksRequest) -> TransactionChecksReply:
        """The checks queued for the producer group (each handed out once; a check not
        answered comes again at a later tick)."""
        validate_group(req.group)
        with self.writing:
            taken = self.transactions.take_checks(req.group, req.max_num)
        return TransactionChecksReply(
            checks=[TransactionCheck(transaction_offset=key, message=msg) for key, msg in taken]
        )

    def transaction_tick(self) -> list[tuple[str, int]]:
        """The check service's round (a master's; the actor runs it every
        ``transaction_check_interval``): the queues appended to."""
        if self.slave is not None:
            return []
        if TRANS_CHECK_MAX_TIME_TOPIC not in self.tables.topics and self.transactions.open:
            self.ensure_system_topic(TRANS_CHECK_MAX_TIME_TOPIC, 1)
        with self.writing:
            return self.transactions.tick(SYSTEM_CLOCK.now_ms())
