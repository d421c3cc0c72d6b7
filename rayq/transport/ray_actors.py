"""``RayTransport``: the client transport over Ray actor calls (see rayq/transport/base.py).

Brokers, hold services and the coordinator are named actors in one namespace;
handles are looked up by name on first use and again after ``forget`` (a broker
that failed may have been restarted by Ray). Each typed method of the clients
in rayq/transport/base.py becomes one ``handle.<method>.remote(...)`` call.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgspec
import ray

from rayq.actors.protocol import (
    COORDINATOR_NAME,
    ReadReplicaRequest,
    broker_actor_name,
    from_wire,
    hold_actor_name,
    to_wire,
)
from rayq.store import EncodedBatch
from rayq.store.errors import BrokerUnavailableError, RayqError
from rayq.transport.base import BrokerClient, CoordinatorClient, HoldClient, Reply, _Client

logger = logging.getLogger(__name__)

# Records per put argument: under Ray's 100 KiB inline limit with room for pickling.
INLINE_BYTES = 100 * 1024 - 2048
# Beyond this many chunks one object-store transfer is faster (benchmarks/inline_bench.py).
INLINE_CHUNKS_MAX = 6
REPLICA_LOOKUP_TIMEOUT_S = 5.0
SLAVE_READ_RECHECK_S = 5.0  # reading from a slave: ask again this often if the master is back

T = TypeVar("T")


def unwrap(exc: BaseException) -> BaseException:
    """The rayq error an actor raised, or BrokerUnavailableError for a lost actor."""
    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = exc.cause if hasattr(exc, "cause") else None
        if isinstance(cause, RayqError):
            return cause
    if isinstance(exc, RayqError):
        return exc
    if isinstance(
        exc,
        ray.exceptions.RayActorError
        | ray.exceptions.ActorUnavailableError
        | ray.exceptions.ActorUnschedulableError,
    ):  # the last: its node is gone
        return BrokerUnavailableError(f"a rayq actor is not reachable: {exc}")
    if isinstance(exc, ray.exceptions.GetTimeoutError | TimeoutError):
        return BrokerUnavailableError(f"a rayq actor did not answer in time: {exc}")
    return exc


class RayReply(Reply[T]):
    """A Ray ObjectRef with rayq errors; an answer sent as ``to_wire`` bytes is decoded
    as ``reply_type``."""

    __slots__ = ("_future", "ref", "reply_type")

    def __init__(self, ref: Any, reply_type: type | None = None) -> None:
        self.ref = ref
        self.reply_type = reply_type
        self._future: concurrent.futures.Future[Any] | None = None

    def future(self) -> concurrent.futures.Future[Any]:
        """The ref as a concurrent future (made once), to wait on beside others."""
        if self._future is None:
            self._future = self.ref.future()
        return self._future

    def _decoded(self, value: Any) -> T:
        if type(value) is bytes and self.reply_type is not None:
            return from_wire(value, self.reply_type)
        return value

    def result(self, timeout_s: float | None = None) -> T:
        try:
            return self._decoded(ray.get(self.ref, timeout=timeout_s))
        except Exception as exc:
            raise unwrap(exc) from None

    async def wait(self) -> T:
        try:
            return self._decoded(await self.ref)
        except Exception as exc:
            raise unwrap(exc) from None

    def add_done_callback(self, callback: Callable[[Reply[T]], None]) -> None:
        self.ref.future().add_done_callback(lambda _: callback(self))

    def done(self) -> bool:
        ready, _ = ray.wait([self.ref], timeout=0)
        return bool(ready)

    def cancel(self) -> None:
        try:
            ray.cancel(self.ref)
        except Exception:  # already finished, or its actor is gone
            logger.debug("cancel of a finished call ignored")


class RayTransport:
    """Named rayq actors in ``namespace`` (Ray must be initialized)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        if not ray.is_initialized():
            raise BrokerUnavailableError(
                "Ray is not initialized: call rayq.start() (embedded) or rayq.connect() first"
            )
        try:
            handle = ray.get_actor(COORDINATOR_NAME, namespace=namespace)
        except ValueError:
            raise BrokerUnavailableError(
                f"no rayq deployment in Ray namespace {namespace!r}: start one with rayq.start()"
            ) from None
        self._coordinator = CoordinatorClient(_invoker(lambda: handle, CoordinatorClient))
        # clients by the replica actor they call (a broker's own name, or a slave's):
        # keyed by replica, so a client can never call another replica than its key says
        self._brokers: dict[str, BrokerClient] = {}
        self._holds: dict[str, HoldClient] = {}
        # broker name -> (replica serving it, until when): a slave while its master is
        # lost (asked of the coordinator after a failure), looked up again soon
        self._replicas: dict[str, tuple[str, float]] = {}

    def broker(self, broker_name: str) -> BrokerClient:
        return self.broker_replica(self.replica_of(broker_name))

    def hold(self, broker_name: str) -> HoldClient:
        return self.hold_replica(self.replica_of(broker_name))

    def broker_replica(self, replica: str) -> BrokerClient:
        """The client of the broker actor of ``replica`` (a broker or a slave's name)."""
        client = self._brokers.get(replica)
        if client is None:
            handle = self._actor(broker_actor_name(replica))
            client = self._brokers[replica] = BrokerClient(_invoker(lambda: handle, BrokerClient))
        return client

    def hold_replica(self, replica: str) -> HoldClient:
        """The client of the hold service of ``replica``."""
        client = self._holds.get(replica)
        if client is None:
            handle = self._actor(hold_actor_name(replica))
            client = self._holds[replica] = HoldClient(_invoker(lambda: handle, HoldClient))
        return client

    def _stale(self, broker_name: str) -> None:
        """Drop the replica cached for ``broker_name`` if a slave serves it and it is
        time to ask whether the master is back."""
        found = self._replicas.get(broker_name)
        if found is not None and found[1] <= time.monotonic():
            self._replicas.pop(broker_name, None)

    def _replica(self, broker_name: str) -> str:
        """Which replica serves ``broker_name``: the broker itself unless a call to it has
        failed (``forget``); then the coordinator says (a slave while the master is lost)."""
        found = self._replicas.get(broker_name)
        if found is not None:
            return found[0]
        replica = broker_name
        try:
            req = ReadReplicaRequest(broker_name=broker_name)
            replica = self._coordinator.read_replica(req).result(REPLICA_LOOKUP_TIMEOUT_S).replica
        except RayqError:  # the coordinator is restarting: the broker itself, as before
            pass
        if replica != broker_name:
            logger.warning("broker %s: its master is lost; reading from %s", broker_name, replica)
            self._replicas[broker_name] = (replica, time.monotonic() + SLAVE_READ_RECHECK_S)
        else:
            self._replicas[broker_name] = (replica, float("inf"))
        return replica

    def replica_of(self, broker_name: str) -> str:
        """The replica serving ``broker_name`` now (cached; asked again after ``forget``,
        and every few seconds while it is a slave)."""
        self._stale(broker_name)
        return self._replica(broker_name)

    def serving_replica(self, broker_name: str) -> str:
        """The replica serving reads of ``broker_name`` now, as the coordinator says (a
        slave while the master is lost), for callers that reach the actor by name
        themselves (Spark's JVM reads: rayq/spark.py)."""
        self.forget(broker_name)
        return self._replica(broker_name)

    def coordinator(self) -> CoordinatorClient:
        return self._coordinator

    def forget(self, broker_name: str) -> None:
        """Ask the coordinator at the next use which replica serves ``broker_name``, and
        look up the actors of the broker and of the replica it was read from again (a
        failover may have made a new actor of either name)."""
        found = self._replicas.pop(broker_name, None)
        for replica in {broker_name, found[0] if found else broker_name}:
            self._brokers.pop(replica, None)
            self._holds.pop(replica, None)

    def wait(self, replies: Sequence[Reply[Any]], timeout_s: float) -> list[Reply[Any]]:
        """The replies that are ready: the first ones within ``timeout_s``, and then every
        other one that is ready too."""
        by_ref = {r.ref: r for r in replies}  # type: ignore[attr-defined]
        refs = list(by_ref)
        if not refs:
            return []
        ready, _ = ray.wait(refs, num_returns=1, timeout=max(timeout_s, 0.0))
        if ready and len(refs) > 1:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        return [by_ref[r] for r in ready]

    def _actor(self, name: str) -> Any:
        try:
            return ray.get_actor(name, namespace=self.namespace)
        except ValueError:
            raise BrokerUnavailableError(f"actor {name} is not running") from None


