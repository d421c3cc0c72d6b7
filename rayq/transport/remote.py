"""``RemoteTransport``: a deployment reached from outside Ray, through its bootstrap
endpoint (actors/server/gateway.py), the way Kafka clients use ``bootstrap.servers``.

The bootstrap endpoint is a socket of the coordinator's; a process proves the
deployment key there (the data plane's handshake, actors/protocol/frames.py) and then
calls the coordinator's client operations over it. Brokers are reached directly on
their own data plane, as ``DirectTransport`` reaches them inside Ray: the bootstrap
endpoint says where each replica listens and gives its key (``endpoint``), and which
replica serves a broker (``read_replica``). Ray is not imported.

A wrong key is ``PermissionDeniedError``; nothing listening, or something that is not
a rayq endpoint, is ``BrokerUnavailableError``; each within ``OPEN_TIMEOUT_S``. A
lost bootstrap connection is made again at the next call.
"""

from __future__ import annotations

import threading
import time
from typing import cast

from rayq.actors.protocol import DataEndpoint, EndpointRequest, ReadReplicaRequest, to_wire
from rayq.actors.protocol.config import REPLICA_SEPARATOR
from rayq.store.errors import BrokerUnavailableError, PermissionDeniedError
from rayq.transport.base import CoordinatorClient
from rayq.transport.sockets import (
    Connection,
    SocketReply,
    SocketTransport,
    socket_client,
)

LOOKUP_TIMEOUT_S = 10.0
OPEN_TIMEOUT_S = 4.0  # connect and handshake, each: a bad address fails within 5 s
SLAVE_READ_RECHECK_S = 5.0  # a broker read from its slave: is the master back?
BOOTSTRAP_MAX_FRAME_BYTES = 16 << 20  # as the gateway's (coordinator requests are small)


class RemoteTransport(SocketTransport):
    """Every call over sockets: the coordinator's through the bootstrap endpoint at
    ``host``:``port``, the brokers' on their data planes."""

    def __init__(self, url: str, host: str, port: int, key: bytes) -> None:
        super().__init__()
        self.url = url
        self.namespace = url  # what clients show as their deployment
        self._bootstrap = DataEndpoint(
            host=host,
            port=port,
            unix_path="",
            node_id="",
            key=key,
            max_frame_bytes=BOOTSTRAP_MAX_FRAME_BYTES,
        )
        self._conn: Connection | None = None
        self._conn_lock = threading.Lock()
        self._replicas: dict[str, tuple[str, float]] = {}  # broker -> (replica, until)
        self.bootstrap()  # a bad address or key fails now, not at the first call

    def bootstrap(self) -> Connection:
        """The open connection to the bootstrap endpoint, made (again) if needed."""
        conn = self._conn
        if conn is not None and conn.closed is None:
            return conn
        with self._conn_lock:
            if self._conn is None or self._conn.closed is not None:
                self._conn = self._open()
            return self._conn

    def _open(self) -> Connection:
        try:
            conn = Connection(
                f"the bootstrap endpoint {self.url}", self._bootstrap, "", timeout_s=OPEN_TIMEOUT_S
            )
        except BrokerUnavailableError as exc:
            stage, reason = exc.details.get("stage"), exc.details.get("reason", str(exc))
            if stage == "proof":
                raise PermissionDeniedError(
                    f"the deployment at {self.url} refused the key: it is not this "
                    "deployment's (use the rayq.key that `rayq start` wrote in its store "
                    "directory, or RAYQ_KEY)",
                    address=self.url,
                ) from None
            if stage == "challenge":
                raise BrokerUnavailableError(
                    f"{self.url} did not answer as a rayq bootstrap endpoint ({reason}): is "
                    "that the URL `rayq start` printed?",
                    address=self.url,
                ) from None
            raise BrokerUnavailableError(
                f"cannot reach the rayq deployment at {self.url} ({reason}): is it running? "
                "(`rayq start` and rayq.start() print their URL)",
                address=self.url,
            ) from None
        conn.client = socket_client(conn, CoordinatorClient)
        return conn

    def coordinator(self) -> CoordinatorClient:
        return cast(CoordinatorClient, self.bootstrap().client)

    def replica_of(self, broker_name: str) -> str:
        found = self._replicas.get(broker_name)
        if found is not None and found[1] > time.monotonic():
            return found[0]
        replica = broker_name
        if REPLICA_SEPARATOR not in broker_name:  # a slave's own name is its replica
            req = ReadReplicaRequest(broker_name=broker_name)
            replica = self.coordinator().read_replica(req).result(LOOKUP_TIMEOUT_S).replica
        recheck = SLAVE_READ_RECHECK_S if replica != broker_name else float("inf")
        self._replicas[broker_name] = (replica, time.monotonic() + recheck)
        return replica

    def endpoint(self, service: str, replica: str) -> DataEndpoint:
        conn = self.bootstrap()
        req = EndpointRequest(replica=replica, service=service)  # type: ignore[arg-type]
        future = conn.call("endpoint", to_wire(req), own=True)
        reply: SocketReply[DataEndpoint] = SocketReply(conn, future, DataEndpoint)
        return reply.result(LOOKUP_TIMEOUT_S)

    def forget(self, broker_name: str) -> None:
        self._replicas.pop(broker_name, None)

    def close(self) -> None:
        super().close()
        with self._conn_lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


__all__ = ["OPEN_TIMEOUT_S", "RemoteTransport"]
