"""What the benchmarks page knows about each benchmark beyond its result files (data only).

scripts/benchmarks_page.py renders any result without an entry here; an entry adds what a file
cannot say about itself: what the benchmark measures and which guide explains it (`WHAT` for the
CPU runs at the top of the results folder, `GPU_WHAT` per GPU step file: a GPU run of the same
script measures another shape, dtype and contenders), which ratios compare ours with ours rather
than with a peer (`SELF_RATIOS`), the
command of a result that was not the default run (`COMMANDS`, applied only while the file still
holds what that run wrote), and the figures shown beside the ratio keys (`HEADLINE`).
"""

from __future__ import annotations

from typing import Any

# What each benchmark measures and which guide explains its figures.
WHAT: dict[str, tuple[str, str]] = {
    "moe_layer": ("one MoE layer fwd+bwd (d 512, 64 experts × 128, top-8, 4,096 tokens, fp32) vs HF "
                  "`DeepseekV3MoE` (its fastest experts implementation) and torchtitan `MoE`", "moe.md"),
    "train_step": ("one training step (fwd+bwd+AdamW) of a tiny MLA MoE, fp32, vs HF `DeepseekV3ForCausalLM` "
                   "and torchtitan `DeepSeekV3Model`", "train_step.md"),
    "lm_head_loss": ("the LM head + cross-entropy fwd+bwd: moelab's fused row blocks vs the plain "
                     "`F.cross_entropy(F.linear(h, W), y)` every PyTorch model runs", "train_step.md"),
    "router_balance": ("router balance at small batch on `configs/tiny.yaml`: MaxVio and eval loss per arm, "
                       "one change per arm", "moe.md"),
    "precision_gap": ("the tiny recipe in bf16 vs emulated fp8/nvfp4 experts, with and without the stability "
                      "recipe, against a second bf16 initialisation", "precision.md"),
    "data_filter": ("the filter rules and the whole filter stage on 6,000 real documents vs datatrove 0.10",
                    "data_filter.md"),
    "data_quality": ("a planted corpus (real text in many languages, code, planted garbage): removed per "
                     "planted kind, clean kept per source and language, near-dup curve, F1", "data_filter.md"),
    "demo_filter": ("the demo's filter stage as `make demo` runs it: funnel per source, planted problems removed",
                    "data_filter.md"),
    "scorer": ("early-exit cascade vs Judge-only vs Probe-only on unseen documents: FLOPs saved, keeper loss, false keeps",
               "scorer.md"),
    "scorer_pairs": ("clean document vs its degraded copy, per degradation kind: oracle, Probe, Judge, cascade",
                     "scorer.md"),
    "tracker": ("8 clients × 20k points ingest and a 1M-point series query vs an MLflow server (SQLite)",
                "tracker.md"),
    "attention": ("fwd+bwd per attention variant over T = 512…4096; fitted exponents of time in T",
                  "attention.md"),
    "cpu_gemm": ("one expert's fp32 GEMMs in every orientation: MKL vs oneDNN vs the autotuned choice", "moe.md"),
    "expert_fusion": ("the routed path fwd+bwd fused vs unfused over a grid of shapes, and whether the autotuner's "
                      "cached choice and the fixed rules pick the fastest way, graded on later timings",
                      "moe.md"),
    "tokenize": ("token-shard building (Ray Data and in process) vs the tokenizer's raw batch encode", "data.md"),
    "ep_overlap": ("the expert all-to-all overlapped with compute vs not, 2 gloo processes", "trainer.md"),
    "gpu_backbone": ("the scorer backbone in bf16 on a GPU (scripts/gpu_checks.sh)", "gpu-checks.md"),
    "gpu_fp8": ("native fp8 vs bf16 tokens/s and loss on a GPU (scripts/gpu_checks.sh)", "gpu-checks.md"),
    "gpu_fp8_experts": ("fp8 expert GEMMs and SwiGLU fwd+bwd (ours ragged, ours block, torchao) vs bf16, and their "
                        "memory, on a GPU (scripts/gpu_checks.sh)", "precision.md"),
    "doctor": ("`moelab doctor`: versions and measured matmul, copy and all-reduce peaks", "doctor.md"),
    "gpu_checks": ("every step of scripts/gpu_checks.sh: exit status and seconds", "gpu-checks.md"),
    "gpu_train_step": ("a 1–2B proxy training step in bf16 vs HF on a GPU (scripts/gpu_checks.sh)", "gpu-checks.md"),
}

