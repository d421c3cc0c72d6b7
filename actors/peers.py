"""Finding a peer actor by name: on first need, and again after a failed call.

Server actors never depend on being handed each other's handles: each looks its
peers up by name in its namespace (``protocol.broker_actor_name`` and friends), so an
actor that Ray restarted (``__init__`` re-run, every attribute gone) finds them
again by itself, and one that was replaced by a new actor of the same name is
found anew once a call to the old handle failed.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import ray

logger = logging.getLogger(__name__)

# What a call to an actor that died, is being restarted or lost its node raises (ActorDiedError is
# a RayActorError).
PEER_LOST_ERRORS: tuple[type[BaseException], ...] = (
    ray.exceptions.RayActorError,
    ray.exceptions.ActorUnavailableError,
    ray.exceptions.ActorUnschedulableError,  # pinned to a node that is gone
)
LOOKUP_RETRY_S = 0.5  # a missing peer is looked up again at most this often


class Peer:
    """The handle of the actor named ``name`` in ``namespace``, looked up lazily."""

    def __init__(self, name: str, namespace: str) -> None:
        self.name = name
        self.namespace = namespace
        self._handle: Any = None
        self._next_lookup = 0.0
        self._warned = False

    def get(self) -> Any:
        """The handle, or None while no actor of that name exists (looked up again at
        most every ``LOOKUP_RETRY_S``)."""
        if self._handle is None and time.monotonic() >= self._next_lookup:
            try:
                self._handle = ray.get_actor(self.name, namespace=self.namespace)
                self._warned = False
            except ValueError:
                self._next_lookup = time.monotonic() + LOOKUP_RETRY_S
                if not self._warned:
                    logger.warning(
                        "actor %s not found in namespace %s (yet); looking again",
                        self.name,
                        self.namespace,
                    )
                    self._warned = True
        return self._handle

    def forget(self) -> None:
        """A call failed: look the actor up again next time."""
        self._handle = None
        self._next_lookup = 0.0

    def set(self, handle: Any) -> None:
        """A handle someone passed in (saves the lookup)."""
        self._handle = handle
