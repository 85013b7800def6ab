"""Expert-parallel all-to-all overlap (`train.ep_overlap`): step time off vs on, 2 gloo processes.

Overlapping the expert all-to-all with computation is an option, not the default, because what it
hides depends on how long the exchange is next to the compute; this measures it. Two workloads, each timed with overlap off and on in the same run, with EP = 2
over 2 spawned processes (gloo, FSDP2 for the rest, as `moelab train` runs it):

* step: full training steps of `configs/tiny.yaml` (d 64, 3 MoE layers of 8 experts × 64, top-2,
  1 shared; 8 × 128 tokens per rank): forward, LM + aux loss, backward, `finish_gradients`, the
  project's optimizer (Muon + AdamW), router-bias update — the loop's own pieces, random tokens;
* layer: one MoE layer forward + backward at a size where the exchange is visible (default d 512,
  32 experts × 128, top-8, 1 shared, 2,048 tokens per rank: 16,384 rows of 2 KB each way).

A control variant, `halves`, runs the overlapped code with every all-to-all waited for at once:
the same two halves and collectives with nothing in flight, so `halves / overlap` isolates the
overlap from the effect of splitting the batch. The variants rotate (the order changes every
round) so machine load hits all alike; each round's time is the slower rank's; figures are
medians over rounds after warm-up. Also reported: `blocked_s` — time spent waiting on the
all-to-alls per call (for `halves` the whole exchange, including waiting for the slower rank;
for `overlap` what it failed to hide) — and `a2a_s`, one bare synchronous all-to-all of all of a
layer's rows (a layer makes 4: dispatch and combine, forward and backward).

    .venv/bin/python benchmarks/ep_overlap.py           # both workloads, 15 rounds each
    .venv/bin/python benchmarks/ep_overlap.py --quick   # a small smoke run

Last line: JSON with `step_s_no_overlap`, `step_s_overlap`, `ratio` (= no_overlap / overlap; > 1
means the overlap helps), `step_s_halves` and `step_ratio_vs_halves` (halves / overlap: the gain
of the overlap itself, splitting aside), blocked seconds, and the same for `layer_*`
(`layer_ratio`).
"""

from __future__ import annotations

import sys
from pathlib import Path

# benchmarks/ holds a tokenize.py that would shadow the standard library's `tokenize` (which torch
# imports); run with the repo root on the path instead of this folder.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from benchmarks.result_file import save_cpu_result  # noqa: E402
from shared.kernels.blas_probe import machine_report  # noqa: E402
from shared.net import free_port  # noqa: E402

REPO = _HERE.parent
TINY = REPO / "configs" / "tiny.yaml"
EP = 2


def _train_step(overlap: bool, rank: int, args) -> Callable[[], None]:
    """One training step of the tiny config, as `services.trainer.loop` runs it."""
    import torch.nn.functional as F

    from services.trainer.parallel import finish_gradients, parallelize, sync_router_loads
    from shared.config import load_config
    from shared.model import MoETransformer
    from shared.optim import build_optimizer

    cfg = load_config(TINY, [f"train.workers={EP}", f"train.dp_size={EP}", f"train.ep_size={EP}",
                             f"train.ep_overlap={str(overlap).lower()}", f"train.seq_len={args.seq}",
                             f"train.micro_batch_size={args.batch}", "tracker.mode=disabled"])
    torch.manual_seed(cfg.train.seed)
    model = parallelize(MoETransformer(cfg.model), cfg.train, rank, EP)
    optimizer = build_optimizer(model, cfg.optim, 10_000)
    g = torch.Generator().manual_seed(1000 + rank)
    tokens = torch.randint(0, cfg.model.vocab_size, (args.batch, args.seq + 1), generator=g)

    def step() -> None:
        logits, aux = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        (loss + aux["aux_loss"]).backward()
        finish_gradients(model, cfg.train, EP)
        optimizer.step()
        optimizer.zero_grad()
        sync_router_loads(model)
        model.update_router_biases()

    return step


