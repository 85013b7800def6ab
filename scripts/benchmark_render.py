"""Any benchmark result (a JSON object) as Markdown: every figure in it, whatever its keys.

Why generic: the benchmarks grow new keys and new result files with every rerun, and the page that
shows them (scripts/benchmarks_page.py) must not crash on, or silently drop, what it has not seen.
So nothing here knows a benchmark: scalars become `key | value` rows under their dotted path, a
mapping of many scalars becomes its own two-column table, a mapping whose values are records of
few fields becomes one table (rows = its keys, columns = the records' fields), a list of records
becomes one table, a list of scalars one comma-joined value. Every scalar leaf of the input is
printed somewhere, and `leaves` (which the tests use to prove it) walks the input the same way.

Floats are printed to four significant figures (two decimals at most from a thousand up),
so the output is a pure function of the JSON and a rerun that changes a figure changes the page.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

MAX_COLUMNS = 12  # a record table wider than this is split into one block per record instead
INLINE_MAPPING = 6  # a mapping of at most this many scalars stays in its parent's key/value rows


def is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)


def fmt(value: Any) -> str:
    """A scalar as the page prints it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        if value == 0:
            return "0"
        if abs(value) >= 1000:
            return f"{value:.2f}".rstrip("0").rstrip(".")
        return f"{value:.4g}"
    return str(value)


def cell(value: Any) -> str:
    """A scalar (or a list of scalars) as a Markdown table cell: pipes and newlines escaped."""
    if isinstance(value, list):
        text = ", ".join(fmt(v) for v in value) if value else "[]"
    else:
        text = fmt(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _scalar_list(value: Any) -> bool:
    return isinstance(value, list) and all(is_scalar(v) for v in value)


def _records(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def leaves(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every scalar (and list of scalars) in `obj` with its dotted path, in the file's order."""
    if is_scalar(obj) or _scalar_list(obj):
        yield prefix, obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from leaves(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from leaves(value, f"{prefix}[{i}]")


def _flat_record(record: dict) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """A record's scalar leaves (dotted, relative to it) and its nested non-scalar lists, apart."""
    flat: dict[str, Any] = {}
    nested: list[tuple[str, Any]] = []

    def walk(obj: dict, prefix: str) -> None:
        for key, value in obj.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if is_scalar(value) or _scalar_list(value):
                flat[path] = value
            elif _empty(value):
                flat[path] = _empty(value)
            elif isinstance(value, dict):
                walk(value, path)
            else:
                nested.append((path, value))

    walk(record, "")
    return flat, nested


_MISSING = object()  # a record without one of its table's columns: an empty cell


def _empty(value: Any) -> str | None:
    """An empty mapping or list as the page prints it (None for anything else)."""
    if isinstance(value, dict | list) and not value:
        return "{}" if isinstance(value, dict) else "[]"
    return None


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join("" if v is _MISSING else cell(v) for v in row) + " |" for row in rows]
    return lines


def _record_table(title: str, keyed: list[tuple[str, dict]], key_header: str) -> list[str] | None:
    """One table for records (rows) of few fields (columns), or None when they are too wide."""
    flats = [(key, *_flat_record(rec)) for key, rec in keyed]
    columns: list[str] = []
    for _, flat, _ in flats:
        columns += [c for c in flat if c not in columns]
    if not columns or len(columns) > MAX_COLUMNS:
        return None
    rows = [[key, *(flat.get(c, _MISSING) for c in columns)] for key, flat, _ in flats]
    out = [f"**{title}**", "", *_table([key_header, *columns], rows), ""]
    for key, _, nested in flats:
        for path, value in nested:
            out += blocks(value, f"{title}.{key}.{path}")
    return out


def blocks(obj: Any, title: str = "") -> list[str]:
    """Markdown for `obj`: a key/value table of its scalars first, then one block per larger part."""
    if is_scalar(obj) or _scalar_list(obj):
        return _table(["key", "value"], [[title or "value", obj]]) + [""]
    if _records(obj):
        table = _record_table(title, [(str(i), rec) for i, rec in enumerate(obj)], "#")
        if table is not None:
            return table
        return [line for i, rec in enumerate(obj) for line in blocks(rec, f"{title}[{i}]")]
    if isinstance(obj, list):  # mixed: records, lists and scalars
        return [line for i, value in enumerate(obj) for line in blocks(value, f"{title}[{i}]")]
    rows: list[list[Any]] = []
    later: list[str] = []

    def inline(mapping: dict, prefix: str) -> None:
        for key, value in mapping.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            full = f"{title}.{path}" if title else path
            if is_scalar(value) or _scalar_list(value):
                rows.append([path, value])
            elif _empty(value):
                rows.append([path, _empty(value)])
            elif isinstance(value, dict) and value and all(is_scalar(v) for v in value.values()) and len(value) <= INLINE_MAPPING:
                inline(value, path)
            elif isinstance(value, dict) and value and all(is_scalar(v) or _scalar_list(v) for v in value.values()):
                later.extend([f"**{full}**", "", *_table(["key", "value"], [[k, v] for k, v in value.items()]), ""])
            elif isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
                table = _record_table(full, [(str(k), v) for k, v in value.items()], key)
                later.extend(table if table is not None else blocks(value, full))
            elif isinstance(value, dict):
                inline(value, path)
            else:
                later.extend(blocks(value, full))

    inline(obj, "")
    head = ([f"**{title}**", ""] if title and rows else []) + (_table(["key", "value"], rows) + [""] if rows else [])
    return head + later
