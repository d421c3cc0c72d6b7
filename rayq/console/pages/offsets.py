"""Offset reset of a group on a topic (``Admin.reset_offsets``), in two steps.

1. The form (to earliest, latest, an offset, a shift or a time; every queue, one
   broker's or one queue) posts a dry run: the page shows each queue's committed
   offset and target, and keeps the plan in the session under a random id.
2. Confirming that plan id runs the reset, only if the group's committed offsets are
   still those the plan showed (else the page shows the new plan to confirm, HTTP
   409); ``Admin.reset_offsets`` then changes each broker compare-and-set.

A shift that would move a queue past its bounds is refused (``forms.check_shift``)
rather than clamped, so what is confirmed is what was asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from rayq.admin.offset_reset import RESET_TO, OffsetChange
from rayq.console.forms import check_shift, integer, optional_text, reset_value, text
from rayq.console.pages.topics import SYSTEM_PREFIXES
from rayq.console.web import form_of, render, session_of, show, status_of
from rayq.store.errors import InvalidRequestError, RayqError


@dataclass(frozen=True)
class ResetRequest:
    """What the form asked for (``Admin.reset_offsets``'s arguments)."""

    group: str
    topic: str
    to: str
    value: int | None
    broker: str | None
    queue_id: int | None

    def plan(self, admin: Any, *, execute: bool = False) -> list[OffsetChange]:
        changes: list[OffsetChange] = admin.reset_offsets(
            self.group,
            self.topic,
            self.to,
            self.value,
            broker=self.broker,
            queue_id=self.queue_id,
            execute=execute,
        )
        return changes


@dataclass(frozen=True)
class PendingReset:
    request: ResetRequest
    plan: list[OffsetChange]


async def reset_form(request: Request) -> Response:
    group = request.path_params["group"]
    admin = session_of(request).admin
    return await show(
        request, "reset.html", _choices, admin, group, nav="groups", group=group, form={}
    )


async def dry_run(request: Request) -> Response:
    group = request.path_params["group"]
    session = session_of(request)
    form: Mapping[str, str] = {}
    try:
        form = await form_of(request)
        asked = parse(group, form)
        plan = await run_in_threadpool(_dry_run, session.admin, asked)
    except RayqError as exc:
        return await _form_again(request, group, form, exc)
    plan_id = session.keep(PendingReset(asked, plan))
    return render(
        request,
        "reset.html",
        nav="groups",
        group=group,
        form=form,
        asked=asked,
        plan=plan,
        plan_id=plan_id,
        stage="plan",
    )


async def confirm(request: Request) -> Response:
    group = request.path_params["group"]
    session = session_of(request)
    try:
        form = await form_of(request)
        pending: PendingReset = session.take(text(form, "plan_id", "the plan id"))
        if pending.request.group != group:
            raise InvalidRequestError(
                f"that plan is for group {pending.request.group!r}, not {group!r}"
            )
        fresh = await run_in_threadpool(_dry_run, session.admin, pending.request)
        if _currents(fresh) != _currents(pending.plan):
            plan_id = session.keep(PendingReset(pending.request, fresh))
            return render(
                request,
                "reset.html",
                409,
                nav="groups",
                group=group,
                asked=pending.request,
                plan=fresh,
                plan_id=plan_id,
                stage="plan",
                form={},
                error="the group's committed offsets changed since the plan was shown (a "
                "consumer of the group is running?): nothing was reset; here is the new plan",
            )
        done = await run_in_threadpool(pending.request.plan, session.admin, execute=True)
    except RayqError as exc:
        return await _form_again(request, group, {}, exc)
    return render(
        request,
        "reset.html",
        nav="groups",
        group=group,
        asked=pending.request,
        plan=done,
        stage="done",
        form={},
    )


def parse(group: str, form: Mapping[str, str]) -> ResetRequest:
    """The reset the form asks for; a RayqError naming the bad field else."""
    to = form.get("to", "")
    queue_raw = form.get("queue_id", "").strip()
    return ResetRequest(
        group=group,
        topic=text(form, "topic", "the topic"),
        to=to,
        value=reset_value(to, form.get("value", "")),
        broker=optional_text(form, "broker"),
        queue_id=integer(form, "queue_id", "the queue id", hi=2**31 - 1) if queue_raw else None,
    )


def _dry_run(admin: Any, asked: ResetRequest) -> list[OffsetChange]:
    plan = asked.plan(admin)
    if asked.to == "shift" and asked.value is not None:
        bounds = {s.queue: (s.min_offset, s.max_offset) for s in admin.topic_stats(asked.topic)}
        check_shift(plan, asked.value, bounds)
    return plan


def _currents(plan: list[OffsetChange]) -> list[tuple[Any, int]]:
    return [(c.queue, c.current) for c in plan]


def _choices(admin: Any, group: str) -> dict[str, Any]:
    """The form's topic suggestions: the group's topics first, then the others (none
    when this login may not list them: the form works without)."""
    try:
        own = sorted({p.queue.topic for p in admin.consumer_progress(group)})
        others = [t for t in sorted(admin.topics()) if not t.startswith(SYSTEM_PREFIXES)]
    except RayqError:
        own, others = [], []
    return {"topics": own + [t for t in others if t not in own], "reset_to": RESET_TO}


async def _form_again(
    request: Request, group: str, form: Mapping[str, str], exc: RayqError
) -> Response:
    """The form again, filled as it was sent, with why it was refused."""
    admin = session_of(request).admin
    return await show(
        request,
        "reset.html",
        _choices,
        admin,
        group,
        status=status_of(exc),
        nav="groups",
        group=group,
        form=form,
        error=str(exc),
    )


ROUTES = [
    Route("/groups/{group}/reset", reset_form, methods=["GET"]),
    Route("/groups/{group}/reset", dry_run, methods=["POST"]),
    Route("/groups/{group}/reset/confirm", confirm, methods=["POST"]),
]
