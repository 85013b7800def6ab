"""`moelab export CKPT OUT`, `moelab import HF_DIR OUT_RUN`, `moelab generate CKPT --prompt ...`:
the model leaves moelab (a checked Hugging Face folder), comes back, and speaks."""

from __future__ import annotations

import json
import sys

import typer

BIAS_OPT = typer.Option("average", "--bias", help="Router bias eval routing selects with: average (the trainer's "
                        "moving average, what eval mode uses) or live (the bias as last updated).")


def _fail(exc: Exception, code: int = 1) -> None:
    typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=code) from None


def register(app: typer.Typer) -> None:
    @app.command("export")
    def export_cmd(
        ckpt: str = typer.Argument(..., help="A run folder (its newest checkpoint) or a checkpoints/step_* folder."),
        out: str = typer.Argument(..., help="The Hugging Face model folder to write."),
        bias: str = BIAS_OPT,
        overwrite: bool = typer.Option(False, "--overwrite", help="Replace OUT if it exists."),
        greedy_tokens: int = typer.Option(16, "--greedy-tokens", min=1, help="Tokens of the greedy round-trip check."),
    ) -> None:
        """Write CKPT as a Hugging Face model (GLM-4-MoE, DeepSeek-V3 or Llama layout) and check it: logits of
        moelab and of transformers' from_pretrained(OUT) within 1e-4, greedy continuations equal."""
        from services.exporter.export import ExportError, export_checkpoint
        from services.exporter.mapping import ExportRefused
        from services.exporter.roundtrip import RoundTripFailed
        from shared.checkpoint import CheckpointError

        if bias not in ("average", "live"):
            _fail(ValueError(f"--bias must be average or live, got {bias!r}"), code=2)
        try:
            result = export_checkpoint(ckpt, out, bias=bias, overwrite=overwrite, greedy_tokens=greedy_tokens)
        except (CheckpointError, ExportError, ExportRefused, RoundTripFailed) as exc:
            _fail(exc)
        c = result.check
        typer.echo(f"exported {result.checkpoint} → {result.out} as {result.architecture.name} "
                   f"(router bias: {result.bias})")
        typer.echo(f"round trip: max |Δlogit| {c.max_abs_logit_diff:.3g} on a {c.batch[0]}×{c.batch[1]} batch, "
                   f"greedy {c.greedy_tokens} tokens equal: {c.greedy_equal}")
        typer.echo(json.dumps({"out": str(result.out), "architecture": result.architecture.name, **c.figures()}))

    @app.command("import")
    def import_cmd(
        hf_dir: str = typer.Argument(..., help="A folder written by `moelab export`, or a compatible GLM-4-MoE, "
                                     "DeepSeek-V3 or Llama folder (e.g. saved by transformers)."),
        out_run: str = typer.Argument(..., help="The moelab run folder to write (config.yaml, checkpoints/, tokenizer/)."),
        overwrite: bool = typer.Option(False, "--overwrite", help="Replace OUT_RUN if it exists."),
    ) -> None:
        """Read an HF folder into a moelab run folder: an export comes back bit for bit; a third-party folder is
        mapped from its config.json (refusing, by field, what moelab cannot represent) and checked against
        transformers (logits within 1e-4, greedy equal) before anything is written."""
        from services.exporter.importer import ImportRefused, import_hf

        try:
            ckpt = import_hf(hf_dir, out_run, overwrite=overwrite)
        except ImportRefused as exc:
            _fail(exc)
        typer.echo(f"imported {hf_dir} → {ckpt}")

    @app.command("generate")
    def generate_cmd(
        ckpt: str = typer.Argument(..., help="A run folder or a checkpoints/step_* folder."),
        prompt: str = typer.Option(..., "--prompt", "-p", help="Text to continue."),
        max_new_tokens: int = typer.Option(64, "--max-new-tokens", "-n", min=1, help="Tokens to generate at most."),
        temperature: float = typer.Option(0.0, "--temperature", "-t", min=0.0, help="0 = greedy."),
        top_k: int = typer.Option(0, "--top-k", min=0, help="Sample among the k likeliest tokens (0 = all)."),
        top_p: float = typer.Option(1.0, "--top-p", min=0.0, max=1.0, help="Nucleus sampling mass (1 = off)."),
        seed: int = typer.Option(0, "--seed", help="Sampling seed."),
        bias: str = BIAS_OPT,
        stop_at_eos: bool = typer.Option(True, "--stop-at-eos/--no-stop-at-eos", help="Stop at the separator token."),
    ) -> None:
        """Continue PROMPT with the trained model (KV cache for GQA and MLA), streaming; tokens/s at the end."""
        from shared.checkpoint import CheckpointError, load_trained_model
        from shared.model.generate import SamplingConfig, generate

        try:
            trained = load_trained_model(ckpt, bias=bias, require_tokenizer=True)
            tok = trained.require_tokenizer()
            sampling = SamplingConfig(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                                      seed=seed, stop_token=tok.eos_id if stop_at_eos else None)
        except (CheckpointError, ValueError) as exc:
            _fail(exc)
        ids = tok.encode(prompt)
        shown = [""]
        new: list[int] = []

        def stream(token: int) -> None:
            new.append(token)
            text = tok.decode(new)
            if not text.endswith("\ufffd"):  # hold back a partial UTF-8 character until it completes
                sys.stdout.write(text[len(shown[0]):])
                sys.stdout.flush()
                shown[0] = text

        sys.stdout.write(prompt)
        try:
            out = generate(trained.model, ids, sampling, on_token=stream)
        except ValueError as exc:
            _fail(exc)
        sys.stdout.write(tok.decode(new)[len(shown[0]):] + "\n")
        how = "KV cache" if out.cached else f"no cache for {', '.join(out.uncached_kinds)}: recomputed every token"
        typer.secho(f"{len(out.tokens)} tokens in {out.seconds:.2f} s, {out.tokens_per_second:.1f} tokens/s ({how})",
                    err=True, fg=typer.colors.CYAN)
