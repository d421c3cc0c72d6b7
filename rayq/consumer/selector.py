"""Subscription selectors (RocketMQ ``MessageSelector``): by tag or by SQL92 over properties.

``consumer.subscribe(topic, "TagA || TagB")`` is the same as
``consumer.subscribe(topic, MessageSelector.by_tag("TagA || TagB"))``;
``MessageSelector.by_sql("a > 5 AND b IN ('x', 'y')")`` filters on the broker by the
message's properties (store/sql92.py; the broker needs
``BrokerConfig.enable_property_filter``).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from rayq.actors.protocol.wire import FilterType
from rayq.store.errors import InvalidFilterError, InvalidMessageError
from rayq.store.filters import TagFilter
from rayq.store.sql92 import SqlFilter, compile_sql

TAG: Final = "TAG"
SQL92: Final = "SQL92"


class MessageSelector(msgspec.Struct, frozen=True):
    """What a subscription selects: ``type`` TAG or SQL92, and its ``expression``."""

    type: str
    expression: str

    @classmethod
    def by_tag(cls, expression: str = "*") -> MessageSelector:
        TagFilter.parse(expression)  # InvalidMessageError now, not at the first pull
        return cls(TAG, expression)

    @classmethod
    def by_sql(cls, expression: str) -> MessageSelector:
        compile_sql(expression)  # InvalidFilterError naming the position, now
        return cls(SQL92, expression)


def to_filter(selector: object) -> TagFilter | SqlFilter:
    """The filter a subscription applies: a tag expression (str) or a MessageSelector."""
    if isinstance(selector, MessageSelector):
        if selector.type == SQL92:
            return compile_sql(selector.expression)
        if selector.type != TAG:
            raise InvalidFilterError(f"selector type must be TAG or SQL92, got {selector.type!r}")
        return TagFilter.parse(selector.expression)
    if not isinstance(selector, str):
        raise InvalidMessageError(
            f"expression must be a str such as '*' or 'TagA || TagB', or a "
            f"rayq.MessageSelector, got {type(selector).__name__} {selector!r}",
            value=repr(selector),
        )
    return TagFilter.parse(selector)


def filter_type(f: TagFilter | SqlFilter) -> FilterType:
    return SQL92 if isinstance(f, SqlFilter) else TAG


def check_sql_brokers(ctx: Any, topic: str, f: TagFilter | SqlFilter) -> None:
    """An SQL92 subscription needs every broker of ``topic`` to evaluate it: a clear error
    at subscribe, naming the brokers that do not (``enable_property_filter``)."""
    if not isinstance(f, SqlFilter):
        return
    route = ctx.route(topic)
    off = sorted({q.broker_name for q in route.queues if not q.property_filter}) if route else []
    if off:
        raise InvalidFilterError(
            f"cannot subscribe to {topic!r} with SQL92 filter {f.expression!r}: broker(s) "
            f"{off} do not evaluate SQL92 filters (BrokerConfig.enable_property_filter is "
            "off); turn it on, or subscribe by tag",
            topic=topic,
            brokers=off,
        )


__all__ = ["MessageSelector", "check_sql_brokers", "filter_type", "to_filter"]