# What each GPU step file of scripts/gpu_checks.sh measures (by file stem), and its guide.
GPU_WHAT: dict[str, tuple[str, str]] = {
    "moe_layer": ("one MoE layer fwd+bwd on the GPU (d 2560, 64 experts × 512, top-8, 2 shared, 16,384 tokens, "
                  "bf16): our `grouped_mm` and Triton backends over our own per-expert loop", "gpu-checks.md"),
    "train_step": ("a 1.56B proxy training step (bf16 weights, and the recipes' fp32 weights under bf16 autocast) "
                   "vs HF `DeepseekV3ForCausalLM` on the GPU", "gpu-checks.md"),
    "fp8": ("native fp8 experts (row, block scales) vs bf16 on the GPU: tokens/s and loss after 50 steps", "gpu-checks.md"),
    "backbone": ("the scorer backbone in bf16 vs fp32 on the GPU", "gpu-checks.md"),
    "doctor": ("`moelab doctor --json` on the GPU machine", "doctor.md"),
    "summary": ("every step of scripts/gpu_checks.sh: exit status and seconds", "gpu-checks.md"),
}
# Ratios that compare two of our own paths, not ours with a peer: (benchmark, or `gpu:<step>`) ->
# what over what. The page marks them so no one reads them as a lead over another project.
SELF_RATIOS: dict[str, str] = {
    "attention": "each attention variant over our own full attention",
    "expert_fusion": "the fixed rules' pick over the autotuner's pick, both ours",
    "ep_overlap": "our overlapped all-to-all over our own non-overlapped one",
    "tokenize": "our shard building over our own in-process path",
    "scorer": "our early-exit cascade over our own Judge alone",
    "gpu:moe_layer": "our grouped_mm / Triton backends over our own per-expert loop",
    "gpu:backbone": "bf16 over fp32, the same backbone",
    "gpu:fp8": "our fp8 experts over our own bf16 run",
}

