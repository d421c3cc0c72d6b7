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

Each broker call is served by the broker's real ``BrokerEndpoint`` (the check, the
ACL, the processors: actors/server/endpoint.py) and each hold call by its real
``HoldService`` (actors/server/long_polling.py), on one event-loop thread of the
fake's (rayq/testing/fake_broker.py); the fake only adds its controls. A broker call
returns a completed ``FakeReply``; a hold pull that finds nothing is parked at the
endpoint and answered by the next append to a queue it watches, or at its suspend
time (capped as ``PullHoldActor`` caps it).

Controls for tests: ``stop(name)``/``start(name)`` (a stopped broker answers every
call with ``BrokerUnavailableError``; by default the coordinator drops it from the
routes at once, ``keep_route=True`` keeps routing to it, as before the coordinator
notices), ``fail_next(name, method, exc, times)`` and the call log ``calls``.

Not covered: delayed delivery runs only when a test calls ``schedule_tick(name)``, and
POP leases that ended are redelivered only at ``pop_revive_tick(name)``;
SYNC_FLUSH (the fake's flusher reports every offset durable: never
``FLUSH_DISK_TIMEOUT``); replication (no slaves); push-consumer groups (no Consumer
actors: ``join_group`` fails as the coordinator's does without one); nothing is
serialized between client and server except requests (``check`` re-decodes them), so
replies are shared objects; the clock is the real one.
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
from rayq.actors.protocol.server_key import ServerKey
from rayq.actors.server.acl import coordinator_acl
from rayq.actors.server.broker_runtime import open_server
from rayq.actors.server.broker_server import BrokerServer
from rayq.store import EncodedBatch, StoreConfig
from rayq.store.errors import BrokerUnavailableError, InvalidRequestError, RayqError
from rayq.store.message import MessageExt
from rayq.testing.fake_broker import FakeBroker, LoopThread
from rayq.testing.fake_coordinator import FakeCoordinator
from rayq.transport.base import BrokerClient, CoordinatorClient, HoldClient, Reply

if TYPE_CHECKING:
    from rayq.consumer.pull import PullConsumer

T = TypeVar("T")

# Notified whenever any FakeReply completes: ``FakeTransport.wait`` sleeps on it.
_completed = threading.Condition()

# The request type each broker method takes, from the typed client.
_REQUESTS: dict[str, type] = BrokerClient.request_types()


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
                def settle() -> None:
                    if not future.done():
                        future.set_result(None)

                loop.call_soon_threadsafe(settle)

            self.add_done_callback(wake)
            await future
        return self.result(0)

    def add_done_callback(self, callback: Callable[[Reply[T]], None]) -> None:
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        callback(self)


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
        self.brokers: dict[str, FakeBroker] = {}  # the real endpoint and hold service of each
        self._loop = LoopThread()
        # the fake deployment's server key: its brokers, hold services and coordinator
        # check the server operations' proofs with it, as the actors do
        self.server_key = ServerKey.new()
        for name in brokers:
            cfg = msgspec.structs.replace(base, broker_name=name)
            self._open(BrokerServer(cfg, str(self.root / name), node_id="fake-node"))
        self.coordinator = FakeCoordinator(
            namespace, self._loop, self.server_key, acl=coordinator_acl(base, str(self.root))
        )
        self.calls: list[tuple[str, str]] = []
        self.stopped: dict[str, bool] = {}  # broker -> still routed (keep_route)
        self._failures: dict[tuple[str, str], list[BaseException]] = {}
        self._held: list[tuple[str, FakeReply[Any], asyncio.Task[Any]]] = []
        self._lock = threading.RLock()
        self._closed = False

    def _open(self, server: BrokerServer) -> None:
        self.servers[server.name] = server
        self.brokers[server.name] = FakeBroker(server, self.server_key)

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
        self._fail_held(broker_name, BrokerUnavailableError(f"broker {broker_name} stopped"))

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
        broker = self.brokers[broker_name or next(iter(self.servers))]
        self._loop.run(_tick(broker, broker.server.schedule_tick))

    def transaction_tick(self, broker_name: str = "") -> None:
        """One round of the transaction check service (the broker actor's timer, by hand)."""
        broker = self.brokers[broker_name or next(iter(self.servers))]
        self._loop.run(_tick(broker, broker.server.transaction_tick))

    def pop_revive_tick(self, broker_name: str = "") -> None:
        """Redeliver the messages whose POP leases ended (the broker actor's timer)."""
        broker = self.brokers[broker_name or next(iter(self.servers))]
        self._loop.run(_tick(broker, broker.server.pop_revive_tick))

    def restart(self, broker_name: str = "") -> BrokerServer:
        """Close a broker's server and open its store again (a broker restart: recovery
        from its files); its held pulls fail."""
        name = broker_name or next(iter(self.servers))
        self._fail_held(name, BrokerUnavailableError(f"broker {name} restarted"))
        with self._lock:
            old = self.servers[name]
            old.close()
            self._open(BrokerServer(old.config, str(old.root), node_id="fake-node"))
        return self.servers[name]

    def fail_over(self, broker_name: str = "", *, cut_to: int) -> BrokerServer:
        """A failover that lost the records from commit-log offset ``cut_to`` on (the
        master died before its slave had them): the broker's log is cut there and its store
        opened as the promoted slave would be, in a new epoch (``open_server``: committed
        offsets past its queues' ends move back); its held pulls fail."""
        name = broker_name or next(iter(self.servers))
        self._fail_held(name, BrokerUnavailableError(f"broker {name} failed over"))
        with self._lock:
            old = self.servers[name]
            epoch = old.epochs.current + 1
            old.store.truncate_to(cut_to)
            old.close()
            self._open(open_server(old.config, str(old.root), "fake-node", epoch))
        return self.servers[name]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._fail_held(None, BrokerUnavailableError("the fake cluster is closed"))
        self.coordinator.close()
        self._loop.close()
        for srv in self.servers.values():
            srv.close()

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
        """The broker's endpoint serves ``method`` (a client operation) on the fake's loop."""
        broker = self.brokers[self.server(broker_name).name]
        with self._lock:
            error = self._enter(broker_name, method)
        if error is not None:
            return FakeReply.failed(error)
        try:
            value = self._loop.run(_serve(broker, method, arg))
        except Exception as exc:  # the reply carries it, as Ray's would
            return FakeReply.failed(exc)
        return FakeReply.of(value)

    # ----------------------------------------------------------- hold calls
    def call_hold(self, broker_name: str, method: str, req: Any) -> FakeReply[Any]:
        """The broker's real hold service (long polling) serves ``method``: answered at
        once if the pull finds something, else when an append answers it or at its
        suspend time (``PullHoldActor``'s cap)."""
        broker = self.brokers[self.server(broker_name).name]
        with self._lock:
            error = self._enter(broker_name, f"hold.{method}")
        if error is not None:
            return FakeReply.failed(error)
        try:
            task = self._loop.run(_start_hold(broker, method, req))
        except Exception as exc:
            return FakeReply.failed(exc)
        reply: FakeReply[Any] = FakeReply()
        if task.done():
            _complete(reply, task)
            return reply
        entry = (broker_name, reply, task)
        with self._lock:
            self._held.append(entry)

        def cancel() -> None:
            self._loop.loop.call_soon_threadsafe(task.cancel)

        reply._on_cancel = cancel
        task.add_done_callback(lambda t: self._answer_held(entry))
        return reply

    def _answer_held(self, entry: tuple[str, FakeReply[Any], asyncio.Task[Any]]) -> None:
        """A held pull's answer, handed over on a thread of its own (not the loop's: a
        client's callback may call the fake again and wait for the loop)."""
        with self._lock:
            if entry in self._held:
                self._held.remove(entry)
        threading.Thread(target=_complete, args=(entry[1], entry[2]), daemon=True).start()

    def _fail_held(self, broker_name: str | None, error: BaseException) -> None:
        """Fail the held pulls of ``broker_name`` (of every broker if None)."""
        with self._lock:
            held = [h for h in self._held if broker_name is None or h[0] == broker_name]
            self._held = [h for h in self._held if h not in held]
        for _, reply, task in held:
            reply.set_error(error)
            self._loop.loop.call_soon_threadsafe(task.cancel)

    # ------------------------------------------------------ server operations
    def call_server(self, target: str, method: str, *args: Any, proof: Any = None) -> Any:
        """A server operation as another server actor (or a stranger) calls it: the
        broker ``target``'s endpoint ``method`` (``ha_fetch``, ``ha_metadata``,
        ``flush_targets`` ...), its hold service's (``hold.deliver``) or the coordinator's
        (``coordinator.register_broker``), with ``proof`` (None: without one). Its answer,
        or what it raised. ``prove`` makes a valid proof."""
        return self._loop.run(self._server_call(target, method, args, proof))

    async def _server_call(
        self, target: str, method: str, args: tuple[Any, ...], proof: Any
    ) -> Any:
        service, _, name = method.rpartition(".")
        if service == "coordinator":
            return await getattr(self.coordinator.service, name)(*args, proof)
        broker = self.brokers[self.server(target).name]
        if service == "hold":
            return getattr(broker.hold, name)(*args, proof)
        return await getattr(broker.endpoint, name)(*args, proof)

    def prove(self, target: str, method: str, *args: Any) -> Any:
        """A valid proof of the fake deployment's server key for ``call_server``."""
        from rayq.actors.protocol.names import (
            COORDINATOR_NAME,
            broker_actor_name,
            hold_actor_name,
        )
        from rayq.actors.protocol.server_key import Guard

        service, _, name = method.rpartition(".")
        service = service or "broker"
        actor = {
            "coordinator": COORDINATOR_NAME,
            "hold": hold_actor_name(target),
            "broker": broker_actor_name(target),
        }[service]
        return Guard(self.server_key, service, actor).prove(name, *args)

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


async def _serve(broker: FakeBroker, method: str, arg: Any) -> Any:
    """``method`` of the broker's endpoint for ``arg`` (a client operation only)."""
    if method == "put":
        if type(arg) is not EncodedBatch:
            raise InvalidRequestError(f"put takes an EncodedBatch, got {type(arg).__name__}")
        return await broker.endpoint.put(arg)
    if method not in _REQUESTS:
        raise InvalidRequestError(f"the broker has no client method {method!r}")
    return await getattr(broker.endpoint, method)(arg)


async def _start_hold(broker: FakeBroker, method: str, req: Any) -> asyncio.Task[Any]:
    """Start a hold pull and run it until it answers or waits."""
    if method == "pull":
        task: asyncio.Task[Any] = asyncio.ensure_future(
            broker.hold.pull(protocol.check(req, PullRequest))
        )
    elif method == "pull_many":
        task = asyncio.ensure_future(broker.hold.pull_many(protocol.check(req, PullManyRequest)))
    else:
        raise InvalidRequestError(f"the hold service has no method {method!r}")
    for _ in range(3):  # its broker calls complete without waiting: a few steps settle it
        if task.done():
            break
        await asyncio.sleep(0)
    return task


async def _tick(broker: FakeBroker, tick: Callable[[], Any]) -> None:
    """A timer's round by hand: run ``tick``, wake the pulls parked on what it wrote."""
    broker.endpoint.wake(tick())


def _complete(reply: FakeReply[Any], task: asyncio.Task[Any]) -> None:
    if task.cancelled():
        reply.set_error(BrokerUnavailableError("the call was cancelled"))
    elif task.exception() is not None:
        reply.set_error(task.exception())  # type: ignore[arg-type]
    else:
        reply.set_result(task.result())


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