def _layer_step(overlap: bool, rank: int, args, group) -> Callable[[], None]:
    """One MoE layer forward + backward with its routed experts split over the EP group."""
    from services.trainer.expert_parallel import expert_parallel_layer
    from shared.config.model import MoEConfig
    from shared.model.moe import MoELayer

    cfg = MoEConfig(n_routed_experts=args.experts, n_shared_experts=1, expert_hidden=args.hidden, top_k=args.top_k)
    torch.manual_seed(0)
    layer = expert_parallel_layer(MoELayer(args.d_model, cfg), group, rank, EP, overlap)
    g = torch.Generator().manual_seed(2000 + rank)
    x = torch.randn(1, args.tokens, args.d_model, generator=g, requires_grad=True)
    probe = torch.randn(1, args.tokens, args.d_model, generator=g)

    def step() -> None:
        y, stats = layer(x)
        ((y * probe).sum() + stats["aux_loss"]).backward()
        layer.zero_grad(set_to_none=True)
        x.grad = None
        layer.load_accum_E.zero_()

    return step


def _slowest_rank(seconds: float) -> float:
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


VARIANTS = ("no_overlap", "halves", "overlap")


def _time(build: Callable[[bool], Callable[[], None]], args) -> tuple[dict[str, float], dict[str, float]]:
    """Median seconds per call of each variant (interleaved, order rotated every round), and the
    median seconds the split variants spent blocked on their all-to-alls per call.

    no_overlap: the plain EP layer. overlap: `ep_overlap`. halves: the overlap model with every
    all-to-all waited for at once (`_AsyncAllToAll.wait_at_once`): the same two halves and the
    same collectives, nothing in flight during compute; its blocked time is the whole exchange.
    """
    from services.trainer.expert_parallel import _AsyncAllToAll

    plain, split = build(False), build(True)
    fns = {"no_overlap": plain, "halves": split, "overlap": split}

    def call(name: str) -> tuple[float, float]:
        _AsyncAllToAll.wait_at_once = name == "halves"
        dist.barrier()
        b0, t0 = _AsyncAllToAll.blocked_s, time.perf_counter()
        try:
            fns[name]()
        finally:
            _AsyncAllToAll.wait_at_once = False
        return _slowest_rank(time.perf_counter() - t0), _slowest_rank(_AsyncAllToAll.blocked_s - b0)

    for _ in range(args.warmup):
        for name in VARIANTS:
            call(name)
    times: dict[str, list[float]] = {k: [] for k in VARIANTS}
    blocked: dict[str, list[float]] = {k: [] for k in VARIANTS[1:]}
    for r in range(args.rounds):
        for name in VARIANTS[r % 3:] + VARIANTS[:r % 3]:
            seconds, waited = call(name)
            times[name].append(seconds)
            if name in blocked:
                blocked[name].append(waited)
    return ({k: statistics.median(v) for k, v in times.items()}, {k: statistics.median(v) for k, v in blocked.items()})


def _a2a_seconds(rows: int, d_model: int, group, rounds: int) -> float:
    """One synchronous all-to-all of `rows` rows of width d (half stay on this rank)."""
    x = torch.randn(rows, d_model)
    out = torch.empty_like(x)
    times = []
    for _ in range(rounds):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_to_all_single(out, x, group=group)
        times.append(_slowest_rank(time.perf_counter() - t0))
    return statistics.median(times)


