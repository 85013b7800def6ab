"""One filter per file; a chain is built from the registry, in the order the chain config lists them.

The registry maps a filter's name to its class: every module of this package is imported and its
`Filter` subclasses are registered under their `name`, so a new filter is one new file (its class
names its settings class) plus one line in `shared.config.filters.FILTER_SETTINGS` (so configs
validate without importing services). Filters from elsewhere (a plugin, a test) call
`register_filter(cls)`, which registers the settings too.
"""

from __future__ import annotations

import importlib
import pkgutil

from services.data_filter.filters.base import Doc, Filter
from shared.config.chains import ChainConfig
from shared.config.filters import FILTER_SETTINGS, register_filter_settings

__all__ = ["FILTERS", "Doc", "Filter", "build_chain", "fitted_filters", "register_filter"]

FILTERS: dict[str, type[Filter]] = {}


def register_filter(cls: type[Filter], before: str | None = None) -> type[Filter]:
    """Register a filter class (and its settings) under `cls.name`; usable as a decorator."""
    register_filter_settings(cls.name, cls.settings, before=before)
    FILTERS[cls.name] = cls
    return cls


def _discover() -> None:
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Filter) and obj.__module__ == module.__name__ and obj.name in FILTER_SETTINGS:
                FILTERS[obj.name] = obj


_discover()


def _instances(cfg: ChainConfig, fitted: bool) -> list[Filter]:
    out = []
    for name, settings in cfg.items():
        if not settings.enabled:
            continue
        if name not in FILTERS:
            raise KeyError(f"filter {name!r} has settings but no registered class (call register_filter)")
        cls = FILTERS[name]
        if cls.fitted == fitted:
            out.append(cls(settings, cfg))
    return out


def build_chain(cfg: ChainConfig) -> list[Filter]:
    """The enabled streaming filters of a chain, in chain order (fitted filters excluded)."""
    return _instances(cfg, fitted=False)


def fitted_filters(cfg: ChainConfig) -> list[Filter]:
    """The enabled fitted filters (perplexity): run after the streaming ones, on what they kept."""
    return _instances(cfg, fitted=True)
