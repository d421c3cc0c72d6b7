"""The console's logins: the deployment key check and the server-side session table.

A browser gets a random session id (``secrets.token_urlsafe``) in a cookie that
Starlette's ``SessionMiddleware`` signs; everything else stays here, on the server,
per session: the ``Admin`` made with the user's credentials, a CSRF token that every
form carries, and the offset-reset plans waiting for their confirmation. A session
ends at logout, after ``idle_s`` without a request, or ``max_age_s`` after its login,
whichever comes first; an ended session is gone from the table, so a copied cookie
opens nothing.

Nothing here imports a web framework, so the rules are unit-tested on their own.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from rayq.bootstrap import parse_key
from rayq.store.errors import ConfigError, InvalidRequestError, PermissionDeniedError

DEFAULT_IDLE_S: Final[float] = 30 * 60.0
DEFAULT_MAX_AGE_S: Final[float] = 8 * 3600.0
PENDING_RESETS_MAX: Final[int] = 16  # dry-run plans a session keeps for confirmation


def check_login_key(expected: bytes, given: str) -> None:
    """PermissionDeniedError unless ``given`` is the deployment key ``expected``
    (compared in constant time)."""
    if not given.strip():
        raise PermissionDeniedError("enter the deployment key (the hex digits of rayq.key)")
    try:
        raw = parse_key(given, "the key entered")
    except ConfigError as exc:
        raise PermissionDeniedError(str(exc)) from None
    if not hmac.compare_digest(raw, expected):
        raise PermissionDeniedError(
            "wrong deployment key: it is not the key of the deployment this console serves"
        )


@dataclass
class Session:
    """One logged-in browser: its Admin (with the user's credentials), who it is, its
    CSRF token, and the reset plans it was shown (by plan id)."""

    admin: Any  # rayq.Admin; Any keeps this module free of the client stack
    access_key: str
    created_s: float
    last_seen_s: float
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    pending: dict[str, Any] = field(default_factory=dict)

    def check_csrf(self, token: str) -> None:
        """PermissionDeniedError unless ``token`` is this session's CSRF token."""
        if not hmac.compare_digest(token.encode(), self.csrf.encode()):
            raise PermissionDeniedError(
                "this form is stale or came from another site: reload the page and submit it again"
            )

    def keep(self, plan: Any) -> str:
        """Keep a dry-run plan until it is confirmed; its id (the oldest is dropped past
        PENDING_RESETS_MAX)."""
        plan_id = secrets.token_urlsafe(12)
        self.pending[plan_id] = plan
        while len(self.pending) > PENDING_RESETS_MAX:
            self.pending.pop(next(iter(self.pending)))
        return plan_id

    def take(self, plan_id: str) -> Any:
        """The plan ``plan_id`` (removed: a plan is confirmed once); InvalidRequestError if
        this session was shown no such plan."""
        try:
            return self.pending.pop(plan_id)
        except KeyError:
            raise InvalidRequestError(
                "this confirmation is for no plan this session was shown (already "
                "confirmed, or from another login): make the dry run again"
            ) from None


class SessionTable:
    """The sessions by id, with their expiry. Thread-safe (the web server's threads
    share it)."""

    def __init__(
        self,
        idle_s: float = DEFAULT_IDLE_S,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if idle_s <= 0 or max_age_s <= 0:
            raise ConfigError(
                f"session lifetimes must be > 0 s, got idle {idle_s!r} and max age {max_age_s!r}"
            )
        self.idle_s = idle_s
        self.max_age_s = max_age_s
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, admin: Any, access_key: str) -> str:
        """A new session for ``admin``; its id (to put in the signed cookie)."""
        now = self._clock()
        session_id = secrets.token_urlsafe(32)
        with self._lock:
            self._purge(now)
            self._sessions[session_id] = Session(admin, access_key, now, now)
        return session_id

    def get(self, session_id: object) -> Session | None:
        """The live session ``session_id`` (its idle time restarts), or None if there is
        none or it expired."""
        if not isinstance(session_id, str):
            return None
        now = self._clock()
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return None
            if self._expired(session, now):
                del self._sessions[session_id]
                return None
            session.last_seen_s = now
            return session

    def close(self, session_id: object) -> None:
        if isinstance(session_id, str):
            with self._lock:
                self._sessions.pop(session_id, None)

    def __len__(self) -> int:
        with self._lock:
            self._purge(self._clock())
            return len(self._sessions)

    def _expired(self, session: Session, now: float) -> bool:
        return now - session.last_seen_s > self.idle_s or now - session.created_s > self.max_age_s

    def _purge(self, now: float) -> None:
        for sid in [s for s, sess in self._sessions.items() if self._expired(sess, now)]:
            del self._sessions[sid]
