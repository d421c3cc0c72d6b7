"""docs/ARCHITECTURE.md's operations table is the registry's: every operation, with
its caller, request, reply, concurrency group and access, exactly as
``registry.markdown_table()`` renders them (regenerate the table from it when an
operation changes)."""

from __future__ import annotations

from pathlib import Path

from rayq.actors.protocol.registry import markdown_table

DOC = Path(__file__).resolve().parents[3] / "docs" / "ARCHITECTURE.md"
HEADER = "| operation | caller | request | reply | concurrency group | access |"


def _table_in_doc() -> str:
    lines = DOC.read_text().splitlines()
    start = lines.index(HEADER)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[start:end]) + "\n"


def test_the_operations_table_is_the_registry() -> None:
    assert _table_in_doc() == markdown_table()
