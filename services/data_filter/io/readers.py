"""Input readers: JSONL (plain, .gz, .zst) and Parquet, split into deterministic work units.

Why units: a rerun must skip finished work and a 2-worker run must equal a 1-worker run, so the
work is cut the same way every time, independently of the worker count: a plain JSONL file is
cut at newline boundaries every ~`unit_bytes`; a compressed file (not seekable) is one unit; a
Parquet file is one unit per row group.

Bad input never crashes and never vanishes: every line that does not become a document yields a
`Reject` with its file, line and reason (`invalid_utf8`, `malformed_json`, `not_an_object`,
`missing_text`, `text_not_string`, `empty_text`, `blank_line`, `too_large`, `invalid_unicode`,
`unreadable_file`). A line over `max_doc_bytes` is skipped while reading, in bounded memory.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from services.data_filter.filters.base import Doc

_BLOCK = 1 << 22
_RESERVED = ("id", "text", "source", "meta")
ID_ISSUE = "id_issue"


@dataclass(frozen=True)
class Unit:
    index: int
    source: str
    kind: str
    path: str
    fmt: str  # jsonl | jsonl.gz | jsonl.zst | parquet
    start: int = 0  # byte offset (plain JSONL) or row group (Parquet)
    end: int = -1
    first_line: int = 1


@dataclass
class Reject:
    source: str
    path: str
    line: int
    reason: str
    detail: str = ""
    preview: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "path": self.path, "line": self.line, "reason": self.reason,
                "detail": self.detail, "preview": self.preview}


def file_format(path: str) -> str:
    name = path.lower()
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith((".jsonl.gz", ".json.gz", ".gz")):
        return "jsonl.gz"
    if name.endswith((".jsonl.zst", ".json.zst", ".zst")):
        return "jsonl.zst"
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    raise ValueError(f"{path}: unknown input format; use .jsonl, .jsonl.gz, .jsonl.zst or .parquet")


def expand_paths(patterns: list[str], source: str) -> list[str]:
    out: list[str] = []
    for pattern in patterns:
        hits = sorted(glob.glob(os.path.expanduser(pattern), recursive=True))
        if not hits:
            raise FileNotFoundError(f"data.inputs[{source}]: {pattern!r} matches no file")
        out.extend(h for h in hits if h not in out)
    return out


def plan_units(inputs, unit_bytes: int) -> list[Unit]:
    """The fixed list of work units for `inputs` (a list of `InputSource`)."""
    units: list[Unit] = []
    for src in inputs:
        for path in expand_paths(src.paths, src.name):
            fmt = file_format(path)
            if fmt == "jsonl":
                for start, end, line in _split_plain(path, unit_bytes):
                    units.append(Unit(len(units), src.name, src.kind, path, fmt, start, end, line))
            elif fmt == "parquet":
                import pyarrow.parquet as pq

                try:
                    groups = pq.ParquetFile(path).metadata.num_row_groups
                except Exception:  # unreadable: one unit that reports it as a reject
                    groups = 1
                row = 0
                for g in range(max(groups, 1)):
                    units.append(Unit(len(units), src.name, src.kind, path, fmt, g, g + 1, row))
            else:
                units.append(Unit(len(units), src.name, src.kind, path, fmt))
    return units


def _split_plain(path: str, unit_bytes: int) -> list[tuple[int, int, int]]:
    size = os.path.getsize(path)
    cuts = [0]
    with open(path, "rb") as fh:
        while cuts[-1] + unit_bytes < size:
            fh.seek(cuts[-1] + unit_bytes - 1)
            while True:  # read to the end of the current line in bounded blocks
                block = fh.read(_BLOCK)
                if not block:
                    break
                nl = block.find(b"\n")
                if nl >= 0:
                    fh.seek(nl + 1 - len(block), os.SEEK_CUR)
                    break
            pos = fh.tell()
            if pos >= size:
                break
            cuts.append(pos)
        cuts.append(size)
        out, line = [], 1
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            out.append((a, b, line))
            fh.seek(a)
            left = b - a
            while left > 0:
                block = fh.read(min(_BLOCK, left))
                line += block.count(b"\n")
                left -= len(block)
    return out


def _open_stream(unit: Unit):
    if unit.fmt == "jsonl.gz":
        return gzip.open(unit.path, "rb")
    if unit.fmt == "jsonl.zst":
        import io

        import zstandard

        raw = zstandard.ZstdDecompressor().stream_reader(open(unit.path, "rb"), closefd=True)  # noqa: SIM115
        return io.BufferedReader(raw, buffer_size=1 << 20)
    fh = open(unit.path, "rb")  # noqa: SIM115 - closed by the caller
    fh.seek(unit.start)
    return fh


def _lines(unit: Unit, cap: int) -> Iterator[tuple[int, bytes | None]]:
    """(line number, raw line) with the newline removed; None for a line longer than `cap` bytes."""
    with _open_stream(unit) as fh:
        pos, line_no = unit.start, unit.first_line
        limit = unit.end if unit.fmt == "jsonl" else -1
        while limit < 0 or pos < limit:
            raw = fh.readline(cap + 2)
            if not raw:
                return
            pos += len(raw)
            if not raw.endswith(b"\n") and len(raw) > cap:  # gigantic line: skip the rest of it
                while True:
                    rest = fh.readline(_BLOCK)
                    pos += len(rest)
                    if not rest or rest.endswith(b"\n"):
                        break
                yield line_no, None
            else:
                yield line_no, raw.rstrip(b"\r\n")
            line_no += 1


def _preview(raw: bytes) -> str:
    return raw[:200].decode("utf-8", "replace")


def _record_to_doc(obj: Any, unit: Unit, line: int, cap: int) -> Doc | Reject:
    def reject(reason: str, detail: str = "") -> Reject:
        return Reject(unit.source, unit.path, line, reason, detail, _preview(repr(obj).encode()))

    if not isinstance(obj, dict):
        return reject("not_an_object", type(obj).__name__)
    if "text" not in obj or obj["text"] is None:
        return reject("missing_text")
    text = obj["text"]
    if not isinstance(text, str):
        return reject("text_not_string", type(text).__name__)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:  # lone surrogates from a \ud800 JSON escape
        return reject("invalid_unicode", str(exc)[:200])
    if size > cap:
        return reject("too_large", f"{size} bytes > max_doc_bytes {cap}")
    if not text.strip():
        return reject("empty_text")
    doc_id, id_issue = _document_id(obj.get("id"), unit, line)
    meta = _meta_of(obj.get("meta"))
    for key, value in obj.items():
        if key not in _RESERVED:
            meta[key] = value
    if "source" in obj and obj["source"] is not None:
        meta["orig_source"] = obj["source"]
    meta["line"] = line
    if id_issue:
        meta[ID_ISSUE] = id_issue
    return Doc(doc_id, text, unit.source, unit.kind, meta)


def _document_id(raw: Any, unit: Unit, line: int) -> tuple[str, str | None]:
    """The document's id and, when the record's own id could not be used as it is, why (meta
    `id_issue`, counted per source): `missing` (absent, null or empty: named by file and line),
    `not_string:int` (a whole number, kept as its digits), `not_string:<type>` (anything else,
    replaced by the file-and-line name). Uniqueness is checked over the whole run (pipeline)."""
    if isinstance(raw, str) and raw:
        return raw, None
    fallback = f"{unit.source}/{os.path.basename(unit.path)}#{line}"
    if raw is None or raw == "":
        return fallback, "missing"
    if isinstance(raw, int) and not isinstance(raw, bool):
        return str(raw), "not_string:int"
    return fallback, f"not_string:{type(raw).__name__}"


def _meta_of(value: Any) -> dict[str, Any]:
    """An input's `meta`: a mapping, or a JSON object string (our own output format); else kept under 'meta'."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            return {"meta": value}
        return parsed if isinstance(parsed, dict) else {"meta": parsed}
    return {} if value is None else {"meta": value}


