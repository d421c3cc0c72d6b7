"""The push consumer: the user's listener runs in a Consumer actor; the coordinator
decides which queues it owns.

    consumer = rayq.PushConsumer("cg", consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("orders", "TagA || TagB")
    consumer.register_listener(lambda msgs: rayq.ConsumeStatus.CONSUME_SUCCESS)
    consumer.start()          # a Consumer actor joins the group and starts consuming
    ...
    consumer.shutdown()       # finishes in-flight work, commits, leaves the group

The listener is any picklable callable (it runs in the actor's thread pool and may
call other Ray actors). See ``rayq.consumer.service`` for how messages flow and
``rayq.actors.server.rebalance`` for how queues move between the group's consumers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import ray
from ray import cloudpickle

from rayq.actors.protocol import ConsumeFromWhere, MessageModel, MessageQueue, consumer_actor_name
from rayq.actors.protocol.config import ClientConfig
from rayq.actors.protocol.enums import AllocateStrategy
from rayq.consumer.listener import ConsumeOrderlyStatus, ConsumeStatus
from rayq.consumer.offset_store import offsets_path
from rayq.consumer.selector import MessageSelector, check_sql_brokers, to_filter
from rayq.consumer.service import ConsumeService
from rayq.consumer.start_offsets import check_start_options
from rayq.store.errors import ClientError, ClosedError, ConfigError, RayqError
from rayq.store.names import validate_group, validate_topic
from rayq.transport.context import ClientContext
from rayq.transport.ray_actors import RayReply, spawn_consumer
from rayq.transport.remote import RemoteTransport

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0
SHUTDOWN_TIMEOUT_S = 60.0
MAX_RECONSUME_TIMES_MAX = 1024


class _DefaultReconsumeTimes(int):
    """The default of ``max_reconsume_times``: 16 as the API says, with RocketMQ's meaning
    of its default (-1): 16 for a concurrent listener, or the group's ``retry_max_times``
    when that is set; without limit for an orderly one. Told apart from an explicit 16."""

    def __repr__(self) -> str:
        return "16"


DEFAULT_RECONSUME_TIMES = _DefaultReconsumeTimes(16)


class PushConsumer:
    """A consumer whose listener is called with messages as they arrive."""

    def __init__(
        self,
        group: str,
        *,
        model: MessageModel = MessageModel.CLUSTERING,
        consume_from: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET,
        consume_timestamp_ms: int | None = None,
        allocate_strategy: AllocateStrategy = AllocateStrategy.AVERAGELY,
        max_reconsume_times: int = DEFAULT_RECONSUME_TIMES,
        config: ClientConfig | None = None,
        namespace: str | None = None,
        allocate_queues: list[MessageQueue] | None = None,
    ) -> None:
        validate_group(group)
        _check(isinstance(model, MessageModel), f"model must be a MessageModel, got {model!r}")
        start_ms = check_start_options(consume_from, consume_timestamp_ms, config, namespace)
        _check(
            isinstance(allocate_strategy, AllocateStrategy),
            f"allocate_strategy must be an AllocateStrategy, got {allocate_strategy!r}",
        )
        if max_reconsume_times is DEFAULT_RECONSUME_TIMES:
            max_reconsume_times = -1  # RocketMQ's default (see _DefaultReconsumeTimes)
        _check(
            max_reconsume_times.__class__ is int
            and -1 <= max_reconsume_times <= MAX_RECONSUME_TIMES_MAX,
            f"max_reconsume_times must be an int in 0..{MAX_RECONSUME_TIMES_MAX}, or -1 "
            f"for RocketMQ's default, got {max_reconsume_times!r}",
        )
        queues = list(allocate_queues or [])
        _check(
            all(isinstance(q, MessageQueue) for q in queues),
            "allocate_queues must be a list of rayq MessageQueue",
        )
        _check(
            (allocate_strategy is AllocateStrategy.CONFIG) == bool(queues),
            "allocate_queues goes with allocate_strategy=AllocateStrategy.CONFIG, and only with it",
        )
        self.group = group
        self.model = model
        self._consume_from = consume_from
        self._consume_timestamp_ms = start_ms
        self._strategy = allocate_strategy
        self._allocation = queues
        self._max_reconsume_times = max_reconsume_times
        if model is MessageModel.BROADCASTING:  # its offsets file: ConfigError now, not at start
            cfg = config or ClientConfig()
            offsets_path(cfg.offset_store_dir, cfg.instance_name, group)
        self._ctx = ClientContext(config, namespace)
        if isinstance(self._ctx.transport, RemoteTransport):
            raise ConfigError(
                "a PushConsumer runs its consumer as a Ray actor, and this process is "
                "connected from outside Ray (rayq.connect('rayq://...')): use a PullConsumer "
                "or a SimpleConsumer here, or a PushConsumer in a Ray driver"
            )
        self.client_id = self._ctx.client_id
        self._subscriptions: dict[str, str | MessageSelector] = {}
        self._listener: Callable[..., Any] | None = None
        self._orderly = False
        self._auto_commit = True
        self._actor: Any = None
        self._closed = False
        self._final_stats: dict[str, Any] | None = None

    # ------------------------------------------------------------ set up
    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` ("*", "A || B"), or
        that a ``rayq.MessageSelector`` selects (``by_sql``: by properties, on the broker)."""
        self._check_setup()
        validate_topic(topic)
        selected = to_filter(expression)
        if isinstance(expression, MessageSelector):
            check_sql_brokers(self._ctx, topic, selected)
        self._subscriptions[topic] = expression

    def unsubscribe(self, topic: str) -> None:
        self._check_setup()
        self._subscriptions.pop(topic, None)

    def register_listener(
        self, fn: Callable[..., Any], orderly: bool = False, *, auto_commit: bool = True
    ) -> None:
        """``fn(list[MessageExt]) -> ConsumeStatus`` (or ``-> ConsumeOrderlyStatus`` with
        ``orderly=True``); it must be picklable: it runs in the Consumer actor. An orderly
        listener with ``auto_commit=False`` commits by returning COMMIT (SUCCESS only
        acknowledges a batch) and consumes everything since its last commit again by
        returning ROLLBACK."""
        self._check_setup()
        _check(callable(fn), f"the listener must be callable, got {type(fn).__name__}")
        _check(isinstance(orderly, bool), f"orderly must be a bool, got {orderly!r}")
        _check(isinstance(auto_commit, bool), f"auto_commit must be a bool, got {auto_commit!r}")
        _check(
            orderly or auto_commit,
            "auto_commit=False is for orderly listeners (orderly=True): a concurrent "
            "listener's messages are committed as they are consumed",
        )
        try:
            cloudpickle.dumps(fn)
        except Exception as exc:
            raise ConfigError(
                f"the listener cannot be pickled to the Consumer actor: {exc}; "
                "use a module-level function or a picklable callable"
            ) from None
        self._listener = fn
        self._orderly = orderly
        self._auto_commit = auto_commit

    def start(self) -> None:
        """Start the Consumer actor; returns once it joined and got its first queues."""
        self._check_setup()
        if not self._subscriptions:
            raise ClientError("subscribe to at least one topic before start()")
        if self._listener is None:
            raise ClientError("register a listener before start()")
        factory = partial(
            ConsumeService,
            group=self.group,
            client_id=self.client_id,
            subscriptions=dict(self._subscriptions),
            listener=self._listener,
            orderly=self._orderly,
            auto_commit=self._auto_commit,
            model=self.model,
            consume_from=self._consume_from,
            consume_timestamp_ms=self._consume_timestamp_ms,
            max_reconsume_times=self._max_reconsume_times,
            strategy=self._strategy,
            allocation=self._allocation,
            config=self._ctx.config,
            namespace=self._ctx.namespace,
        )
        actor = spawn_consumer(factory, self._ctx.namespace, consumer_actor_name(self.client_id))
        try:
            RayReply(actor.start.remote()).result(START_TIMEOUT_S)
        except RayqError:
            ray.kill(actor)
            raise
        self._actor = actor

    # ----------------------------------------------------------- running
    @property
    def actor(self) -> Any:
        """The Consumer actor's handle (None before ``start``)."""
        return self._actor

    def assignment(self) -> list[MessageQueue]:
        """The queues this consumer owns now."""
        return self.stats()["queues"] if self._actor is not None else []

    def stats(self) -> dict[str, Any]:
        """``client_id``, ``consumed``, ``queues``, ``generation``, ownership ``history``
        (queue, from, to) and ``owned_since`` (queue: from), in ``time.monotonic()``; after
        ``shutdown``, the last ones."""
        if self._final_stats is not None:
            return self._final_stats
        self._check_open()
        if self._actor is None:
            raise ClientError("the consumer is not started")
        return RayReply(self._actor.stats.remote()).result(START_TIMEOUT_S)

    def shutdown(self) -> None:
        """Finish in-flight work, commit offsets, leave the group (the others take its queues
        at once), stop the actor. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._actor is not None:
            try:
                self._final_stats = RayReply(self._actor.shutdown.remote()).result(
                    SHUTDOWN_TIMEOUT_S
                )
            except RayqError as exc:
                logger.warning("consumer %s: shutdown failed: %s", self.client_id, exc)
            ray.kill(self._actor)
            self._actor = None

    def __enter__(self) -> PushConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # ------------------------------------------------------------ helpers
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"the push consumer of group {self.group!r} is shut down")

    def _check_setup(self) -> None:
        self._check_open()
        if self._actor is not None:
            raise ClientError("the consumer is started; subscribe and register before start()")


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


__all__ = [
    "AllocateStrategy",
    "ConsumeOrderlyStatus",
    "ConsumeStatus",
    "MessageModel",
    "PushConsumer",
]
