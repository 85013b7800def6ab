"""`moelab data tokenize|mixture-stats`: build token shards and inspect a mixture before training."""

from __future__ import annotations

import json

import typer

from moelab.commands.common import CONFIG_ARG, OVERRIDES_ARG, load_or_exit


def _fail(exc: Exception) -> None:
    typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=1) from None


def format_build(manifest: dict) -> str:
    lines = [f"{'source':<16}{'shards':>8}{'docs':>12}{'tokens':>16}"]
    for name, s in manifest["sources"].items():
        lines.append(f"{name:<16}{s['shards']:>8}{s['docs']:>12,}{s['tokens']:>16,}")
    lines.append(f"{'total':<16}{len(manifest['shards']):>8}{manifest['docs']:>12,}{manifest['tokens']:>16,}")
    b, t = manifest["build"], manifest["tokenizer"]
    lines.append(f"tokenizer {t['hash'][:12]}… vocab {t['vocab_size']} ({t['dtype']}), separator {t['eos_token']!r}")
    lines.append(f"items built {b['items_built']}, skipped (already done) {b['items_skipped']}, {b['seconds']:.1f}s")
    skipped = ", ".join(f"{k}={v}" for k, v in manifest["skipped"].items()) or "none"
    lines.append(f"rows skipped: {skipped}")
    return "\n".join(lines)


def format_stats(stats: dict) -> str:
    lines = [f"{'source':<16}{'target':>8}{'realised':>10}{'tokens':>16}{'epochs':>9}"]
    for name, s in stats["sources"].items():
        lines.append(
            f"{name:<16}{s['target_rate']:>8.4f}{s['rate']:>10.4f}{s['tokens']:>16,}{s['epochs']:>9.3f}"
        )
    lines.append(
        f"{stats['sequences']:,} sequences × {stats['seq_len']} = {stats['tokens']:,} tokens "
        f"(budget {stats['budget_tokens']:,}, on_exhausted={stats['on_exhausted']})"
    )
    lines.append(
        f"worst prefix deviation (n ≥ {stats['min_prefix']}): {100 * stats['worst_prefix_deviation']:.3f} "
        f"percentage points; worst count deviation {stats['worst_count_deviation']:.3f} sequences"
    )
    for name, s in stats["sources"].items():
        if s["epochs"] > 1:
            lines.append(f"note: source {name!r} is repeated: {s['epochs']:.2f} epochs (new shuffle each epoch)")
    if stats["unused_sources"]:
        lines.append(f"note: sources with shards but no rate (unused): {stats['unused_sources']}")
    if stats["stopped"]:
        lines.append(f"stopped early: {stats['stopped']}")
    return "\n".join(lines)


def register_data(group: typer.Typer) -> None:
    @group.command("tokenize")
    def tokenize(
        config: str = CONFIG_ARG,
        overrides: list[str] = OVERRIDES_ARG,
        verify: bool = typer.Option(False, "--verify", help="Recheck finished shards' sha256 and rebuild bad ones."),
    ) -> None:
        """Train or load the tokenizer, then build token shards (Ray Data) and their manifest."""
        from shared.data.prepare import tokenize as run
        from shared.data.shards import ShardError
        from shared.data.tokenizer import TokenizerError

        cfg = load_or_exit(config, overrides)
        try:
            manifest = run(cfg, verify=verify)
        except (ShardError, TokenizerError) as exc:
            _fail(exc)
        typer.echo(format_build(manifest))
        typer.echo(f"wrote {cfg.mixture.shard_dir}/manifest.json")

    @group.command("mixture-stats")
    def mixture_stats(
        config: str = CONFIG_ARG,
        overrides: list[str] = OVERRIDES_ARG,
        budget: int = typer.Option(..., "--budget", min=1, help="Token budget of the run, e.g. 100000000."),
        min_prefix: int = typer.Option(100, "--min-prefix", min=1, help="Shortest prefix (sequences) for the deviation."),
        as_json: bool = typer.Option(False, "--json", help="Print the stats as one JSON line (only that, for scripts)."),
    ) -> None:
        """Realised tokens and epochs per source and the worst prefix deviation for a token budget."""
        from shared.data.mixture import simulate
        from shared.data.prepare import open_mixture
        from shared.data.shards import ShardError

        cfg = load_or_exit(config, overrides)
        try:
            stats = simulate(open_mixture(cfg), budget, min_prefix=min_prefix)
        except ShardError as exc:
            _fail(exc)
        typer.echo(json.dumps(stats) if as_json else format_stats(stats))