# Results whose command is not the benchmark's default run (path relative to benchmarks/results):
# (command, note, what the file must hold for the entry to apply). The condition keeps an entry from
# describing a rerun made another way: a file that no longer matches gets the default rule.
COMMANDS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "precision_gap.json": ("python benchmarks/precision_gap.py --tune-lr", "", {"steps": 3000}),
    "precision_gap_first_harness_steps200.json": (
        "python benchmarks/precision_gap.py",
        "Written by the benchmark's first harness, whose default was this run (the tiny recipe, 200 steps of "
        "8 × 128 tokens, 1 thread); the harness has since moved to the real trainer at 3,000 steps, so today's "
        "command measures something else.", {"steps": 200, "tokens_per_step": 1024}),
    "precision_gap_steps200_b4x64.json": (
        "python benchmarks/precision_gap.py --steps 200 --batch 4 --seq 64",
        "The first harness at 4 × 64 tokens per step; its `--batch` and `--seq` options no longer exist.",
        {"steps": 200, "tokens_per_step": 256}),
    "router_balance_frozen.json": (
        "python benchmarks/router_balance.py --seeds {seeds} --out benchmarks/results/router_balance_frozen.json "
        "--arm recipe_16x1= --arm recipe_per_step=model.moe.balance.bias_update_every=step --arm "
        "recipe_gamma_1e-2=model.moe.balance.bias_update_rate=0.01 --arm recipe_per_step_gamma_1e-1="
        "model.moe.balance.bias_update_every=step,model.moe.balance.bias_update_rate=0.1",
        "The tiny recipe's bias cadence and step size, ranked by the frozen router (docs/moe.md).", {"seeds": 4}),
    "router_balance_arms.json": (
        "python benchmarks/router_balance.py --arm recipe= --first-seed 2 --seeds 2 --calibrate --workers 2 "
        "--out benchmarks/results/router_balance_arms.json",
        "The tiny recipe, seeds 2 and 3, each final model frozen and calibrated (seeds 0 and 1: "
        "benchmarks/results/router_calibration/).", {"first_seed": 2, "seeds": 2}),
    "router_balance_arms_s2.json": (
        "python benchmarks/router_balance.py --arm bias_window_65k=model.moe.balance.bias_update_window_tokens=65536 "
        "--arm router_cooldown_0.15=model.moe.balance.router_lr_cooldown=0.15 --arm "
        "seq_alpha_1e-3=model.moe.balance.seq_aux_alpha=0.001 --first-seed 2 --seeds 1 --calibrate --workers 3 "
        "--out benchmarks/results/router_balance_arms_s2.json",
        "The training-time arms of docs/moe.md, seed 2, each calibrated.", {"first_seed": 2, "seeds": 1}),
    "router_balance_arms_ranked.json": (
        "python benchmarks/router_balance.py --arms frozen --first-seed 2 --seeds 1 --calibrate --reuse "
        "benchmarks/results/router_balance_arms.json --reuse benchmarks/results/router_balance_arms_s2.json "
        "--out benchmarks/results/router_balance_arms_ranked.json",
        "No training: the runs of the two files above, paired with the recipe by seed and ranked.",
        {"first_seed": 2, "seeds": 1}),
    "router_balance_arms_s3.json": (
        "python benchmarks/router_balance.py --arm bias_window_65k=model.moe.balance.bias_update_window_tokens=65536 "
        "--arm router_cooldown_0.15=model.moe.balance.router_lr_cooldown=0.15 --arm "
        "seq_alpha_1e-3=model.moe.balance.seq_aux_alpha=0.001 --first-seed 3 --seeds 1 --calibrate --workers 3 "
        "--out benchmarks/results/router_balance_arms_s3.json",
        "The training-time arms of docs/moe.md, seed 3, each calibrated.", {"first_seed": 3, "seeds": 1}),
    "router_balance_arms_ranked_s23.json": (
        "python benchmarks/router_balance.py --arms frozen --first-seed 2 --seeds 2 --calibrate --reuse "
        "benchmarks/results/router_balance_arms.json --reuse benchmarks/results/router_balance_arms_s2.json --reuse "
        "benchmarks/results/router_balance_arms_s3.json --out benchmarks/results/router_balance_arms_ranked_s23.json",
        "No training: seeds 2 and 3 of the recipe and the three arms, paired by seed and ranked.",
        {"first_seed": 2, "seeds": 2}),
    "scorer.json": ("python benchmarks/scorer.py --unseen {docs}", "", {"quick": False}),
    "scorer_pairs.json": ("python benchmarks/scorer_pairs.py --per-group 30", "", {"pairs_per_kind.order": 60}),
    "scorer_probe_layers.json": ("python benchmarks/scorer.py --probe-layers 1,2,3 --unseen {docs}", "", {"judge_layer": 4}),
    "scorer_draws.json": ("python benchmarks/scorer.py --draws {n_draws} --unseen {docs}", "", {"quick": False}),
    "scorer_draws_calibration3000.json": (
        "python benchmarks/scorer.py --draws {n_draws} --unseen {docs} --out "
        "benchmarks/results/scorer_draws_calibration3000.json scorer.calibration.sample_size=3000",
        "The same draws with twice the demo's calibration sample: not the recipe, which keeps 1,500.",
        {"quick": False}),
}
# Results in a folder of their own; `{key}` is filled from the file's top-level keys.
DIR_COMMANDS: dict[str, tuple[str, str]] = {
    "router_balance": (
        "python benchmarks/router_balance.py --recipe {recipe} --steps {steps} --seeds {seeds} --arm NAME=OVERRIDES …",
        "One `--arm` per arm; these rounds did not record their overrides: "
        "[router_balance/README.md](../benchmarks/results/router_balance/README.md) decodes the arm names."),
}
HEADLINE: dict[str, tuple[str, ...]] = {  # figures shown beside the ratio keys (dotted paths)
    "precision_gap": ("fp8_gap", "nvfp4_gap", "fp8_gap_no_recipe", "nvfp4_gap_no_recipe", "bf16_seed_spread",
                      "bf16_seed_spread_no_recipe"),
    "data_quality": ("f1", "precision", "recall", "clean_kept_min", "near_dup_max_abs_diff", "removed_by_kind"),
    "data_filter": ("agreement",),
    "demo_filter": ("seconds", "records", "written"),
    "scorer": ("flops_saved", "keeper_loss", "keeper_loss_p90", "false_keep", "actor_scaling",
               # scorer_draws.json (--draws): the same, pooled over independent draws
               "flops_saved_mean", "flops_saved_min", "keeper_loss_pooled", "false_keep_pooled",
               "judge_over_probe_over_length"),
    "scorer_pairs": ("accuracy.judge", "accuracy.cascade"),
    "tracker": ("query_ms", "targets_met"),
    "router_balance": ("steps", "seeds"),
    "attention": ("full_exponent", "swa_exponent", "kda_exponent"),
    "expert_fusion": ("rules_right", "tuned_right", "measured_right", "shapes"),
    "tokenize": ("overhead", "local_overhead"),
}
# Results of scripts/gpu_checks.sh, committed under benchmarks/results/gpu/<run>/ (docs/gpu-checks.md):
# step file stem -> (the benchmark it is, the command that step runs).
GPU_STEPS: dict[str, tuple[str, str]] = {
    "doctor": ("doctor", "moelab doctor --json"),
    "moe_layer": ("moe_layer", "python benchmarks/moe_layer.py --gpu --repeats 10"),
    "train_step": ("gpu_train_step", "python benchmarks/gpu_train_step.py"),
    "fp8": ("gpu_fp8", "python benchmarks/gpu_fp8.py"),
    "fp8_experts": ("gpu_fp8_experts", "python benchmarks/gpu_fp8_experts.py"),
    "backbone": ("gpu_backbone", "python benchmarks/gpu_backbone.py"),
    "summary": ("gpu_checks", "bash scripts/gpu_checks.sh"),
}
