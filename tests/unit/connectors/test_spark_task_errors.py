"""rayq.connectors.spark.raised_in_task: a rayq error raised in a Spark task is raised again, as
itself, from the job's error text (which is all Spark carries back)."""

from __future__ import annotations

import rayq
from rayq.connectors.spark import raised_in_task

JOB_ERROR = """An exception was thrown from the Python worker. Please see the stack trace below.
Traceback (most recent call last):
  File "rayq/transport/ray_actors.py", line 82, in result
    raise unwrap(exc) from None
rayq.store.errors.PermissionDeniedError: put: ACL is on and the request carries no credentials

\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException
"""


def test_a_rayq_error_from_a_task_is_rebuilt_with_its_class_and_message() -> None:
    err = raised_in_task(Exception(JOB_ERROR))
    assert isinstance(err, rayq.PermissionDeniedError)
    assert str(err).startswith("put: ACL is on and the request carries no credentials")


def test_other_task_errors_are_left_alone() -> None:
    assert raised_in_task(Exception("ValueError: bad row")) is None
    assert raised_in_task(Exception("rayq.store.errors.NoSuchError: x")) is None