def _worker(rank: int, port: int, args, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=EP)
    try:
        result = {}
        group = dist.new_group(list(range(EP)))
        for name in args.workloads:
            if name == "step":
                secs, blocked = _time(lambda o: _train_step(o, rank, args), args)
                a2a = _a2a_seconds(args.batch * args.seq * 2, 64, group, args.rounds)  # tiny: top-2, d 64
            else:
                secs, blocked = _time(lambda o: _layer_step(o, rank, args, group), args)
                a2a = _a2a_seconds(args.tokens * args.top_k, args.d_model, group, args.rounds)
            result.update({f"{name}_s_{k}": v for k, v in secs.items()})
            result[f"{name}_blocked_s_halves"], result[f"{name}_blocked_s_overlap"] = blocked["halves"], blocked["overlap"]
            result[f"{name}_a2a_s"] = a2a
            result["ratio" if name == "step" else "layer_ratio"] = secs["no_overlap"] / secs["overlap"]
            result[f"{name}_ratio_vs_halves"] = secs["halves"] / secs["overlap"]
        if rank == 0:
            queue.put(result)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small shapes, few rounds (smoke test)")
    p.add_argument("--workloads", default="step,layer", help="comma-separated: step, layer")
    p.add_argument("--seq", type=int, default=128, help="step: tokens per sequence")
    p.add_argument("--batch", type=int, default=8, help="step: sequences per rank")
    p.add_argument("--d-model", type=int, default=512, help="layer: model width")
    p.add_argument("--experts", type=int, default=32, help="layer: routed experts")
    p.add_argument("--hidden", type=int, default=128, help="layer: expert width")
    p.add_argument("--top-k", type=int, default=8, help="layer: experts per token")
    p.add_argument("--tokens", type=int, default=2048, help="layer: tokens per rank")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=15, help="timed calls per variant (median reported)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads per process (2 processes share the cores)")
    p.add_argument("--out", type=Path, default=None,
                   help="result JSON (default: benchmarks/results/ep_overlap.<native|avx2>.json; none with --quick)")
    args = p.parse_args()
    if args.quick:
        args.seq, args.batch, args.tokens, args.d_model, args.hidden, args.experts = 32, 2, 256, 128, 64, 8
        args.top_k, args.warmup, args.rounds = 2, 1, 3
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if not set(args.workloads) <= {"step", "layer"}:
        p.error(f"--workloads: unknown {sorted(set(args.workloads) - {'step', 'layer'})}; use step and/or layer")

    port = free_port()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, port, args, queue)) for r in range(EP)]
    for proc in procs:
        proc.start()
    result = None
    while result is None:
        try:
            result = queue.get(timeout=1)
        except Exception:  # queue.Empty: keep waiting unless a worker died
            if any(proc.exitcode not in (None, 0) for proc in procs):
                sys.exit(f"a worker failed (exit codes {[proc.exitcode for proc in procs]})")
    for proc in procs:
        proc.join()

    print(f"EP={EP} over 2 gloo processes, {args.threads} torch thread(s) each, median of {args.rounds} rounds;"
          " blocked = time spent waiting on all-to-alls")
    shapes = {"step": f"tiny, {args.batch}x{args.seq} tokens/rank, 3 MoE layers",
              "layer": f"d {args.d_model}, {args.experts}x{args.hidden}, top-{args.top_k}, {args.tokens} tokens/rank"}
    for name in args.workloads:
        r = {k[len(name) + 1:]: v for k, v in result.items() if k.startswith(name + "_")}
        print(f"{name:5s} ({shapes[name]}): no overlap {r['s_no_overlap'] * 1e3:7.1f} ms | halves, waited at once"
              f" {r['s_halves'] * 1e3:7.1f} ms (blocked {r['blocked_s_halves'] * 1e3:.1f}) | overlap"
              f" {r['s_overlap'] * 1e3:7.1f} ms (blocked {r['blocked_s_overlap'] * 1e3:.1f}) |"
              f" ratio {r['s_no_overlap'] / r['s_overlap']:.3f}, vs halves {r['ratio_vs_halves']:.3f} |"
              f" one bare a2a of all rows {r['a2a_s'] * 1e3:.2f} ms")
    summary = {**result, "threads": args.threads, "rounds": args.rounds, "quick": args.quick,
               "machine": machine_report()}
    save_cpu_result("ep_overlap", args.out, args.quick, summary)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
