"""`moelab data …`: one command group fed by the data filter and the token-shard modules."""

from __future__ import annotations

import importlib

import typer

# Each module exposes `register_data(group)`; add one line here when a data command lands.
DATA_MODULES: tuple[str, ...] = (
    "moelab.commands.data_tokens",
    "moelab.commands.data_filter",
)


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Filter documents, build token shards, inspect mixtures.", no_args_is_help=True)
    for name in DATA_MODULES:
        importlib.import_module(name).register_data(group)
    if DATA_MODULES:
        app.add_typer(group, name="data")
