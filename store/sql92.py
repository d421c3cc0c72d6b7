"""SQL92 property filters (RocketMQ's ``MessageSelector.bySql``): parse once, evaluate per message.

The subset RocketMQ supports, over a message's user properties (strings) and the
``TAGS`` pseudo-property. Grammar (keywords are case-insensitive)::

    expr       := or_expr
    or_expr    := and_expr ( OR and_expr )*
    and_expr   := not_expr ( AND not_expr )*
    not_expr   := NOT not_expr | primary
    primary    := '(' expr ')' | TRUE | FALSE | predicate
    predicate  := IDENT cmp_op literal
                | IDENT [NOT] BETWEEN number AND number
                | IDENT [NOT] IN '(' string ( ',' string )* ')'
                | IDENT IS [NOT] NULL
    cmp_op     := '>' | '>=' | '<' | '<=' | '=' | '<>'
    literal    := number | string | TRUE | FALSE
    number     := ['-'] digits [ '.' digits ]          (also 1e3, .5)
    string     := "'" ( any char, '' for a quote )* "'"
    IDENT      := letter or '_' ( letter | digit | '_' | '.' | '-' )*

Evaluation is three-valued, as SQL (and RocketMQ's ActiveMQ-derived evaluator) is: a
predicate on a property the message does not have is *unknown*, and so is a numeric
comparison with a value that is not a number, or a string comparison with a number;
``NOT unknown`` is unknown, ``AND``/``OR`` follow SQL's tables, and only *true*
matches. So ``a > 5`` and ``NOT (a > 5)`` both skip a message without ``a``, while
``a IS NULL`` takes it. ``>``/``<`` and ``BETWEEN`` compare numbers; ``=``/``<>``
compare numbers when the literal is a number, strings when it is a string, and
``TRUE``/``FALSE`` with the property's text ``true``/``false``.

A syntax error raises ``InvalidFilterError`` naming the position (0-based character
offset) and what was expected there.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from .errors import InvalidFilterError
from .properties import decode_properties

Props = dict[str, str]
Pred = Callable[[Props], bool | None]

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<num>-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?))
    | (?P<str>'(?:[^']|'')*')
    | (?P<op><>|>=|<=|[<>=(),])
    | (?P<ident>[A-Za-z_][A-Za-z0-9_.\-]*)
    )""",
    re.VERBOSE,
)
_KEYWORDS = {"AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE"}
_COMPARE = {
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    "=": lambda a, b: a == b,
    "<>": lambda a, b: a != b,
}


class _Tokens:
    def __init__(self, text: str) -> None:
        self.text = text
        self.items: list[tuple[str, str, int]] = []  # (kind, value, position)
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                start = len(text) - len(text[pos:].lstrip())
                raise InvalidFilterError(
                    f"SQL92 filter {text!r}: unexpected character {text[start]!r} at position "
                    f"{start}",
                    position=start,
                    expression=text,
                )
            kind = m.lastgroup or ""
            value = m.group(kind)
            start = m.start(kind)
            if kind == "ident" and value.upper() in _KEYWORDS:
                kind, value = "kw", value.upper()
            self.items.append((kind, value, start))
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str, int]:
        return self.items[self.i] if self.i < len(self.items) else ("end", "", len(self.text))

    def take(self) -> tuple[str, str, int]:
        tok = self.peek()
        self.i += 1
        return tok

    def accept(self, kind: str, value: str | None = None) -> bool:
        k, v, _ = self.peek()
        if k == kind and (value is None or v == value):
            self.i += 1
            return True
        return False

    def expect(self, kind: str, value: str | None, what: str) -> tuple[str, str, int]:
        k, v, _pos = self.peek()
        if k != kind or (value is not None and v != value):
            self.fail(what)
        return self.take()

    def fail(self, what: str) -> None:
        _k, v, pos = self.peek()
        found = repr(v) if v else "the end"
        raise InvalidFilterError(
            f"SQL92 filter {self.text!r}: expected {what} at position {pos}, found {found}",
            position=pos,
            expression=self.text,
        )


