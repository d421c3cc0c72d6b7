"""The soak's clients, each a thread with a known contract, logging to the history.

Producers (one message key per send, ``<client>-<seq>``, also the body): sync, async,
idempotent, transactional (the listener commits, rolls back or answers UNKNOWN by the
key's sequence number, and the check-back answers the same), ordered (four sharding
keys, round robin). Consumers: a push group (concurrent listener), an orderly push
group and a pull consumer that commits by hand. Push consumers killed by the nemesis
are started again (a new instance) by :class:`PushClient`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import ray

import rayq
from soak.history import (
    ASYNC,
    IDEMPOTENT,
    ORDERED,
    PULL,
    TRANSACTIONAL,
    Commit,
    Delivery,
    History,
    Send,
    Subscribed,
)
from soak.recorder import RECORDER, RecordingListener, delivery_row

logger = logging.getLogger(__name__)
PACE_S = 0.03  # between sends of one producer: the machine has two cores
SHARDING_KEYS = ("k0", "k1", "k2", "k3")
ERRORS = (rayq.RayqError, ray.exceptions.RayError, TimeoutError)

# Orderly queue locks renewed every 2 s (the deployment's lease is 8 s, deployment.py):
# the queues of a killed orderly consumer are free again within the run, not after
# RocketMQ's default 60 s lease, which is longer than a short soak and its drain.
CLIENT = rayq.ClientConfig(lock_renew_interval_ms=2_000, lock_stale_ms=6_000)


def tx_decision(key: str) -> str:
    """What a transaction's key says: every 4th rolls back, every 8th (of the rest)
    answers UNKNOWN first and commits on the check-back."""
    seq = int(key.rsplit("-", 1)[1])
    if seq % 4 == 3:
        return "ROLLBACK"
    return "UNKNOWN" if seq % 8 == 5 else "COMMIT"


class TxListener:
    def execute_local_transaction(self, msg: rayq.Message, arg: Any) -> rayq.TransactionStatus:
        return rayq.TransactionStatus[tx_decision(msg.keys[0])]

    def check_local_transaction(self, msg: rayq.MessageExt) -> rayq.TransactionStatus:
        final = tx_decision(msg.keys[0])
        return rayq.TransactionStatus[final if final == "ROLLBACK" else "COMMIT"]


class Loop:
    """A thread that calls ``step`` until stopped."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.step()
            except Exception:  # a client bug must not end the soak silently
                logger.exception("soak client %s", self.name)
                time.sleep(0.5)

    def step(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.stopping.set()

    def join(self, timeout_s: float = 60.0) -> None:
        self.thread.join(timeout_s)


class ProducerClient(Loop):
    """One producer of one contract sending single messages to ``topic``."""

    def __init__(self, name: str, contract: str, topic: str, history: History, ns: str) -> None:
        super().__init__(name)
        self.contract, self.topic, self.history, self.seq = contract, topic, history, 0
        self.producer: rayq.Producer
        if contract == TRANSACTIONAL:
            self.producer = rayq.TransactionProducer(f"{name}-g", TxListener(), namespace=ns)
        else:
            self.producer = rayq.Producer(
                f"{name}-g", namespace=ns, idempotent=contract == IDEMPOTENT
            )
        self.pending: list[Future[Any]] = []

    def step(self) -> None:
        key = f"{self.name}-{self.seq}"
        sharding = SHARDING_KEYS[self.seq % len(SHARDING_KEYS)]
        msg = rayq.Message(self.topic, key.encode(), keys=[key])
        seq, self.seq = self.seq, self.seq + 1
        t0 = time.time()
        extra: dict[str, Any] = {"seq": seq}
        if self.contract == ORDERED:
            extra["sharding_key"] = sharding
        if self.contract == TRANSACTIONAL:
            final = tx_decision(key)
            extra.update(tx_state=final, tx_final="ROLLBACK" if final == "ROLLBACK" else "COMMIT")
        try:
            if self.contract == ASYNC:
                future = self.producer.send_async(msg)
                future.add_done_callback(lambda f: self._done(key, t0, extra, f))
                self.pending.append(future)
                self.pending = [f for f in self.pending if not f.done()]
            else:
                if self.contract == ORDERED:
                    result = self.producer.send_orderly(msg, sharding_key=sharding)
                elif self.contract == TRANSACTIONAL:
                    assert isinstance(self.producer, rayq.TransactionProducer)
                    result = self.producer.send_in_transaction(msg)
                else:
                    result = self.producer.send(msg)
                self._log(key, t0, extra, result, None)
        except ERRORS as exc:
            self._log(key, t0, extra, None, exc)
        time.sleep(PACE_S)

    def _done(self, key: str, t0: float, extra: dict[str, Any], future: Future[Any]) -> None:
        exc = future.exception()
        self._log(key, t0, extra, None if exc else future.result(), exc)

    def _log(
        self, key: str, t0: float, extra: dict[str, Any], result: Any, exc: BaseException | None
    ) -> None:
        now = time.time()
        if result is None:
            status = type(exc).__name__
            self.history.add(
                Send(
                    self.name,
                    self.contract,
                    key,
                    self.topic,
                    t0,
                    now,
                    False,
                    status,
                    error=str(exc)[:200],
                    **extra,
                )
            )
            return
        self.history.add(
            Send(
                self.name,
                self.contract,
                key,
                self.topic,
                t0,
                now,
                result.status is rayq.SendStatus.SEND_OK,
                result.status.name,
                broker=result.queue.broker_name,
                queue=result.queue.queue_id,
                offset=result.queue_offset,
                msg_id=result.msg_id,
                **extra,
            )
        )

    def close(self) -> None:
        for f in list(self.pending):
            with contextlib.suppress(Exception):
                f.result(timeout=30)
        try:
            self.producer.shutdown()
        except ERRORS:
            logger.warning("producer %s did not shut down cleanly", self.name)


class PullClient(Loop):
    """A pull consumer that polls and commits by hand every second (logging each)."""

    def __init__(self, group: str, topic: str, history: History, ns: str) -> None:
        super().__init__(group)
        self.group, self.history = group, history
        self.consumer = rayq.PullConsumer(
            group, namespace=ns, consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET, auto_commit=False
        )
        self.consumer.subscribe(topic)
        self.consumer.start()
        history.add(Subscribed(group, PULL, (topic,), time.time()))
        self.n = 0
        self.committed_at = time.monotonic()
        self.commits: dict[Any, int] = {}

    def step(self) -> None:
        try:
            msgs = self.consumer.poll(timeout=0.5)
        except ERRORS:
            time.sleep(0.2)
            return
        now = time.time()
        for m in msgs:
            row = delivery_row(self.group, PULL, self.group, m, now, self.n)
            self.n += 1
            self.history.add(Delivery(*row))
        if time.monotonic() - self.committed_at >= 1.0:
            self.commit()

    def commit(self) -> None:
        self.committed_at = time.monotonic()
        try:
            self.consumer.commit()
            for mq in self.consumer.assignment():
                offset = self.consumer.position(mq)
                if offset is not None and self.commits.get(mq) != offset:
                    self.commits[mq] = offset
                    self.history.add(
                        Commit(
                            self.group,
                            mq.topic,
                            mq.broker_name,
                            mq.queue_id,
                            offset,
                            time.time(),
                            "client",
                        )
                    )
        except ERRORS:
            pass

    def close(self) -> None:
        with contextlib.suppress(*ERRORS):
            self.consumer.shutdown()


class PushClient:
    """A push consumer group of one member, started again when its actor dies."""

    def __init__(
        self, group: str, contract: str, topics: tuple[str, ...], history: History, ns: str
    ) -> None:
        self.group, self.contract, self.topics, self.ns = group, contract, topics, ns
        self.restarts = 0
        self.consumer = self._start()
        history.add(Subscribed(group, contract, topics, time.time()))

    def _start(self) -> rayq.PushConsumer:
        consumer = rayq.PushConsumer(
            self.group,
            namespace=self.ns,
            consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET,
            config=CLIENT,
        )
        for topic in self.topics:
            consumer.subscribe(topic)
        orderly = self.contract == "orderly"
        listener = RecordingListener(self.group, self.contract, self.ns, orderly)
        consumer.register_listener(listener, orderly=orderly)
        consumer.start()
        return consumer

    @property
    def actor(self) -> Any:
        return self.consumer.actor

    def revive_if_dead(self) -> bool:
        """Start a new instance if the Consumer actor is dead (or a start after its death
        failed, leaving none); True if it was."""
        actor = self.consumer.actor
        try:
            if actor is not None:
                ray.get(actor.stats.remote(), timeout=5)
                return False
        except ray.exceptions.GetTimeoutError:
            return False  # paused, or busy: alive
        except ray.exceptions.RayActorError:
            pass
        with contextlib.suppress(*ERRORS):
            self.consumer.shutdown()
        self.restarts += 1
        self.consumer = self._start()
        return True

    def close(self) -> None:
        try:
            self.consumer.shutdown()
        except ERRORS:
            logger.warning("push consumer %s did not shut down cleanly", self.group)


class Observer(Loop):
    """Every half second: drains the Recorder into the history, records the groups'
    committed offsets as the brokers report them, and revives dead push consumers."""

    def __init__(
        self, history: History, ns: str, groups: list[str], push: list[PushClient]
    ) -> None:
        super().__init__("observer")
        self.history, self.groups, self.push = history, groups, push
        self.admin = rayq.Admin(namespace=ns)
        self.recorder = ray.get_actor(RECORDER, namespace=ns)
        self.last: dict[tuple[str, Any], int] = {}
        self.revive: Callable[[], None] = self._revive

    def step(self) -> None:
        self.drain()
        for group in self.groups:
            try:
                progress = self.admin.consumer_progress(group)
            except ERRORS:
                continue
            now = time.time()
            for p in progress:
                if p.committed_offset < 0 or self.last.get((group, p.queue)) == p.committed_offset:
                    continue
                self.last[(group, p.queue)] = p.committed_offset
                q = p.queue
                self.history.add(
                    Commit(group, q.topic, q.broker_name, q.queue_id, p.committed_offset, now)
                )
        self.revive()
        time.sleep(0.5)

    def _revive(self) -> None:
        for client in self.push:
            try:
                client.revive_if_dead()
            except ERRORS:
                logger.warning("could not start push consumer %s again yet", client.group)

    def drain(self) -> None:
        try:
            rows = ray.get(self.recorder.take.remote(), timeout=10)
        except ERRORS:
            return
        self.history.extend(Delivery(*row) for row in rows)
