"""Shard-building throughput vs the tokenizer's own raw batch-encode speed, measured in one run.

Peer: Hugging Face `tokenizers` `Tokenizer.encode_batch_fast` over the same texts, already in
memory, in batches of 2,048 (the same batch size the shard builder uses), nothing written. Ours:
`shared.data.build.build_shards` with Ray Data tasks, from Parquet on disk to `.bin` + `.idx` +
`manifest.json` with sha256 checksums, including planning the Ray Data job and loading the
tokenizer in its workers. Also reported: the same build in this process without Ray
(`local_overhead`). Ray is started and its workers warmed by a no-op Ray Data job before any timing
(a pipeline job already has them running from earlier stages).

    .venv/bin/python benchmarks/tokenize.py            # ~8 MB of text
    .venv/bin/python benchmarks/tokenize.py --quick    # ~1 MB smoke run

Raw encode, Ray build and in-process build run interleaved `--repeats` times (default 3) and the
fastest of each is kept, because the machine may be shared. Last line: one JSON object; `overhead` = raw_tokens_per_s / shard_tokens_per_s − 1
(0.15 = shard building is 15% slower than raw encoding; the target is < 0.20).
"""

from __future__ import annotations

import os
import sys

# This file's name shadows the stdlib `tokenize` module (imported by inspect, linecache, …), so the
# script's own folder leaves sys.path before anything else is imported; the repo root takes its place.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def corpus(megabytes: float) -> list[dict]:
    """Real text that ships with Python: the pydoc topics (prose) and stdlib sources (code)."""
    import json as json_mod
    import pydoc_data.topics as topics

    stdlib = Path(json_mod.__file__).resolve().parent.parent
    files = sorted(p for p in stdlib.rglob("*.py") if "site-packages" not in p.parts)
    rows, size, i = [], 0, 0
    for text in topics.topics.values():
        rows.append({"id": f"doc-{i}", "text": text, "source": "web"})
        size += len(text.encode("utf-8"))
        i += 1
    for path in files:
        if size >= megabytes * 1e6:
            break
        text = path.read_text(encoding="utf-8", errors="replace")
        rows.append({"id": f"code-{i}", "text": text, "source": "code"})
        size += len(text.encode("utf-8"))
        i += 1
    return rows


def write_parquet(rows: list[dict], folder: Path, files: int = 4) -> list[Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = []
    per = math.ceil(len(rows) / files)
    for j in range(files):
        path = folder / f"docs-{j}.parquet"
        pq.write_table(pa.Table.from_pylist(rows[j * per : (j + 1) * per]), path, row_group_size=32)
        paths.append(path)
    return paths


def raw_encode(tok, texts: list[str], batch: int = 2048) -> tuple[int, float]:
    t0 = time.perf_counter()
    n = 0
    for start in range(0, len(texts), batch):
        n += sum(len(e) for e in tok.tokenizer.encode_batch_fast(texts[start : start + batch], add_special_tokens=False))
    return n, time.perf_counter() - t0


def _secs(times: list[float]) -> str:
    return ", ".join(f"{t:.2f}s" for t in times)


def warm_up_ray_data(tasks: int) -> None:
    """Run a no-op Ray Data job so worker processes exist and have imported Ray Data, as they have
    in a pipeline job where an earlier stage (the data filter) already ran; tokenizer loading and
    all of the build are still timed."""
    import ray.data

    ds = ray.data.from_items([{"x": i} for i in range(2 * tasks)], override_num_blocks=2 * tasks)
    ds.map_batches(lambda b: b, batch_size=1, compute=ray.data.TaskPoolStrategy(size=tasks), num_cpus=0.5).take_all()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="~1 MB smoke run")
    ap.add_argument("--mb", type=float, default=None, help="corpus size in MB of UTF-8 text (default 8, quick 1)")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--workers", type=int, default=2, help="concurrent Ray Data tokenization tasks")
    ap.add_argument("--out", type=Path, default=None,
                    help="result JSON (default: benchmarks/results/tokenize.<native|avx2>.json; none with --quick)")
    ap.add_argument("--repeats", type=int, default=None, help="interleaved repetitions, best kept (default 3, quick 1)")
    args = ap.parse_args()
    mb = args.mb if args.mb is not None else (1.0 if args.quick else 8.0)
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)

    import ray

    from shared.data.build import build_shards
    from shared.data.tokenizer import train_tokenizer

    rows = corpus(mb)
    texts = [r["text"] for r in rows]
    with tempfile.TemporaryDirectory(prefix="moelab-bench-tok-") as tmp:
        tmp_path = Path(tmp)
        paths = write_parquet(rows, tmp_path)
        tok = train_tokenizer(texts[:300], tmp_path / "tok", vocab_size=args.vocab)
        if not ray.is_initialized():
            ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, configure_logging=False)
        warm_up_ray_data(args.workers)
        docs_per_shard = max(1, math.ceil(len(rows) / (4 * args.workers)))

        raw_times, ray_times, local_times = [], [], []
        for rep in range(repeats):  # interleaved, best of N: the machine may be shared
            raw_tokens, raw_s = raw_encode(tok, texts)
            raw_times.append(raw_s)
            t0 = time.perf_counter()
            manifest = build_shards(paths, tok, tmp_path / f"ray{rep}", docs_per_shard=docs_per_shard,
                                    workers=args.workers, cpus_per_worker=0.5, progress=False)
            ray_times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            local = build_shards(paths, tok, tmp_path / f"local{rep}", docs_per_shard=docs_per_shard, use_ray=False,
                                 progress=False)
            local_times.append(time.perf_counter() - t0)
        ray.shutdown()

    if manifest["tokens"] != raw_tokens or local["tokens"] != raw_tokens:
        raise SystemExit(f"token counts differ: raw {raw_tokens}, ray {manifest['tokens']}, local {local['tokens']}")
    raw_s, ray_s, local_s = min(raw_times), min(ray_times), min(local_times)
    raw_tps, ray_tps, local_tps = raw_tokens / raw_s, raw_tokens / ray_s, raw_tokens / local_s
    print(f"corpus: {mb:.1f} MB, {len(rows)} docs, {raw_tokens:,} tokens, vocab {args.vocab}, {os.cpu_count()} CPUs")
    print(f"raw encode_batch_fast     : {raw_tps:>10,.0f} tokens/s  ({_secs(raw_times)})")
    print(f"shards, Ray Data ({args.workers} tasks): {ray_tps:>10,.0f} tokens/s  ({_secs(ray_times)}; "
          f"{manifest['build']['items']} items)")
    print(f"shards, in process        : {local_tps:>10,.0f} tokens/s  ({_secs(local_times)})")
    print(f"overhead vs raw: Ray {raw_tps / ray_tps - 1:+.1%}, in process {raw_tps / local_tps - 1:+.1%}")
    from benchmarks.result_file import save_cpu_result
    from shared.kernels.blas_probe import machine_report

    result = {
        "overhead": round(raw_tps / ray_tps - 1, 4),
        "local_overhead": round(raw_tps / local_tps - 1, 4),
        "ratio": round(ray_tps / raw_tps, 4),
        "raw_tokens_per_s": round(raw_tps),
        "shard_tokens_per_s": round(ray_tps),
        "local_tokens_per_s": round(local_tps),
        "tokens": raw_tokens,
        "megabytes": mb,
        "workers": args.workers,
        "repeats": repeats,
        "quick": args.quick,
        "machine": machine_report(),
    }
    save_cpu_result("tokenize", args.out, args.quick, result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
