"""The server key: proof that a call between server actors comes from one of them.

Ray lets any driver in the cluster call any method of any named actor. The client
protocol is guarded by the ACL (actors/server/acl.py); the operations between server
actors (the registry's ``Caller.SERVER`` operations: replication, registration, flush
targets, answers to parked pulls, lifecycle) are guarded by a key that only the
deployment has.

``rayq.start`` makes one ``ServerKey`` per deployment (``secrets.token_bytes``, 32
bytes) and hands it to every server actor it spawns as a constructor argument; the
coordinator keeps it too, to spawn replicas on failover and rejoin. Ray restarts an
actor with its constructor arguments, so a restarted actor has it again. No method
returns it (``repr`` and ``str`` of a ``ServerKey`` show no byte of it; it is pickled,
key included, only as a constructor argument Ray passes to the actor it is handed to).

A caller proves it holds the key with a ``ServerProof`` per call: the time in ms and
the MAC under the key of the operation (``service.method``), the target actor's name,
that time and the request's bytes as each operation binds them (``prove``). The MAC is
keyed BLAKE2b (BLAKE2's own MAC mode, in the standard library): about 1 us here
against 4.5 us for HMAC-SHA256; a whole proof (encode, MAC) costs a few us. The callee
recomputes it (``verify``, constant-time compare) and refuses, with
``PermissionDeniedError``, a call without a proof, with a wrong one, or one made more
than ``PROOF_WINDOW_MS`` away from its clock (so a proof seen once cannot be used
later, and never for another actor, operation or request). The same window allows a
verbatim replay of an observed call to the same actor within it: observing one needs
access to the cluster's network or the actors' memory, which this does not protect
against (see docs/guide/acl.md, "The server key").
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from typing import Any, Final

import msgspec

from rayq.actors.protocol.registry import Access, operations
from rayq.store.errors import PermissionDeniedError

KEY_BYTES: Final[int] = 32
PROOF_WINDOW_MS: Final[int] = 5 * 60 * 1000  # clocks of the cluster's nodes may differ
_encoder = msgspec.msgpack.Encoder()


class ServerProof(msgspec.Struct, frozen=True, kw_only=True):
    """A server call's proof of the key: when it was made and the MAC (see module doc)."""

    timestamp_ms: int
    mac: bytes


SERVER_OP: Final[str] = "server:"  # the prefix of a server call's op on the data plane


class ServerArgs(msgspec.Struct, frozen=True, array_like=True):
    """A server call on the socket data plane (actors/protocol/frames.py): its arguments
    (requests as ``to_wire`` bytes, tokens as text) and its proof, if it needs one."""

    args: list[Any]  # msgpack's bin and str: the callee checks each as it does over Ray
    proof: ServerProof | None = None


def request_bytes(request: Any) -> bytes:
    """A request Struct's bytes as a proof binds them (its msgpack)."""
    return request if type(request) is bytes else _encoder.encode(request)


def proof_parts(op: str, args: tuple[Any, ...]) -> tuple[bytes, ...]:
    """The bytes a proof of ``op`` binds, from the call's arguments: all of them (their
    msgpack), except a hold's ``deliver``, bound to its token only (an answer may be
    megabytes of records, and the token names one parked pull)."""
    if op == "hold.deliver":
        args = args[:1]
    try:
        return tuple(map(request_bytes, args))
    except (TypeError, ValueError, OverflowError) as exc:
        raise PermissionDeniedError(
            f"{op}: arguments that cannot be encoded carry no valid server proof ({exc})",
            method=op,
        ) from None


