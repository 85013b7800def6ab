"""The `moelab` command line: one Typer app; each topic registers its commands from its own module.

Why a registry of command modules: commands live next to what they drive (trainer, data filter,
tracker, scorer), but services never import each other, so this top-level package is the only
place that knows them all. Command modules keep heavy imports (torch, ray) inside the commands so
that `moelab --help` starts fast.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="moelab",
    help="Train small Mixture-of-Experts LMs and curate their data, on one GPU or a Ray cluster.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

# Each module exposes `register(app)`; add one line here when a topic gets commands.
COMMAND_MODULES = (
    "moelab.commands.config",
    "moelab.commands.doctor",
    "moelab.commands.demo",
    "moelab.commands.data",
    "moelab.commands.precision",
    "moelab.commands.plan",
    "moelab.commands.train",
    "moelab.commands.compare",
    "moelab.commands.hparam",
    "moelab.commands.tracker",
    "moelab.commands.score",
    "moelab.commands.router",
    "moelab.commands.ablate",
    "moelab.commands.eval",
    "moelab.commands.export",
)


def _register_all() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)


_register_all()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
