"""Subscription expressions: parsing, tag hashes and matching."""

from __future__ import annotations

import pytest

from rayq.store import TagFilter, java_string_hash
from rayq.store.errors import InvalidMessageError


@pytest.mark.parametrize("expression", ["*", None, "", "  *  "])
def test_star_none_and_empty_expressions_match_everything(expression: str | None) -> None:
    """'*', None and blank all mean 'every tag, and messages without tags'."""
    f = TagFilter.parse(expression)
    assert f.expression == "*"
    assert f.tags is None
    assert f.codes is None
    assert f.matches_code(0)
    assert f.matches_code(java_string_hash("Anything"))
    assert f.matches_tags(None)
    assert f.matches_tags("Anything")


def test_or_expression_holds_each_tag_and_its_java_hash() -> None:
    """'TagA || TagB' keeps both tags (trimmed) and their String.hashCode values."""
    f = TagFilter.parse(" TagA ||TagB ")
    assert f.tags == frozenset({"TagA", "TagB"})
    assert f.codes == frozenset({2598919, 2598920})  # "TagA".hashCode(), "TagB".hashCode()


def test_or_expression_matches_only_its_tags_by_code_and_by_name() -> None:
    """Codes and exact tags of TagA/TagB match; TagC, no tag and code 0 do not."""
    f = TagFilter.parse("TagA || TagB")
    assert f.matches_code(java_string_hash("TagA"))
    assert f.matches_code(java_string_hash("TagB"))
    assert not f.matches_code(java_string_hash("TagC"))
    assert not f.matches_code(0)
    assert f.matches_tags("TagA")
    assert f.matches_tags("TagB")
    assert not f.matches_tags("TagC")
    assert not f.matches_tags(None)
    assert not f.matches_tags("TagA || TagB")


def test_single_tag_expression_matches_that_tag_only() -> None:
    """A one-tag expression is a one-element set."""
    f = TagFilter.parse("TagA")
    assert f.tags == frozenset({"TagA"})
    assert f.matches_tags("TagA")
    assert not f.matches_tags("taga")


@pytest.mark.parametrize("expression", ["||", " || ", "|| ||"])
def test_expression_naming_no_tag_is_rejected(expression: str) -> None:
    """An expression of separators only raises InvalidMessageError that shows the fix."""
    with pytest.raises(InvalidMessageError, match=r"names no tag"):
        TagFilter.parse(expression)


@pytest.mark.parametrize(
    ("expression", "type_name"), [(1, "int"), (b"*", "bytes"), (["TagA"], "list"), (1.5, "float")]
)
def test_non_str_expression_is_invalid_message_naming_its_type(
    expression: object, type_name: str
) -> None:
    """Not an AttributeError or TypeError from deep inside (push and pull consumers share it)."""
    with pytest.raises(InvalidMessageError, match=f"must be a str.*got {type_name}"):
        TagFilter.parse(expression)  # type: ignore[arg-type]
