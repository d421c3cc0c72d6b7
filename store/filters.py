"""Tag filtering: RocketMQ's tag hash (Java ``String.hashCode``) and subscription expressions.

The consume queue stores each message's tag hash; the broker filters by hash set,
the client re-checks the exact tag (hashes can collide).
"""

from __future__ import annotations

from functools import lru_cache

import msgspec

from .errors import InvalidMessageError

SUB_ALL = "*"


@lru_cache(maxsize=65536)
def java_string_hash(text: str) -> int:
    """Java ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    raw = text.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def tags_code(tags: str | None) -> int:
    """The 8-byte tag hash a consume-queue entry carries (0 without tags)."""
    return java_string_hash(tags) if tags else 0


class TagFilter(msgspec.Struct, frozen=True):
    """A parsed subscription expression: ``"*"`` or ``"TagA || TagB"``."""

    expression: str = SUB_ALL
    tags: frozenset[str] | None = None  # None: everything
    codes: frozenset[int] | None = None

    @classmethod
    def parse(cls, expression: str | None) -> TagFilter:
        """``None``, ``""`` or ``"*"``: everything; else ``"TagA || TagB"``.

        InvalidMessageError for anything else (a non-str, an expression naming no tag).
        """
        if expression is not None and not isinstance(expression, str):
            raise InvalidMessageError(
                f"subscription expression must be a str such as '*' or 'TagA || TagB', got "
                f"{type(expression).__name__} {expression!r}",
                value=repr(expression),
            )
        expr = (expression or SUB_ALL).strip()
        if expr in ("", SUB_ALL):
            return cls(SUB_ALL)
        tags = frozenset(t.strip() for t in expr.split("||") if t.strip())
        if not tags:
            raise InvalidMessageError(
                f"subscription expression {expression!r} names no tag; use '*' or 'TagA || TagB'"
            )
        return cls(expr, tags, frozenset(java_string_hash(t) for t in tags))

    def matches_code(self, code: int) -> bool:
        return self.codes is None or code in self.codes

    def matches_tags(self, tags: str | None) -> bool:
        return self.tags is None or (tags is not None and tags in self.tags)
