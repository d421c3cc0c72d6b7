"""The thread behind ``send_async``/``send_oneway``: the accumulator's batches to the sender.

It takes ready batches from the accumulator (produce_accumulator.py), keeps up to
``MAX_INFLIGHT_PUTS`` of them in flight through ``Sender.launch``, resolves each
message's Future from the answer, and after a failure asks ``Sender.after_failure``
(the one retry policy) whether the batch goes again: then it is given back to the
accumulator (``reenqueue``, re-targeted), else its Futures get the error. A put not
answered within ``send_timeout_ms`` counts as failed.

Callers append under the accumulator's lock; Ray's completion callbacks append to
``_done``; the thread (``_run``) takes both under that lock and does the rest
outside it: launch puts, resolve futures, give failed puts back.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Final

from rayq.actors.protocol import MessageQueue
from rayq.producer.accumulator import Accumulator, Put
from rayq.producer.sender import Sender, results
from rayq.store import InnerMessage
from rayq.store.errors import BrokerUnavailableError

logger = logging.getLogger(__name__)

MAX_INFLIGHT_PUTS: Final[int] = 4  # puts outstanding at once


class AsyncSends:
    """Runs the accumulator's batches through ``sender`` on one background thread."""

    def __init__(self, name: str, sender: Sender, accumulator: Accumulator) -> None:
        self.name, self.sender, self.acc = name, sender, accumulator
        self._inflight: set[Put] = set()  # under acc.lock
        self._done: list[Put] = []  # answered, not handled yet (under acc.lock)
        self._thread: threading.Thread | None = None

    def submit(self, msg: InnerMessage, queue: MessageQueue) -> Future:
        """Queue one message for ``queue`` (``send_async``); starts the thread once."""
        acc = self.acc
        if self._thread is None:
            with acc.lock:
                if self._thread is None and not acc.closing:
                    self._thread = threading.Thread(
                        target=self._run, daemon=True, name=f"rayq-producer-{self.name}"
                    )
                    self._thread.start()
        return acc.append(msg, queue)

    def close(self, timeout_s: float) -> None:
        """Send what is pending, wait for the answers, stop the thread."""
        self.acc.close()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
            if thread.is_alive():
                logger.warning(
                    "producer %s: pending sends still running after %.0f s", self.name, timeout_s
                )

    def _run(self) -> None:
        acc = self.acc
        while True:
            with acc.lock:
                work = self._collect(acc)
                while work is None:
                    if acc.closing and acc.idle() and not self._inflight:
                        return
                    acc.wake.wait(self._wait_s(acc))
                    work = self._collect(acc)
            done, expired, ready = work
            for put in done:
                self._guard(put, self._complete)
            for put in expired:
                self._guard(put, self._expired)
            for put in ready:
                self._guard(put, self._launch)

    def _collect(self, acc: Accumulator) -> tuple[list[Put], list[Put], list[Put]] | None:
        """(answered puts, timed-out puts, puts to launch now), or None; lock held."""
        now = time.monotonic()
        done, self._done = self._done, []
        self._inflight.difference_update(done)
        expired = [p for p in self._inflight if p.deadline <= now]
        self._inflight.difference_update(expired)
        ready = acc.drain(now, MAX_INFLIGHT_PUTS - len(self._inflight))
        self._inflight.update(ready)
        return (done, expired, ready) if done or expired or ready else None

    def _wait_s(self, acc: Accumulator) -> float | None:
        times = [p.deadline for p in self._inflight]
        if len(self._inflight) < MAX_INFLIGHT_PUTS and (ready := acc.next_ready_s()) is not None:
            times.append(ready)
        return max(0.0, min(times) - time.monotonic()) if times else None

    def _guard(self, put: Put, step: Callable[[Put], None]) -> None:
        try:
            step(put)
        except Exception as exc:  # one bad batch must not stop the thread
            logger.exception("producer %s: a batch for %s failed", self.name, put.queue)
            self._fail(put, exc)

    def _launch(self, put: Put) -> None:
        self.sender.launch(put)
        put.call.add_done_callback(functools.partial(self._on_done, put, put.call))

    def _on_done(self, put: Put, put_call: Any) -> None:
        """Runs in a Ray thread: hand the answer over to the sender thread."""
        acc = self.acc
        with acc.lock:
            if put.call is put_call and put in self._inflight:
                self._done.append(put)
                acc.wake.notify()

    def _complete(self, put: Put) -> None:
        try:
            res = put.call.result(0)
        except Exception as exc:
            self._failed(put, exc)
            return
        self.sender.succeeded(put, res)
        for fut, result in zip(put.futures, results(put.queue, res), strict=True):
            if fut.set_running_or_notify_cancel():
                fut.set_result(result)

    def _expired(self, put: Put) -> None:
        self._failed(
            put,
            BrokerUnavailableError(
                f"broker {put.queue.broker_name} did not answer within "
                f"send_timeout_ms={round(self.sender.policy.timeout_s * 1000)}"
            ),
        )

    def _failed(self, put: Put, exc: BaseException) -> None:
        final = self.sender.after_failure(put, exc)
        if final is not None:
            self._fail(put, final)
            return
        acc = self.acc
        with acc.lock:
            put.call = None
            self._inflight.discard(put)
            acc.reenqueue(put)

    def _fail(self, put: Put, err: BaseException) -> None:
        acc = self.acc
        with acc.lock:
            self._inflight.discard(put)
        for fut in put.futures:
            if not fut.done() and fut.set_running_or_notify_cancel():
                fut.set_exception(err)
