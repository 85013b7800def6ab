"""Load an `ExperimentConfig` from YAML recipes plus dotted command-line overrides.

Why our own loader (and not Hydra/OmegaConf): the whole job is ~100 lines on top of pydantic,
and we want one error format everywhere: the field path, the value given and what is allowed,
with the nearest valid name suggested for a typo. A recipe may inherit another with
`base: other.yaml` (resolved relative to the recipe), which is how dense twins are written.

What `base:` does, key by key (`merge_onto_base`): a config *section* (a pydantic model such as
`train` or `model.moe`) and a mapping of sections (`data.filter.chains`) merge, so the recipe
states only the fields it changes; every other value replaces the base's value whole: scalars,
lists (`data.inputs`, `mixture.documents`) and mappings of plain values (`mixture.rates`,
`cluster.train_resources`). A recipe's own mixture therefore never inherits the base's sources.
`moelab config show --resolved` prints the result.
"""

from __future__ import annotations

import difflib
import os
import tempfile
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, RootModel, ValidationError

from shared.config.experiment import ExperimentConfig


class ConfigError(ValueError):
    """A config that cannot be used; the message names every offending field."""


def load_config(path: str | os.PathLike | None = None, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """Read a recipe (or the defaults when `path` is None), apply `a.b.c=value` overrides, validate."""
    raw = _read_recipe(Path(path)) if path is not None else {}
    for item in overrides:
        _apply_override(raw, item)
    return validate(raw, source=str(path) if path else "defaults")


def merged_recipe(path: str | os.PathLike, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """What a recipe, its `base:` chain and `overrides` set, before defaults (`config show --recipe`)."""
    raw = _read_recipe(Path(path))
    for item in overrides:
        _apply_override(raw, item)
    return raw


def validate(raw: dict[str, Any], source: str = "config") -> ExperimentConfig:
    try:
        return ExperimentConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_errors(exc, source)) from None


def save_resolved(cfg: ExperimentConfig, out_dir: str | os.PathLike) -> Path:
    """Write the fully resolved config as `config.yaml` in `out_dir`, atomically."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = out / "config.yaml"
    text = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
    fd, tmp = tempfile.mkstemp(dir=out, prefix=".config.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, target)
    return target


def dump_yaml(cfg: ExperimentConfig) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


def _read_recipe(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    resolved = path.resolve()
    if resolved in seen:
        raise ConfigError(f"config inheritance cycle: {' -> '.join(str(p) for p in (*seen, resolved))}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections, got {type(data).__name__}")
    base = data.pop("base", None)
    if base is None:
        return data
    parent = _read_recipe(path.parent / str(base), (*seen, resolved))
    return merge_onto_base(parent, data)


def merge_onto_base(base: dict[str, Any], over: dict[str, Any], loc: tuple[str, ...] = ()) -> dict[str, Any]:
    """A recipe (`over`) onto its `base:`: sections merge, every other value replaces (module docstring)."""
    merged = dict(base)
    for key, value in over.items():
        here = (*loc, str(key))
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and merges(here):
            merged[key] = merge_onto_base(merged[key], value, here)
        else:
            merged[key] = value
    return merged


def merges(loc: tuple[str, ...]) -> bool:
    """Whether the value at `loc` is a section (or a mapping of sections), which `base:` merges.
    An unknown path merges, so validation still names a misspelt key inside it."""
    kind: Any = ExperimentConfig
    for part in loc:
        kind = _child(kind, part)
        if kind is None:
            return True
    return _is_section(kind)


def _unwrap(annotation: Any) -> Any:
    """`X | None`, `Annotated[X, ...]` and `SerializeAsAny[X]` → X (the first model or dict found, else as is)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) is dict:
        return annotation
    for arg in typing.get_args(annotation):
        found = _unwrap(arg)
        if found is not None and (isinstance(found, type) and issubclass(found, BaseModel) or typing.get_origin(found) is dict):
            return found
    return annotation


def _child(kind: Any, part: str) -> Any:
    if isinstance(kind, type) and issubclass(kind, RootModel):
        kind = _unwrap(kind.model_fields["root"].annotation)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        field = kind.model_fields.get(part)
        return None if field is None else _unwrap(field.annotation)
    if typing.get_origin(kind) is dict:
        return _unwrap(typing.get_args(kind)[1])
    return None


def _is_section(kind: Any) -> bool:
    if isinstance(kind, type) and issubclass(kind, RootModel):
        return _is_section(_unwrap(kind.model_fields["root"].annotation))
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return True
    if typing.get_origin(kind) is dict:
        value = _unwrap(typing.get_args(kind)[1])
        return isinstance(value, type) and issubclass(value, BaseModel)
    return False


def _apply_override(raw: dict[str, Any], item: str) -> None:
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {item!r} must look like section.field=value (e.g. model.moe.top_k=4)")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {item!r}: value is not valid YAML: {exc}") from None
    node = raw
    parts = key.split(".")
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            where = ".".join(parts[: depth + 1])
            raise ConfigError(f"override {item!r}: {where} is a value ({child!r}), not a section")
        node = child
    node[parts[-1]] = value


def format_errors(exc: ValidationError, source: str) -> str:
    lines = [f"invalid config ({source}):"]
    for err in exc.errors():
        loc = tuple(err["loc"])
        path = ".".join(str(p) for p in loc) or "<root>"
        if err["type"] == "extra_forbidden":
            hint = _suggest(loc)
            lines.append(f"  {path}: unknown key{hint}")
            continue
        msg = err["msg"].removeprefix("Value error, ")
        given = err.get("input")
        if isinstance(given, dict):  # a cross-field rule: the message names the fields involved
            lines.append(f"  {path}: {msg}")
        else:
            lines.append(f"  {path} = {_short(given)}: {msg}")
    return "\n".join(lines)


def _suggest(loc: tuple) -> str:
    model = _model_at(ExperimentConfig, loc[:-1])
    if model is None:
        return ""
    names = list(model.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.5)
    if close:
        return f"; did you mean '{close[0]}'?"
    return f"; valid keys: {', '.join(names)}"


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        found = _find_model(field.annotation)
        if found is None:
            return None
        model = found
    return model


def _find_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _find_model(arg)
        if found is not None:
            return found
    return None


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