def read_unit(unit: Unit, cap: int) -> Iterator[Doc | Reject]:
    """Documents and rejects of one unit, in file order."""
    if unit.fmt == "parquet":
        yield from _read_parquet(unit, cap)
        return
    line = unit.first_line
    try:
        for line, raw in _lines(unit, cap):
            if raw is None:
                yield Reject(unit.source, unit.path, line, "too_large", f"line over max_doc_bytes {cap}")
                continue
            if not raw.strip():
                yield Reject(unit.source, unit.path, line, "blank_line")
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield Reject(unit.source, unit.path, line, "invalid_utf8", str(exc)[:200], _preview(raw))
                continue
            try:
                obj = json.loads(text)
            except (json.JSONDecodeError, RecursionError) as exc:
                yield Reject(unit.source, unit.path, line, "malformed_json", str(exc)[:200], _preview(raw))
                continue
            yield _record_to_doc(obj, unit, line, cap)
    except (OSError, EOFError, ValueError) as exc:  # truncated gzip/zstd, unreadable file
        yield Reject(unit.source, unit.path, line, "unreadable_file", f"{type(exc).__name__}: {exc}"[:300])


def _read_parquet(unit: Unit, cap: int) -> Iterator[Doc | Reject]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(unit.path)
        if pf.metadata.num_row_groups == 0:
            return
        table = pf.read_row_group(unit.start)
    except Exception as exc:  # corrupt footer or row group
        yield Reject(unit.source, unit.path, unit.first_line, "unreadable_file", f"{type(exc).__name__}: {exc}"[:300])
        return
    first = sum(pf.metadata.row_group(g).num_rows for g in range(unit.start))
    for i, row in enumerate(table.to_pylist()):
        yield _record_to_doc(row, unit, first + i, cap)
