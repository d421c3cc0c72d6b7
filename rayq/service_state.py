"""A client's life cycle (RocketMQ ``ServiceState``).

CREATE_JUST --start()--> RUNNING --shutdown()--> SHUTDOWN_ALREADY; a ``start()`` that
raises leaves START_FAILED. ``start()`` is allowed once, from CREATE_JUST only: a second
one raises ``ClientError`` (RocketMQ: "the service state not OK, maybe started once").
``shutdown()`` may be called in any state, and again.
"""

from __future__ import annotations

import enum


class ServiceState(enum.Enum):
    CREATE_JUST = "CREATE_JUST"
    RUNNING = "RUNNING"
    SHUTDOWN_ALREADY = "SHUTDOWN_ALREADY"
    START_FAILED = "START_FAILED"


__all__ = ["ServiceState"]
