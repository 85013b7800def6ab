"""`moelab export` on the GPU machine: a small GPU-proxy checkpoint made on the device, exported and imported back.

Why: the export's round-trip check (logits of moelab and of transformers' `from_pretrained(OUT)` within
1e-4, greedy continuations equal) must pass for a checkpoint written where the training happens, by
the same unchanged commands. The trainer step's own checkpoint is not used by default: at the
proxy-7b2a-h100 shape (4.86B parameters) an fp32 export and its round trip take far longer than this
step's minute, and the trainer step deletes its run. So this step trains nothing: it builds the
proxy-7b2a-h100 recipe's layer kinds (GQA, one dense layer then MoE, 64 routed experts top-8 in 8
groups of which 4 are chosen, 2 shared, sigmoid router, muP) at a small width on the device, sets
the routers' live and averaged biases apart (an export that drops or mixes them fails the check),
saves it with the trainer's `CheckpointManager`, then runs `moelab export RUN OUT` and
`moelab import OUT RUN2` and compares the imported tensors with the saved ones bit for bit.
`--checkpoint` exports an existing run or `step_*` folder instead.

Without CUDA the same happens on the CPU, so tests/scripts keeps the step working between GPU sessions.

    python scripts/gpu/export_run.py --out $OUT/export.json      # last line: the JSON
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from pydoc_data.topics import topics

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
RECIPE = "configs/proxy-7b2a-h100.yaml"
VOCAB = 512
SMALL = ["model.n_layers=3", "model.d_model=128", "model.n_heads=4", "model.n_kv_heads=2",
         f"model.vocab_size={VOCAB}", "model.max_seq_len=128", "model.moe.expert_hidden=32",
         "train.seq_len=128", "tracker.mode=disabled"]


def make_checkpoint(root: Path, device: torch.device) -> Path:
    """A run folder (config.yaml, tokenizer, one checkpoint) of the small GPU proxy, written from `device`."""
    from services.trainer.checkpoint import CheckpointManager
    from shared.config import load_config, save_resolved
    from shared.data.tokenizer import train_tokenizer
    from shared.model import MoETransformer

    tok = root / "tokenizer"
    train_tokenizer([t for _, t in sorted(topics.items())][:120], tok, vocab_size=VOCAB)
    cfg = load_config(str(REPO / RECIPE), [*SMALL, f"train.out_dir={root}", "train.run_name=proxy",
                                           f"mixture.tokenizer.out_dir={tok}", f"mixture.tokenizer.vocab_size={VOCAB}"])
    run = root / "proxy"
    save_resolved(cfg, run)
    torch.manual_seed(0)
    model = MoETransformer(cfg.model).to(device)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in model.moe_layers():
            n = layer.router.expert_bias_E.numel()
            layer.router.expert_bias_E.copy_(torch.randn(n, generator=gen) * 0.5)
            layer.router.expert_bias_avg_E.copy_(torch.randn(n, generator=gen) * 0.5)
    CheckpointManager(run / "checkpoints", keep_last=1).save(1, model, torch.optim.SGD(model.parameters(), lr=0.0),
                                                             {"note": "gpu export check: untrained"})
    return run


def moelab(*args: str) -> str:
    """Run the `moelab` command line as a user would; its stdout, or SystemExit with its output."""
    cmd = [sys.executable, "-m", "moelab.cli", *args]
    print("$ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True)
    print(proc.stdout + proc.stderr, end="", flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"moelab {args[0]} exited {proc.returncode}")
    return proc.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=None, help="export this run or step_* folder instead of a new small proxy")
    p.add_argument("--greedy-tokens", type=int, default=16, help="tokens of the greedy round-trip check")
    p.add_argument("--work-root", default="/dev/shm" if Path("/dev/shm").is_dir() else None,
                   help="where the run and the exported folders are written, then deleted")
    p.add_argument("--out", default=None, help="also write the JSON here")
    args = p.parse_args()
    from shared.checkpoint import load_trained_model
    from shared.provenance import tree_commit

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    root = Path(tempfile.mkdtemp(prefix="moelab-export-run-", dir=args.work_root))
    try:
        t0 = time.perf_counter()
        run = Path(args.checkpoint) if args.checkpoint else make_checkpoint(root, device)
        made_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        exported = json.loads(moelab("export", str(run), str(root / "hf"), "--greedy-tokens",
                                     str(args.greedy_tokens)).strip().splitlines()[-1])
        export_s = time.perf_counter() - t0
        moelab("import", str(root / "hf"), str(root / "imported"))
        saved = load_trained_model(run).model.state_dict()
        back = load_trained_model(root / "imported").model.state_dict()
        differing = sorted(k for k in saved if k not in back or not torch.equal(saved[k], back[k]))
        result = {
            "benchmark": "gpu_export", "commit": tree_commit(), "config": args.checkpoint or RECIPE,
            "overrides": [] if args.checkpoint else SMALL,
            "checkpoint_device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
            "architecture": exported["architecture"], "max_abs_logit_diff": exported["max_abs_logit_diff"],
            "greedy_equal": exported["greedy_equal"], "import_bitwise_equal": not differing,
            "import_differing": differing[:8], "params": sum(v.numel() for v in saved.values()),
            "make_s": round(made_s, 1), "export_s": round(export_s, 1),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    line = json.dumps(result)
    if args.out:
        tmp = Path(args.out).with_suffix(".tmp")
        tmp.write_text(line + "\n")
        tmp.replace(args.out)
    print(line)
    if differing or not exported["greedy_equal"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
