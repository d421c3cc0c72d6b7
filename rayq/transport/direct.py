"""``DirectTransport``: broker calls over the brokers' socket data plane (see
actors/protocol/frames.py and rayq/transport/sockets.py), control over Ray.

A broker's endpoint (addresses and key) comes from one Ray call, ``data_endpoint``, to
the replica ``RayTransport`` resolves (the master, or the slave serving reads while the
master is lost). The connection is a Unix socket when the client is on the broker's
node, else TCP. A connection that fails fails its calls with
``BrokerUnavailableError`` naming the address and the reason, and the next call asks
Ray for the endpoint again, so a restarted broker is found anew; after ``forget``
(which the clients call on that error) Ray is also asked again which replica serves
the broker, so a failed-over one is too. Pulls that wait (long polling) go to the
hold service's socket the same way; the coordinator is reached through Ray, as
``RayTransport`` does.
"""

from __future__ import annotations

import logging

from rayq.actors.protocol import DataEndpoint, DataEndpointRequest
from rayq.transport.base import CoordinatorClient
from rayq.transport.ray_actors import RayTransport
from rayq.transport.sockets import Connection, SocketReply, SocketTransport, socket_client

logger = logging.getLogger(__name__)

ENDPOINT_TIMEOUT_S = 10.0


class DirectTransport(SocketTransport):
    """Broker calls and parked pulls over the data plane; the coordinator over Ray."""

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self._ray = RayTransport(namespace)
        self.namespace = namespace
        self.local_node = _local_node()

    def replica_of(self, broker_name: str) -> str:
        return self._ray.replica_of(broker_name)

    def endpoint(self, service: str, replica: str) -> DataEndpoint:
        """Asked of the replica's actor through Ray."""
        req = DataEndpointRequest()
        if service == "broker":
            asked = self._ray.broker_replica(replica).data_endpoint(req)
        else:
            asked = self._ray.hold_replica(replica).data_endpoint(req)
        return asked.result(ENDPOINT_TIMEOUT_S)

    def coordinator(self) -> CoordinatorClient:
        return self._ray.coordinator()

    def forget(self, broker_name: str) -> None:
        self._ray.forget(broker_name)


def _local_node() -> str:
    try:
        import ray

        return str(ray.get_runtime_context().get_node_id())
    except Exception:  # not in a Ray worker or driver: TCP only
        return ""


__all__ = ["Connection", "DirectTransport", "SocketReply", "socket_client"]
