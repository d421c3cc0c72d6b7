"""Message trace (RocketMQ's msgTrace): opt-in records of each send, store and consume
of a message, written to a trace topic, read back by ``Admin.trace(msg_id)``.

Modules: ``records`` (the trace records, their JSON encoding, the timeline of one
message), ``dispatcher`` (the process's background writer: a bounded buffer, batched
``send_batch`` calls, the trace topic created when missing), ``tracer`` (what a traced
producer or consumer calls), ``lookup`` (``Admin.trace``'s query).
"""

from rayq.trace.records import TraceEvent

__all__ = ["TraceEvent"]
