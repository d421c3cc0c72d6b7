"""Access control (RocketMQ's plain ACL): the broker half, Ray-free.

``AclService.check(method, request)`` is the one check of every client request, called
at the boundary by the broker actor and by ``rayq.testing.FakeCluster`` (through
``BrokerServer.authorize``). The rules come from a TOML file (``BrokerConfig.acl_file``)::

    global_white_remote_addresses = ["10.0.0.*", "192.168.1.7"]

    [[accounts]]
    access_key = "producer-app"
    secret_key = "..."
    admin = false
    default_topic_perm = "DENY"
    default_group_perm = "SUB"
    topic_perms = ["orders=PUB", "audit=DENY"]
    group_perms = ["billing=SUB"]

Perms are DENY, PUB, SUB and PUB|SUB. A request from a whitelisted address passes
without a signature: the address the server observes (``peer``, from the transport),
never the one a request declares (``RequestAuth.address`` is the client's word). Under
Ray actor calls the server observes no caller address (``peer`` is None), so whitelist
entries admit nobody there (a warning says so when a file has some); a socket transport
that sees its peer's address passes it. Otherwise a request's ``auth`` must name a known
account, carry a timestamp within ``acl_timestamp_window_ms`` of the broker's clock
(replay protection) and the right signature (actors/protocol/auth.py); then each resource it
touches must grant the perm needed: PUB on the topic to send (and to sign a
``write_grant``, the leave Spark's JVM tasks append with); SUB on the topic and
the group to pull, commit or query offsets, lock queues or send messages back; SUB on
the topic for reads by topic (stats, bounds, message queries, Arrow reads). Admin
operations (create/delete topics, group config changes and deletion, offset resets,
listing groups, message lookups by id, schedule and replication stats) need
``admin = true``; an admin account may do everything. A resource not listed gets the
account's default perm. Retry topics (``%RETRY%<group>``) are checked as their group.

The coordinator checks its client operations with the same rules
(``AclService(..., service="coordinator")``, ``coordinator_acl``): its file is
``acl_file`` too, or ``<store dir>/config/plain_acl.toml`` where ``<store dir>`` is the
one given to ``rayq.start`` (the parent of every broker's store dir). What each of its
operations needs is the registry's ``Access``: a valid account for the cluster-wide
listings (topics, brokers, the broker table, lost brokers) and ``leave_shares``, PUB or
SUB on the topic for a route, SUB on the group and its topics for shares, membership and
stream plans; ``read_replica`` (the transport's own lookup) is not checked.

The file is looked at again at most once a second (its mtime, on the request path);
a changed file is reloaded, and one that does not parse keeps the previous rules
(logged as an error naming the file). Secret keys never appear in logs or errors.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hmac
import logging
import os
import re
import time
import tomllib
from collections.abc import Callable
from typing import Any

from rayq.actors.protocol.auth import signature
from rayq.actors.protocol.config import BrokerConfig
from rayq.actors.protocol.registry import Access, Caller, admin_operations, operations
from rayq.actors.server.table_files import CONFIG_DIR_NAME
from rayq.store.errors import PermissionDeniedError

logger = logging.getLogger(__name__)

DENY, PUB, SUB = 0, 1, 2
PERMS = {"DENY": DENY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}
PERM_NAMES = {PUB: "PUB", SUB: "SUB", PUB | SUB: "PUB or SUB"}
RETRY_PREFIX = "%RETRY%"
RELOAD_CHECK_S = 1.0
ACL_FILE_NAME = "plain_acl.toml"  # in <store dir>/config/ unless acl_file says

# Client methods that need an admin account (the registry's Access.ADMIN).
ADMIN_METHODS = admin_operations("broker")


class AclFileError(ValueError):
    """The ACL file is not valid (the message names the file and the problem)."""


@dataclasses.dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str = dataclasses.field(repr=False)
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    topic_perms: dict[str, int] = dataclasses.field(default_factory=dict)
    group_perms: dict[str, int] = dataclasses.field(default_factory=dict)

    def topic_perm(self, topic: str) -> int:
        return self.topic_perms.get(topic, self.default_topic_perm)

    def group_perm(self, group: str) -> int:
        return self.group_perms.get(group, self.default_group_perm)


@dataclasses.dataclass(frozen=True)
class AclRules:
    accounts: dict[str, Account] = dataclasses.field(default_factory=dict)
    whitelist: tuple[str, ...] = ()
    _white: re.Pattern[str] | None = dataclasses.field(default=None, repr=False)

    def whitelisted(self, address: str) -> bool:
        return bool(address) and self._white is not None and self._white.match(address) is not None


def _perm(value: Any, where: str) -> int:
    if not isinstance(value, str) or value.strip().upper() not in PERMS:
        raise AclFileError(f"{where}: perm {value!r} is not one of DENY, PUB, SUB, PUB|SUB")
    return PERMS[value.strip().upper()]


def _perm_table(value: Any, where: str) -> dict[str, int]:
    """``["name=PERM", ...]`` (RocketMQ's form) or a table ``{name = "PERM"}``."""
    if isinstance(value, dict):
        return {str(k): _perm(v, f"{where}.{k}") for k, v in value.items()}
    if not isinstance(value, list):
        raise AclFileError(f"{where}: expected a list of 'name=PERM' strings or a table")
    out = {}
    for entry in value:
        name, sep, perm = str(entry).partition("=")
        if not sep or not name.strip():
            raise AclFileError(f"{where}: entry {entry!r} is not 'name=PERM'")
        out[name.strip()] = _perm(perm, f"{where}: {name.strip()}")
    return out


def parse_acl(text: str) -> AclRules:
    """The rules in an ACL file's text; AclFileError (without any secret) if invalid."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AclFileError(f"not valid TOML: {exc}") from None
    white = data.get("global_white_remote_addresses", [])
    if not isinstance(white, list) or not all(isinstance(w, str) for w in white):
        raise AclFileError("global_white_remote_addresses must be a list of strings")
    accounts: dict[str, Account] = {}
    raw = data.get("accounts", [])
    if not isinstance(raw, list):
        raise AclFileError("accounts must be an array of tables ([[accounts]])")
    for i, acc in enumerate(raw):
        where = f"accounts[{i}]"
        if not isinstance(acc, dict):
            raise AclFileError(f"{where} is not a table")
        key, secret = acc.get("access_key"), acc.get("secret_key")
        if not isinstance(key, str) or not key or not isinstance(secret, str) or not secret:
            raise AclFileError(f"{where}: access_key and secret_key must be non-empty strings")
        if key in accounts:
            raise AclFileError(f"{where}: access_key {key!r} appears twice")
        unknown = set(acc) - {
            "access_key",
            "secret_key",
            "admin",
            "default_topic_perm",
            "default_group_perm",
            "topic_perms",
            "group_perms",
            "white_remote_address",
        }
        if unknown:
            raise AclFileError(f"{where} ({key}): unknown keys {sorted(unknown)}")
        admin = acc.get("admin", False)
        if not isinstance(admin, bool):
            raise AclFileError(f"{where} ({key}): admin must be true or false")
        accounts[key] = Account(
            access_key=key,
            secret_key=secret,
            admin=admin,
            default_topic_perm=_perm(acc.get("default_topic_perm", "DENY"), f"{where} ({key})"),
            default_group_perm=_perm(acc.get("default_group_perm", "DENY"), f"{where} ({key})"),
            topic_perms=_perm_table(acc.get("topic_perms", []), f"{where} ({key}) topic_perms"),
            group_perms=_perm_table(acc.get("group_perms", []), f"{where} ({key}) group_perms"),
        )
    pattern = None
    if white:
        pattern = re.compile("|".join(f"(?:{fnmatch.translate(w.strip())})" for w in white))
    return AclRules(accounts=accounts, whitelist=tuple(white), _white=pattern)


def _needs(method: str, req: Any) -> list[tuple[str, str, int]]:
    """(kind, name, perm) the request needs: kind "topic" or "group"."""
    group = getattr(req, "group", None)
    if method == "put":
        return [("topic", req.topic, PUB)]
    if method == "write_grant":  # put_arrow's leave to append (protocol WriteGrant)
        return [("topic", req.topic, PUB)]
    if method == "put_half":
        return [("topic", req.batch.topic, PUB)]
    if method == "end_transaction":  # the server checks the topic is the transaction's
        return [("topic", req.topic, PUB)]
    if method == "transaction_checks":  # a producer group's checks: any valid account
        return []
    if method == "pull_many":
        topics = [i.topic for i in req.items] + [c.topic for c in req.commits]
        return [("group", group, SUB)] + [("topic", t, SUB) for t in topics]
    if method == "lock_queues" or method == "unlock_queues":
        return [("group", group, SUB)] + [("topic", q.topic, SUB) for q in req.queues]
    if method == "update_group":
        return []
    out = []
    if group is not None:
        out.append(("group", group, SUB))
    topic = getattr(req, "topic", None)
    if topic is not None:
        out.append(("topic", topic, SUB))
    return out


# The coordinator's client operations and what the ACL asks of each (the registry's).
COORDINATOR_ACCESS = {
    name: op.access for name, op in operations("coordinator", Caller.CLIENT).items()
}


def _coordinator_needs(method: str, req: Any) -> list[tuple[str, str, int]]:
    """(kind, name, perm) a coordinator request needs (perm PUB|SUB: either will do)."""
    access = COORDINATOR_ACCESS.get(method)
    if access is Access.PUB_OR_SUB:  # route, routes: a producer's or a consumer's
        topics = req.topics if method == "routes" else [req.topic]
        return [("topic", t, PUB | SUB) for t in topics]
    if access is not Access.SUB:  # ACCOUNT: a valid account is enough
        return []
    out = [("group", req.group, SUB)]
    if method == "join_group":  # its subscriptions
        return out + [("topic", t, SUB) for t in req.spec.topics]
    topic = getattr(req, "topic", None)
    if topic is not None:  # group_share, stream plans
        out.append(("topic", topic, SUB))
    return out


_NEEDS = {"broker": _needs, "coordinator": _coordinator_needs}


class AclService:
    """The rules of one ACL file, reloaded when it changes; ``check`` per request of
    ``service`` ("broker": a broker's and its page readers' operations, "coordinator":
    the coordinator's client operations)."""

    def __init__(
        self,
        path: str,
        window_ms: int = 300_000,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        *,
        service: str = "broker",
    ) -> None:
        if service not in _NEEDS:
            raise ValueError(
                f"AclService: service must be one of {sorted(_NEEDS)}, got {service!r}"
            )
        self.path = path
        self.window_ms = window_ms
        self.service = service
        self._admin = ADMIN_METHODS if service == "broker" else admin_operations(service)
        self._needs = _NEEDS[service]
        self._prefix = "" if service == "broker" else f"{service}."
        self._clock = clock
        self._monotonic = monotonic
        self.rules = AclRules()
        self._mtime: int | None = None
        self._last_look = -RELOAD_CHECK_S  # monotonic time of the last look at the file
        self._missing_logged = False
        self._reload()

    def __repr__(self) -> str:
        return (
            f"AclService(service={self.service!r}, path={self.path!r}, "
            f"accounts={len(self.rules.accounts)})"
        )

    # ------------------------------------------------------------ the file
    def _maybe_reload(self) -> None:
        now = self._monotonic()
        if now - self._last_look < RELOAD_CHECK_S:
            return
        self._last_look = now
        self._reload()

    def _reload(self) -> None:
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except OSError:
            if not self._missing_logged:
                logger.warning(
                    "ACL file %s is missing: only whitelisted addresses are let in "
                    "(the previous rules, if any, stay)",
                    self.path,
                )
                self._missing_logged = True
            return
        self._missing_logged = False
        if mtime == self._mtime:
            return
        self._mtime = mtime
        try:
            with open(self.path, encoding="utf-8") as f:
                rules = parse_acl(f.read())
        except (OSError, UnicodeDecodeError, AclFileError) as exc:
            logger.error(
                "ACL file %s could not be loaded, keeping the previous rules: %s", self.path, exc
            )
            return
        self.rules = rules
        if rules.whitelist:
            logger.warning(
                "ACL file %s: global_white_remote_addresses %s match only a caller address "
                "the server observes; under Ray actor calls it observes none, so these "
                "entries admit nobody (a client's declared address is never trusted)",
                self.path,
                list(rules.whitelist),
            )
        logger.info(
            "ACL file %s loaded: %d accounts, %d whitelist entries",
            self.path,
            len(rules.accounts),
            len(rules.whitelist),
        )

    # ------------------------------------------------------------ checks
    def check(self, method: str, req: Any, peer: str | None = None) -> None:
        """Nothing if ``req`` may call ``method``; else PermissionDeniedError saying why.
        ``peer``: the caller's address as the transport observed it (None: unknown, as
        under Ray actor calls); the only address the whitelist is matched against."""
        self._maybe_reload()
        rules = self.rules
        auth = req.auth
        if peer is not None and rules.whitelisted(peer):
            return
        what = self._prefix + method  # in errors: "route" -> "coordinator.route"
        if auth is None or not auth.access_key:
            raise PermissionDeniedError(
                f"{what}: ACL is on and the request carries no credentials (give the client "
                "ClientConfig(credentials=rayq.Credentials(access_key=..., secret_key=...)))",
                method=method,
            )
        key = auth.access_key
        account = rules.accounts.get(key)
        if account is None:
            raise PermissionDeniedError(
                f"{what}: unknown access key {key!r}", access_key=key, method=method
            )
        skew = abs(int(self._clock() * 1000) - auth.timestamp_ms)
        if skew > self.window_ms:
            raise PermissionDeniedError(
                f"{what} by {key!r}: request timestamp {auth.timestamp_ms} is {skew} ms away "
                f"from the {self.service}'s clock (allowed: {self.window_ms} ms); a replayed or "
                "stale request, or clocks out of sync",
                access_key=key,
                method=method,
            )
        expected = signature(account.secret_key, method, req)
        if not hmac.compare_digest(expected, auth.signature):
            raise PermissionDeniedError(
                f"{what} by {key!r}: bad signature (wrong secret key, or the request "
                "was changed after signing)",
                access_key=key,
                method=method,
            )
        if account.admin:
            return
        if method in self._admin:
            raise PermissionDeniedError(
                f"{what} by {key!r}: an admin operation, and the account is not admin "
                "(admin = true in the ACL file)",
                access_key=key,
                method=method,
            )
        for kind, name, perm in self._needs(method, req):
            if kind == "topic" and name.startswith(RETRY_PREFIX):
                kind, name = "group", name[len(RETRY_PREFIX) :]
            owned = account.topic_perm(name) if kind == "topic" else account.group_perm(name)
            if not owned & perm:
                raise PermissionDeniedError(
                    f"{what} by {key!r}: no {PERM_NAMES[perm]} permission on {kind} "
                    f"{name!r} (it has {_perm_name(owned)})",
                    access_key=key,
                    method=method,
                    resource=name,
                    perm=PERM_NAMES[perm],
                )


def coordinator_acl(config: BrokerConfig | None, store_dir: str) -> AclService | None:
    """The coordinator's ACL (None when off): the rules of the brokers' ``acl_file``, or
    of ``<store dir>/config/plain_acl.toml``, ``store_dir`` being the directory given to
    ``rayq.start`` (the parent of the brokers' store dirs), on the coordinator's node."""
    if config is None or not config.acl_enable:
        return None
    acl_file = config.acl_file or os.path.join(store_dir, CONFIG_DIR_NAME, ACL_FILE_NAME)
    return AclService(acl_file, config.acl_timestamp_window_ms, service="coordinator")


def _perm_name(perm: int) -> str:
    return {DENY: "DENY", PUB: "PUB", SUB: "SUB"}.get(perm, "PUB|SUB")


__all__ = ["AclFileError", "AclRules", "AclService", "coordinator_acl", "parse_acl"]