def _and(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _or(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


class _Parser:
    def __init__(self, text: str) -> None:
        self.t = _Tokens(text)

    def parse(self) -> Pred:
        if not self.t.items:
            self.t.fail("an expression")
        pred = self.or_expr()
        if self.t.peek()[0] != "end":
            self.t.fail("AND, OR or the end")
        return pred

    def or_expr(self) -> Pred:
        left = self.and_expr()
        while self.t.accept("kw", "OR"):
            right = self.and_expr()
            left = (lambda a, b: lambda p: _or(a(p), b(p)))(left, right)
        return left

    def and_expr(self) -> Pred:
        left = self.not_expr()
        while self.t.accept("kw", "AND"):
            right = self.not_expr()
            left = (lambda a, b: lambda p: _and(a(p), b(p)))(left, right)
        return left

    def not_expr(self) -> Pred:
        if self.t.accept("kw", "NOT"):
            inner = self.not_expr()
            return lambda p: None if (v := inner(p)) is None else not v
        return self.primary()

    def primary(self) -> Pred:
        if self.t.accept("op", "("):
            inner = self.or_expr()
            self.t.expect("op", ")", "')'")
            return inner
        if self.t.accept("kw", "TRUE"):
            return lambda p: True
        if self.t.accept("kw", "FALSE"):
            return lambda p: False
        kind, name, _pos = self.t.peek()
        if kind != "ident":
            self.t.fail("a property name, '(', NOT, TRUE or FALSE")
        self.t.take()
        return self.predicate(name)

    def predicate(self, name: str) -> Pred:
        kind, value, _pos = self.t.peek()
        if kind == "op" and value in _COMPARE:
            self.t.take()
            return self.comparison(name, _COMPARE[value], value)
        negate = self.t.accept("kw", "NOT")
        if self.t.accept("kw", "BETWEEN"):
            low = self.number()
            self.t.expect("kw", "AND", "AND")
            high = self.number()

            def between(p: Props) -> bool | None:
                v = _number(p.get(name))
                return None if v is None else (low <= v <= high) != negate

            return between
        if self.t.accept("kw", "IN"):
            self.t.expect("op", "(", "'('")
            values = {self.string()}
            while self.t.accept("op", ","):
                values.add(self.string())
            self.t.expect("op", ")", "')' or ','")

            def in_(p: Props) -> bool | None:
                v = p.get(name)
                return None if v is None else (v in values) != negate

            return in_
        if negate:
            self.t.fail("BETWEEN or IN after NOT")
        if self.t.accept("kw", "IS"):
            is_not = self.t.accept("kw", "NOT")
            self.t.expect("kw", "NULL", "NULL")
            return lambda p: (name in p) == is_not
        self.t.fail("a comparison (> >= < <= = <>), BETWEEN, IN or IS")
        raise AssertionError  # fail raised

    def comparison(self, name: str, op: Callable[[Any, Any], bool], text: str) -> Pred:
        kind, value, _pos = self.t.peek()
        if kind == "num":
            self.t.take()
            literal = float(value)

            def numeric(p: Props) -> bool | None:
                v = _number(p.get(name))
                return None if v is None else op(v, literal)

            return numeric
        if kind == "str" or (kind == "kw" and value in ("TRUE", "FALSE")):
            if text not in ("=", "<>"):
                self.t.fail(f"a number after {text!r} (strings and booleans take = or <>)")
            self.t.take()
            literal_s = value[1:-1].replace("''", "'") if kind == "str" else value.lower()

            def textual(p: Props) -> bool | None:
                v = p.get(name)
                if v is None:
                    return None
                return op(v.lower() if kind == "kw" else v, literal_s)

            return textual
        self.t.fail("a number, a string or TRUE/FALSE")
        raise AssertionError

    def number(self) -> float:
        kind, value, _pos = self.t.peek()
        if kind != "num":
            self.t.fail("a number")
        self.t.take()
        return float(value)

    def string(self) -> str:
        kind, value, _pos = self.t.peek()
        if kind != "str":
            self.t.fail("a string in single quotes")
        self.t.take()
        return value[1:-1].replace("''", "'")


class SqlFilter:
    """A compiled SQL92 subscription: ``matches(properties)`` per message."""

    __slots__ = ("_pred", "expression")

    type = "SQL92"
    tags = None  # no client-side tag check: the broker filtered by properties
    codes = None

    def __init__(self, expression: str, pred: Pred) -> None:
        self.expression = expression
        self._pred = pred

    def matches(self, properties: Props) -> bool:
        return self._pred(properties) is True

    def matches_tags(self, tags: str | None) -> bool:
        return True

    def __repr__(self) -> str:
        return f"SqlFilter({self.expression!r})"


@lru_cache(maxsize=1024)
def compile_sql(expression: str) -> SqlFilter:
    """Parse ``expression`` once (cached per text); InvalidFilterError naming the position."""
    if not isinstance(expression, str):
        raise InvalidFilterError(f"an SQL92 filter is a str, got {type(expression).__name__}")
    return SqlFilter(expression, _Parser(expression).parse())


_SIZE = struct.Struct(">i")
_BODY_LENGTH = struct.Struct(">84xi")
_PROPS_LENGTH = struct.Struct(">H")


def sql_filter_records(buffer: bytes, sql: SqlFilter, next_offset: int) -> tuple[bytes, int, int]:
    """The records of ``buffer`` (back to back, as a pull reads them) whose properties
    match ``sql``: (their bytes, how many, ``next_offset`` unchanged)."""
    keep: list[bytes] = []
    pos, end = 0, len(buffer)
    view = memoryview(buffer)
    while pos < end:
        size = _SIZE.unpack_from(buffer, pos)[0]
        body = _BODY_LENGTH.unpack_from(buffer, pos)[0]
        tpos = pos + 88 + body
        ppos = tpos + 1 + buffer[tpos]
        plen = _PROPS_LENGTH.unpack_from(buffer, ppos)[0]
        raw = bytes(view[ppos + 2 : ppos + 2 + plen]).decode("utf-8", "replace")
        if sql.matches(decode_properties(raw) if raw else {}):
            keep.append(bytes(view[pos : pos + size]))
        pos += size
    return b"".join(keep), len(keep), next_offset
