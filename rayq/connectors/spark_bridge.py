"""The driver's bridge from rayq's JVM source and sink to rayq's Python client.

Spark's Structured Streaming engine runs in the driver's JVM and calls rayq's source
and sink there (connectors/jvm: ``RayqMicroBatch``, ``RayqStreamingWrite``). What they
need from a deployment (topics, queue bounds, offsets, write targets, ACL) is rayq's
Python client's work, so they ask it through py4j's callback server, as PySpark's
``foreachBatch`` calls Python: ``install(spark)`` (``rayq.spark.session`` calls it)
registers a ``Bridge`` with ``io.rayq.spark.Planners``, and the JVM calls
``Bridge.call(method, options JSON, arguments JSON)``.

A call answers JSON: ``{"ok": <result>}``, or ``{"error": "<class>", "message": ...}``
for a ``RayqError``, which the JVM raises as ``rayq.errors.<class>: <message>`` (so a
bad option fails ``load()`` or ``start()`` with rayq's message). Planners are kept per
option set: a query's calls reuse one client context.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any, ClassVar

from rayq.connectors.stream_source import (
    SourcePlanner,
    dump_offsets,
    load_offsets,
    parse_options,
)
from rayq.store.errors import RayqError

logger = logging.getLogger(__name__)

Handler = Callable[["Bridge", dict[str, str], dict[str, Any]], Any]
_handlers: dict[str, Handler] = {}
_installed: set[int] = set()


def handler(name: str) -> Callable[[Handler], Handler]:
    """Register ``fn(bridge, options, args)`` as the answer to the JVM's calls of ``name``."""

    def register(fn: Handler) -> Handler:
        _handlers[name] = fn
        return fn

    return register


class Bridge:
    """The Python object behind the JVM interface ``io.rayq.spark.Planner``."""

    def __init__(self) -> None:
        self._sources: dict[str, SourcePlanner] = {}
        self._lock = threading.Lock()

    def source(self, options: dict[str, str]) -> SourcePlanner:
        key = json.dumps(options, sort_keys=True)
        with self._lock:
            planner = self._sources.get(key)
            if planner is None:
                planner = SourcePlanner(parse_options(options))
                self._sources[key] = planner
            return planner

    def call(self, method: str, options: str, args: str) -> str:
        try:
            fn = _handlers[method]
            result = fn(self, json.loads(options), json.loads(args))
            return json.dumps({"ok": result})
        except RayqError as exc:
            return json.dumps({"error": type(exc).__name__, "message": str(exc)})
        except Exception as exc:  # a bug: the JVM shows it whole, with its class
            logger.exception("rayq's Spark bridge: %s failed", method)
            return json.dumps({"error": type(exc).__name__, "message": repr(exc)})

    class Java:
        implements: ClassVar[list[str]] = ["io.rayq.spark.Planner"]


@handler("source.check")
def _check(bridge: Bridge, options: dict[str, str], args: dict[str, Any]) -> list[str]:
    return bridge.source(options).check()


@handler("source.initial")
def _initial(bridge: Bridge, options: dict[str, str], args: dict[str, Any]) -> str:
    return dump_offsets(bridge.source(options).initial())


@handler("source.validate")
def _validate(bridge: Bridge, options: dict[str, str], args: dict[str, Any]) -> str:
    offsets = load_offsets(args["offsets"])
    bridge.source(options).validate(offsets)
    return dump_offsets(offsets)


@handler("source.latest")
def _latest(bridge: Bridge, options: dict[str, str], args: dict[str, Any]) -> str:
    start = load_offsets(args["start"])
    return dump_offsets(bridge.source(options).latest(start, int(args.get("max_rows", 0))))


@handler("source.plan")
def _plan(bridge: Bridge, options: dict[str, str], args: dict[str, Any]) -> dict[str, Any]:
    planner = bridge.source(options)
    start = load_offsets(args["start"]) if args.get("start") else {}
    return planner.plan(start, load_offsets(args["end"]))


@handler("source.batch")
def _batch(bridge: Bridge, options: dict[str, str], args: dict[str, Any]) -> dict[str, Any]:
    return bridge.source(options).batch()


@handler("source.namespace")
def _namespace(bridge: Bridge, options: dict[str, str], args: dict[str, Any]) -> str:
    return bridge.source(options).ctx.namespace


@handler("source.commit")
def _commit(bridge: Bridge, options: dict[str, str], args: dict[str, Any]) -> None:
    bridge.source(options).commit(load_offsets(args["end"]))


def install(spark: Any) -> None:
    """Register a ``Bridge`` with ``spark``'s JVM (once per session): rayq's streaming
    source and sink answer through it. Starts py4j's callback server if it is not."""
    if id(spark) in _installed:
        return
    from pyspark.java_gateway import ensure_callback_server_started

    gateway = spark.sparkContext._gateway
    ensure_callback_server_started(gateway)
    bridge = Bridge()
    spark._jvm.io.rayq.spark.Planners.register(bridge)
    _installed.add(id(spark))


def forget(spark: Any) -> None:
    _installed.discard(id(spark))


__all__ = ["Bridge", "handler", "install"]

from rayq.connectors import stream_sink  # noqa: E402, F401  (its "sink.*" handlers: after handler)