class ServerKey:
    """The deployment's key (32 random bytes): makes and checks ``ServerProof``s."""

    __slots__ = ("_clock", "_key")

    def __init__(self, key: bytes, clock: Callable[[], float] = time.time) -> None:
        if type(key) is not bytes or len(key) != KEY_BYTES:
            raise ValueError(f"a server key is {KEY_BYTES} bytes")
        self._key = key
        self._clock = clock

    @classmethod
    def new(cls) -> ServerKey:
        """A fresh key (made once per deployment, by ``rayq.start``)."""
        return cls(secrets.token_bytes(KEY_BYTES))

    def __repr__(self) -> str:
        return "ServerKey(***)"

    __str__ = __repr__

    def __reduce__(self) -> tuple[Any, ...]:
        # Ray pickles constructor arguments: the key travels to the actor it is handed to.
        return (ServerKey, (self._key,))

    def fingerprint(self) -> str:
        """A name for this deployment that reveals nothing of the key (16 hex digits)."""
        return hashlib.blake2b(b"rayq-deployment", key=self._key, digest_size=8).hexdigest()

    def _mac(self, op: str, target: str, timestamp_ms: int, parts: tuple[bytes, ...]) -> bytes:
        head = f"{op}\n{target}\n{timestamp_ms}\n".encode()
        return hashlib.blake2b(head + b"\x00".join(parts), key=self._key, digest_size=32).digest()

    def prove(self, op: str, target: str, *parts: bytes) -> ServerProof:
        """The proof for calling ``op`` (``service.method``) on the actor ``target``
        with the request bytes ``parts`` (as the operation binds them), made now."""
        now = int(self._clock() * 1000)
        return ServerProof(timestamp_ms=now, mac=self._mac(op, target, now, parts))

    def verify(self, op: str, target: str, proof: object, *parts: bytes) -> None:
        """Nothing if ``proof`` proves the key for this call; PermissionDeniedError if
        it is missing, wrong or outside the window."""
        if type(proof) is not ServerProof:
            raise PermissionDeniedError(
                f"{op} is an operation between rayq's server actors: a call needs the "
                "deployment's server proof, and this one carries none (clients use the "
                "client protocol; see docs/guide/acl.md, 'The server key')",
                method=op,
            )
        stamp = proof.timestamp_ms
        skew = abs(int(self._clock() * 1000) - stamp) if type(stamp) is int else -1
        if not 0 <= skew <= PROOF_WINDOW_MS:
            raise PermissionDeniedError(
                f"{op}: server proof made {skew} ms away from this actor's clock (allowed: "
                f"{PROOF_WINDOW_MS} ms): replayed, or the nodes' clocks are out of sync",
                method=op,
            )
        mac = proof.mac
        if type(mac) is not bytes or not hmac.compare_digest(
            mac, self._mac(op, target, stamp, parts)
        ):
            raise PermissionDeniedError(
                f"{op}: bad server proof (not made with this deployment's server key, or "
                "for another actor or request)",
                method=op,
            )


class Guard:
    """One actor's check of the proofs of its server operations (``target``: its name)."""

    __slots__ = ("key", "service", "target")

    def __init__(self, key: ServerKey, service: str, target: str) -> None:
        if not isinstance(key, ServerKey):
            raise TypeError(f"a server actor needs a ServerKey, got {type(key).__name__}")
        self.key, self.service, self.target = key, service, target

    def __repr__(self) -> str:
        return f"Guard({self.service}, {self.target})"

    def check(self, method: str, proof: object, *args: Any) -> None:
        """Nothing if ``proof`` proves the key for ``method(*args)`` on this actor; else
        PermissionDeniedError (nothing was done)."""
        op = f"{self.service}.{method}"
        self.key.verify(op, self.target, proof, *proof_parts(op, args))

    def prove(self, method: str, *args: Any) -> ServerProof:
        """The proof for calling ``method(*args)`` on this actor (tests, the fake)."""
        op = f"{self.service}.{method}"
        return self.key.prove(op, self.target, *proof_parts(op, args))


class _SignedMethod:
    __slots__ = ("guard", "method", "name")

    def __init__(self, method: Any, guard: Guard, name: str) -> None:
        self.method, self.guard, self.name = method, guard, name

    def remote(self, *args: Any) -> Any:
        return self.method.remote(*args, proof=self.guard.prove(self.name, *args))


class Signed:
    """An actor handle whose server operations (Access.SERVER_KEY in the registry) carry
    a proof made at each call: ``Signed(handle, key, "broker", actor_name).shutdown.remote()``.
    Its other methods are the handle's own."""

    def __init__(self, handle: Any, key: ServerKey, service: str, target: str) -> None:
        self._handle = handle
        self._guard = Guard(key, service, target)
        self._proven = {
            n for n, op in operations(service).items() if op.access is Access.SERVER_KEY
        }

    def __repr__(self) -> str:
        return f"Signed({self._guard.service}, {self._guard.target})"

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._handle, name)
        return _SignedMethod(method, self._guard, name) if name in self._proven else method


__all__ = [
    "KEY_BYTES",
    "PROOF_WINDOW_MS",
    "SERVER_OP",
    "Guard",
    "ServerArgs",
    "ServerKey",
    "ServerProof",
    "Signed",
    "proof_parts",
    "request_bytes",
]
