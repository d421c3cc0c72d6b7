"""``data_endpoint`` may run on another event loop than the actor's ``__init__``, which
started the listening: asked while the listening is still starting (right after a
restart), it waits for it instead of failing ("attached to a different loop")."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from rayq.actors.data_plane import SERVER_OPS, client_operations, data_plane
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.protocol.frames import DataEndpointRequest


class Target:
    """Every operation the broker's data plane serves, answering nothing."""

    def __getattr__(self, name: str) -> Any:
        async def serve(*args: Any, **kwargs: Any) -> bytes:
            return b""

        return serve


def test_the_endpoint_is_answered_from_another_loop_while_listening_starts() -> None:
    assert client_operations("broker") and SERVER_OPS["broker"]
    plane = data_plane(Target(), BrokerConfig(), "node", "127.0.0.1")
    actor_loop = asyncio.new_event_loop()

    async def init() -> None:
        plane.start()  # as __init__ does: the listening task is pending on actor_loop

    actor_loop.run_until_complete(init())
    thread = threading.Thread(target=actor_loop.run_forever, daemon=True)
    thread.start()
    try:
        endpoint = asyncio.run(plane.answer(DataEndpointRequest()))  # another loop
        assert endpoint.port > 0 and endpoint.host == "127.0.0.1"
    finally:
        asyncio.run_coroutine_threadsafe(plane.server.close(), actor_loop).result(10)
        actor_loop.call_soon_threadsafe(actor_loop.stop)
        thread.join(10)
        actor_loop.close()