def inline_args(
    batch: EncodedBatch, limit: int = INLINE_BYTES, most: int = INLINE_CHUNKS_MAX
) -> tuple[Any, ...]:
    """A put's arguments: the batch as it is while its records fit in Ray's inline limit;
    else the batch without its records, then the records: in near-equal chunks each
    under ``limit`` if at most ``most`` of them, or as one bytes object (still one call,
    so the broker appends the whole batch at once, in order). Ray passes an argument of
    up to ``max_direct_call_object_size`` (100 KiB) inside the call; a larger one goes
    through the object store, which costs about 2 ms whatever its size: more than the
    chunks up to a few hundred KiB, less beyond (benchmarks/inline_bench.py). Records
    beside the batch skip its msgpack encoding and decoding: two copies fewer of them."""
    records = batch.records
    parts = -(-len(records) // limit)
    if parts <= 1:
        return (batch,)
    meta = msgspec.structs.replace(batch, records=b"")
    if parts > most:
        return (meta, records)
    size = -(-len(records) // parts)
    view = memoryview(records)
    return (meta, *(bytes(view[i : i + size]) for i in range(0, len(records), size)))


def _invoker(handle_of: Any, client: type[_Client]) -> Any:
    """``invoke`` for one actor: a request of the type the method takes goes as
    ``to_wire`` bytes (anything else as it is, for the actor to refuse), a put's records
    in chunks under the inline limit, and a reply that comes as bytes is decoded."""
    requests = client.request_types()
    replies = client.reply_types()

    def invoke(method: str, *args: Any) -> RayReply[Any]:
        if len(args) == 1 and type(args[0]) is requests.get(method):
            args = inline_args(args[0]) if method == "put" else args
            args = (to_wire(args[0]), *args[1:])
        try:
            return RayReply(getattr(handle_of(), method).remote(*args), replies.get(method))
        except Exception as exc:  # e.g. the actor is gone for good
            raise unwrap(exc) from None

    return invoke


__all__ = ["RayReply", "RayTransport", "inline_args", "unwrap"]


def spawn_consumer(factory: Callable[[], Any], namespace: str, name: str) -> Any:
    """Start a push consumer's Consumer actor (``rayq.actors.consumer``), which runs the
    service ``factory`` builds; Ray is the one transport that runs consumers as actors."""
    from rayq.actors.consumer import spawn_consumer as spawn

    return spawn(factory, namespace, name)
