"""An in-process fake of the rayq server, for client tests without Ray.

In the spirit of dramatiq's ``StubBroker``: ``FakeCluster`` runs real
``BrokerServer`` objects over real stores in a directory of yours, and the real
``CoordinatorService`` (fake_coordinator.py; it learns each server's ``info()`` on
every call, so a created or auto-created topic is routed at once, as the broker
actor's re-registration does). ``FakeTransport(cluster)``
implements ``rayq.transport.base.Transport``: hand it to a client::

    cluster = FakeCluster(tmp_path, brokers=("broker-a", "broker-b"))
    producer = rayq.Producer("pg", transport=FakeTransport(cluster))
    ...
    cluster.close()

Each broker call checks its request as the actor does (``protocol.check``; ``put``
takes exactly an ``EncodedBatch``; then ``BrokerServer.authorize``, the ACL), runs
the server method and returns a completed ``FakeReply``. Hold pulls that find
nothing wait (long polling) until a write to a queue they watch, or their suspend
time (capped as ``PullHoldActor`` caps it).

Controls for tests: ``stop(name)``/``start(name)`` (a stopped broker answers every
call with ``BrokerUnavailableError``; by default the coordinator drops it from the
routes at once, ``keep_route=True`` keeps routing to it, as before the coordinator
notices), ``fail_next(name, method, exc, times)`` and the call log ``calls``.

Not covered: delayed delivery runs only when a test calls ``schedule_tick(name)``;
SYNC_FLUSH (no flusher: never ``FLUSH_DISK_TIMEOUT``); push-consumer groups
(no Consumer actors: ``join_group`` fails as the coordinator's does without one);
nothing is serialized between client and server except requests (``check``
re-decodes them), so replies are shared objects; the clock is the real one.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from rayq.actors import protocol
from rayq.actors.protocol import (
    PullManyRequest,
    PullRequest,
)
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.server.broker_server import BrokerServer
from rayq.store import EncodedBatch, StoreConfig
from rayq.store.errors import BrokerUnavailableError, InvalidRequestError, RayqError
from rayq.store.message import MessageExt
from rayq.testing.fake_coordinator import FakeCoordinator
from rayq.transport.base import BrokerClient, CoordinatorClient, HoldClient, Reply

if TYPE_CHECKING:
    from rayq.consumer.pull import PullConsumer

T = TypeVar("T")

# Notified whenever any FakeReply completes: ``FakeTransport.wait`` sleeps on it.
_completed = threading.Condition()

# The request type each broker method takes, from the typed client.
_REQUESTS: dict[str, type] = BrokerClient.request_types()
# calls after which held pulls are re-checked
_WRITES = frozenset({"put", "send_back", "end_transaction"})


class FakeReply(Reply[T]):
    """A value or an exception, now (``done()``) or later (a held pull)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._value: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Reply[T]], None]] = []
        self._on_cancel: Callable[[], None] | None = None

    @classmethod
    def of(cls, value: Any) -> FakeReply[Any]:
        reply: FakeReply[Any] = cls()
        reply.set_result(value)
        return reply

    @classmethod
    def failed(cls, error: BaseException) -> FakeReply[Any]:
        reply: FakeReply[Any] = cls()
        reply.set_error(error)
        return reply

    def set_result(self, value: Any) -> bool:
        return self._complete(value, None)

    def set_error(self, error: BaseException) -> bool:
        return self._complete(None, error)

    def _complete(self, value: Any, error: BaseException | None) -> bool:
        with self._lock:
            if self._event.is_set():
                return False
            self._value, self._error = value, error
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        with _completed:
            _completed.notify_all()
        for cb in callbacks:
            cb(self)
        return True

    def result(self, timeout_s: float | None = None) -> T:
        if not self._event.wait(timeout_s):
            raise BrokerUnavailableError(f"a fake rayq actor did not answer in {timeout_s} s")
        if self._error is not None:
            # A fresh copy per caller, as Ray unpickles one (RayqErrors pickle by design).
            error = copy.copy(self._error) if isinstance(self._error, RayqError) else self._error
            raise error from None
        return self._value

    def done(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        if self.set_error(BrokerUnavailableError("the call was cancelled")):
            on_cancel = self._on_cancel
            if on_cancel is not None:
                on_cancel()

    async def wait(self) -> T:
        if not self.done():
            loop = asyncio.get_running_loop()
            future: asyncio.Future[None] = loop.create_future()

            def wake(_: Reply[T]) -> None:
                loop.call_soon_threadsafe(lambda: future.done() or future.set_result(None))

            self.add_done_callback(wake)
            await future
        return self.result(0)

    def add_done_callback(self, callback: Callable[[Reply[T]], None]) -> None:
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        callback(self)


class _Held:
    """A held pull: the queues it waits on (and beyond which offset), how to answer."""

    def __init__(
        self,
        broker: str,
        beyond: dict[tuple[str, int], int],
        again: Callable[[], Any],
        timeout_answer: Any,
    ) -> None:
        self.broker = broker
        self.beyond = beyond
        self.again = again
        self.timeout_answer = timeout_answer
        self.reply: FakeReply[Any] = FakeReply()
        self.timer: threading.Timer | None = None


class FakeCluster:
    """Real ``BrokerServer``s in ``root_dir/<broker>``, a fake coordinator, and controls."""

    def __init__(
        self,
        root_dir: str | Path,
        brokers: Sequence[str] = ("broker-a",),
        config: BrokerConfig | None = None,
        namespace: str = "rayq-fake",
    ) -> None:
        if isinstance(brokers, str):
            brokers = (brokers,)
        self.root = Path(root_dir)
        self.namespace = namespace
        base = config or BrokerConfig(store=StoreConfig.for_tests())
        self.servers: dict[str, BrokerServer] = {}
        for name in brokers:
            cfg = msgspec.structs.replace(base, broker_name=name)
            self.servers[name] = BrokerServer(cfg, str(self.root / name), node_id="fake-node")
        self.coordinator = FakeCoordinator(namespace)
        self.calls: list[tuple[str, str]] = []
        self.stopped: dict[str, bool] = {}  # broker -> still routed (keep_route)
        self._failures: dict[tuple[str, str], list[BaseException]] = {}
        self._held: list[_Held] = []
        self._lock = threading.RLock()
        self._closed = False

    def server(self, broker_name: str = "") -> BrokerServer:
        """A broker's server (the only one if no name is given), for reading it back."""
        return self.servers[broker_name or next(iter(self.servers))]

    # ------------------------------------------------------------ controls
    def stop(self, broker_name: str, *, keep_route: bool = False) -> None:
        """The broker becomes unreachable (its held pulls fail). The coordinator drops it
        from the routes at once unless ``keep_route`` (it has not noticed yet)."""
        self.server(broker_name)
        with self._lock:
            self.stopped[broker_name] = keep_route
            held = [h for h in self._held if h.broker == broker_name]
            self._held = [h for h in self._held if h.broker != broker_name]
        for h in held:
            self._finish(h, error=BrokerUnavailableError(f"broker {broker_name} stopped"))

    def start(self, broker_name: str) -> None:
        """A stopped broker is reachable (and routed) again, with its store as it was."""
        self.server(broker_name)
        with self._lock:
            self.stopped.pop(broker_name, None)

    def fail_next(
        self,
        broker_name: str,
        method: str,
        exc: BaseException | type[BaseException],
        times: int = 1,
    ) -> None:
        """The next ``times`` calls of ``method`` on the broker raise ``exc`` (an instance,
        or a class made with a message). Hold calls are ``"hold.pull"``/``"hold.pull_many"``."""
        self.server(broker_name)
        error = (
            exc(f"injected by fail_next({broker_name}, {method})") if isinstance(exc, type) else exc
        )
        with self._lock:
            self._failures.setdefault((broker_name, method), []).extend([error] * times)

    def calls_of(self, method: str) -> list[str]:
        """The brokers ``method`` was called on, in order."""
        return [b for b, m in self.calls if m == method]

    def schedule_tick(self, broker_name: str = "") -> None:
        """Deliver the due delayed messages (the broker actor's timer, by hand)."""
        with self._lock:
            self.server(broker_name).schedule_tick()
        self._wake(broker_name or next(iter(self.servers)))

    def transaction_tick(self, broker_name: str = "") -> None:
        """One round of the transaction check service (the broker actor's timer, by hand)."""
        with self._lock:
            self.server(broker_name).transaction_tick()
        self._wake(broker_name or next(iter(self.servers)))

    def restart(self, broker_name: str = "") -> BrokerServer:
        """Close a broker's server and open its store again (a broker restart: recovery
        from its files); its held pulls fail."""
        name = broker_name or next(iter(self.servers))
        with self._lock:
            old = self.servers[name]
            held = [h for h in self._held if h.broker == name]
            self._held = [h for h in self._held if h.broker != name]
            old.close()
            self.servers[name] = BrokerServer(old.config, str(old.root), node_id="fake-node")
        for h in held:
            self._finish(h, error=BrokerUnavailableError(f"broker {name} restarted"))
        return self.servers[name]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            held, self._held = self._held, []
        for h in held:
            self._finish(h, error=BrokerUnavailableError("the fake cluster is closed"))
        for srv in self.servers.values():
            srv.close()
        self.coordinator.close()

    def __enter__(self) -> FakeCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --------------------------------------------------------- broker calls
    def _enter(self, broker_name: str, method: str) -> BaseException | None:
        """Log the call; the error it must end in (stopped, injected), if any. Lock held."""
        self.calls.append((broker_name, method))
        if self._closed:
            return BrokerUnavailableError("the fake cluster is closed")
        if broker_name in self.stopped:
            return BrokerUnavailableError(
                f"broker {broker_name} is not reachable (stopped)", broker=broker_name
            )
        pending = self._failures.get((broker_name, method))
        if pending:
            return pending.pop(0)
        return None

    def call_broker(self, broker_name: str, method: str, arg: Any) -> FakeReply[Any]:
        srv = self.server(broker_name)
        with self._lock:
            error = self._enter(broker_name, method)
            if error is None:
                try:
                    value = self._serve(srv, method, arg)
                except Exception as exc:  # the reply carries it, as Ray's would
                    error = exc
        if method in _WRITES and error is None:
            self._wake(broker_name)
        return FakeReply.failed(error) if error is not None else FakeReply.of(value)

    def _serve(self, srv: BrokerServer, method: str, arg: Any) -> Any:
        if method == "put":
            if type(arg) is not EncodedBatch:
                raise InvalidRequestError(f"put takes an EncodedBatch, got {type(arg).__name__}")
            srv.authorize("put", arg)
            return srv.put(arg)
        cls = _REQUESTS.get(method)
        if cls is None:
            raise InvalidRequestError(f"the broker has no client method {method!r}")
        req = protocol.check(arg, cls)
        srv.authorize(method, req)
        if method == "pull_many" and req.commits:
            srv.commit_pulled(req)
        return getattr(srv, method)(req)

    # ----------------------------------------------------------- hold calls
    def call_hold(self, broker_name: str, method: str, req: Any) -> FakeReply[Any]:
        srv = self.server(broker_name)
        held: _Held | None = None
        with self._lock:
            error = self._enter(broker_name, f"hold.{method}")
            if error is None:
                try:
                    if method == "pull":
                        req = protocol.check(req, PullRequest)
                        srv.authorize("pull", req)
                        resp = srv.pull(req)
                        if req.suspend_ms > 0 and protocol.nothing_new([resp]):
                            beyond = {
                                (req.topic, req.queue_id): max(req.queue_offset, resp.max_offset)
                            }
                            held = _Held(broker_name, beyond, lambda: srv.pull(req), resp)
                    elif method == "pull_many":
                        req = protocol.check(req, PullManyRequest)
                        srv.authorize("pull_many", req)
                        if req.commits:
                            srv.commit_pulled(req)
                        reply = srv.pull_many(req)
                        if req.suspend_ms > 0 and protocol.nothing_new(reply.results):
                            beyond = {
                                (i.topic, i.queue_id): max(i.queue_offset, r.max_offset)
                                for i, r in zip(req.items, reply.results, strict=True)
                            }
                            held = _Held(broker_name, beyond, lambda: srv.pull_many(req), reply)
                        resp = reply
                    else:
                        raise InvalidRequestError(f"the hold service has no method {method!r}")
                except Exception as exc:
                    error = exc
            if held is not None:
                self._held.append(held)
                held.reply._on_cancel = lambda h=held: self._unhold(h)
                held.timer = threading.Timer(
                    srv.config.hold_s(req.suspend_ms), self._timeout, args=(held,)
                )
                held.timer.daemon = True
                held.timer.start()
                return held.reply
        return FakeReply.failed(error) if error is not None else FakeReply.of(resp)

    def _unhold(self, held: _Held) -> bool:
        with self._lock:
            if held not in self._held:
                return False
            self._held.remove(held)
        if held.timer is not None:
            held.timer.cancel()
        return True

    def _timeout(self, held: _Held) -> None:
        if self._unhold(held):
            self._finish(held, value=held.timeout_answer)

    def _wake(self, broker_name: str) -> None:
        """Answer the held pulls of ``broker_name`` whose queues grew."""
        srv = self.servers[broker_name]
        answers: list[tuple[_Held, Any, BaseException | None]] = []
        with self._lock:
            for h in [h for h in self._held if h.broker == broker_name]:
                if not any(srv.store.max_offset(t, q) > b for (t, q), b in h.beyond.items()):
                    continue
                self._held.remove(h)
                try:
                    answers.append((h, h.again(), None))
                except Exception as exc:
                    answers.append((h, None, exc))
        for h, value, error in answers:
            if h.timer is not None:
                h.timer.cancel()
            self._finish(h, value=value, error=error)

    @staticmethod
    def _finish(held: _Held, value: Any = None, error: BaseException | None = None) -> None:
        if held.timer is not None:
            held.timer.cancel()
        if error is not None:
            held.reply.set_error(error)
        else:
            held.reply.set_result(value)

    # ---------------------------------------------------------- coordinator
    def call_coordinator(self, method: str, req: Any) -> FakeReply[Any]:
        """The real coordinator service's ``method`` (fake_coordinator.py), once it has
        learned every broker's current ``info()``: routed unless stopped (or stopped
        with ``keep_route``), lost when stopped."""
        with self._lock:
            brokers = [(srv.info(), self.stopped.get(n, True)) for n, srv in self.servers.items()]
        try:
            value = self.coordinator.call(method, req, brokers)
        except NotImplementedError:
            raise
        except Exception as exc:
            return FakeReply.failed(exc)
        return FakeReply.of(value)


class FakeTransport:
    """``rayq.transport.base.Transport`` over a ``FakeCluster``, in-process."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.namespace = cluster.namespace

    def broker(self, broker_name: str) -> BrokerClient:
        self._known(broker_name)
        return BrokerClient(lambda method, arg: self.cluster.call_broker(broker_name, method, arg))

    def hold(self, broker_name: str) -> HoldClient:
        self._known(broker_name)
        return HoldClient(lambda method, arg: self.cluster.call_hold(broker_name, method, arg))

    def coordinator(self) -> CoordinatorClient:
        return CoordinatorClient(self.cluster.call_coordinator)

    def forget(self, broker_name: str) -> None:
        """Nothing is cached: a later call reaches the broker as it is then."""

    def wait(self, replies: Sequence[Reply[Any]], timeout_s: float) -> list[Reply[Any]]:
        """The replies that are ready, waiting up to ``timeout_s`` for the first."""
        deadline = time.monotonic() + max(timeout_s, 0.0)
        with _completed:
            while True:
                ready = [r for r in replies if r.done()]
                left = deadline - time.monotonic()
                if ready or left <= 0 or not replies:
                    return ready
                _completed.wait(left)

    def _known(self, broker_name: str) -> None:
        if broker_name not in self.cluster.servers:
            raise BrokerUnavailableError(
                f"actor rayq-broker-{broker_name} is not running", broker=broker_name
            )


# ---------------------------------------------------------- consume-service tests
_CLUSTERING = protocol.MessageModel.CLUSTERING
_FIRST_OFFSET = protocol.ConsumeFromWhere.FIRST_OFFSET
WAIT_S = 30.0  # ``until``'s default: generous, what a test waits for (never a figure)


def fill_topic(
    cluster: FakeCluster, topic: str, n: int, body: bytes = b"x", batch: int = 100
) -> None:
    """Send ``n`` messages with ``body`` to ``topic`` through the fake, ``batch`` per send."""
    from rayq.producer.producer import Producer
    from rayq.store import Message

    with Producer("pg", transport=FakeTransport(cluster)) as producer:
        for start in range(0, n, batch):
            producer.send_batch([Message(topic, body)] * min(batch, n - start))


def consume_service(
    cluster: FakeCluster,
    listener: Callable[..., Any],
    *,
    group: str,
    topic: str,
    client_id: str = "c1",
    orderly: bool = False,
    model: protocol.MessageModel = _CLUSTERING,
    consume_from: protocol.ConsumeFromWhere = _FIRST_OFFSET,
    max_reconsume_times: int = -1,
    auto_commit: bool = True,
    config: Any = None,
) -> Any:
    """A push consumer's ``ConsumeService`` on the fake transport, subscribed to ``topic``
    (client logic tests drive it without Ray: ``open``, ``assign``, ``commit``...)."""
    from rayq.actors.protocol.config import ClientConfig
    from rayq.actors.server.allocation import AllocateStrategy
    from rayq.consumer.service import ConsumeService

    return ConsumeService(
        group=group,
        client_id=client_id,
        subscriptions={topic: "*"},
        listener=listener,
        orderly=orderly,
        model=model,
        consume_from=consume_from,
        consume_timestamp_ms=0,
        max_reconsume_times=max_reconsume_times,
        strategy=AllocateStrategy.AVERAGELY,
        allocation=[],
        config=config or ClientConfig(),
        namespace="rayq-fake",
        transport=FakeTransport(cluster),
        auto_commit=auto_commit,
    )


async def until(check: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    """Wait (in the event loop) until ``check()``; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def pulled(queue_offset: int, body: bytes = b"x", *, topic: str = "t") -> MessageExt:
    """A message as a pull hands it over, at ``queue_offset`` of queue 0 of ``topic``
    (everything else empty or zero): what process-queue and rebalance tests feed in."""
    return MessageExt(
        topic=topic,
        body=body,
        tags=None,
        keys=[],
        properties={},
        msg_id="",
        offset_msg_id="",
        queue_id=0,
        queue_offset=queue_offset,
        commitlog_offset=0,
        store_size=0,
        born_timestamp=0,
        store_timestamp=0,
        born_host="",
        store_host="",
        reconsume_times=0,
    )


def poll_until(consumer: PullConsumer, n: int, timeout_s: float = 10.0) -> list[MessageExt]:
    """Poll ``consumer`` until it gave ``n`` messages or ``timeout_s`` passed; what it gave."""
    got: list[MessageExt] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        got.extend(consumer.poll(0.05))
    return got


def wait_until(check: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    """``until`` outside an event loop: poll ``check()`` in this thread (sleeping between
    looks); AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


__all__ = [
    "FakeCluster",
    "FakeReply",
    "FakeTransport",
    "consume_service",
    "fill_topic",
    "poll_until",
    "pulled",
    "until",
    "wait_until",
]
