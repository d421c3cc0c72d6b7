"""The registry of operations is the one list: the transport's typed clients mirror
its client operations (names, request and reply types) and the ACL's admin
operations derive from it."""

from __future__ import annotations

import typing

import pytest

from rayq.actors.protocol import registry
from rayq.actors.protocol.registry import Access, Caller
from rayq.actors.server import acl
from rayq.transport.base import BrokerClient, CoordinatorClient, HoldClient


@pytest.mark.parametrize(
    ("service", "client"),
    [("broker", BrokerClient), ("hold", HoldClient), ("coordinator", CoordinatorClient)],
)
def test_each_typed_client_mirrors_the_registry(service: str, client: type) -> None:
    ops = registry.operations(service, Caller.CLIENT)
    assert client.request_types() == {n: op.request for n, op in ops.items()}
    assert client.reply_types() == {n: op.reply for n, op in ops.items()}


def test_operation_keys_are_unique() -> None:
    keys = [op.key for op in registry.OPERATIONS]
    assert len(keys) == len(set(keys))


def test_acl_admin_methods_are_the_registry_admin_operations() -> None:
    admin = {op.name for op in registry.OPERATIONS if op.access is Access.ADMIN}
    assert admin == acl.ADMIN_METHODS
    assert "create_topic" in admin and "put" not in admin


def test_jvm_operations_answer_bytes() -> None:
    for op in registry.OPERATIONS:
        if op.caller is Caller.JVM:
            assert op.reply is bytes, op.key
            assert typing.get_origin(op.request) is None, op.key


def test_read_requests_name_exactly_the_columns_of_a_page() -> None:
    """``ColumnName`` (what a read may ask for) and the page schema list one set of
    columns, in one order: a column added to one must be added to the other."""
    from rayq.actors.protocol.arrow import SCHEMA
    from rayq.actors.protocol.broker import ColumnName

    assert list(typing.get_args(ColumnName)) == SCHEMA.names
