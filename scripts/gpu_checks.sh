#!/usr/bin/env bash
# Every GPU check in one call on a bare CUDA machine: ≤ 9 minutes on one H200 (a lent H200 has
# ~15 minutes of device time per session: prepare everything here, run this once there).
#
#   here:  make gpu-wheels                    # wheels the CUDA image lacks, and the commit id -> .gpu-wheels/
#   there: bash scripts/gpu_checks.sh         # carry .gpu-wheels; results go to $OUT (default gpu-results/)
#
# The commit the results belong to is written to $OUT/commit.txt and into every JSON (`commit`):
# $MOELAB_COMMIT, else .gpu-wheels/COMMIT (made here, where git knows the tree), else git there
# (the device copy's .git has named a commit the tree did not hold; shared/provenance.py).
#
# Steps, each with its own time limit (seconds, overridable as <STEP>_TIMEOUT), its log
# $OUT/<step>.log and, for measurements, its JSON $OUT/<step>.json:
#   gpu_tests    pytest -m gpu: kernels, model, precision (native fp8 vs emulation), plan vs measured  120
#   doctor       moelab doctor --json: versions, measured bf16 matmul and copy peaks (stored for MFU)     45
#   moe_layer    benchmarks/moe_layer.py --gpu: one MoE layer at the proxy-7b2a shape, per backend         60
#   train_step   benchmarks/gpu_train_step.py: 1.6B representative proxy of 7B2A (head 15% of FLOPs),  120
#                ours vs HF DeepseekV3, fused AdamW, learned and forced-balanced routing, MFU, profile
#   fp8          benchmarks/gpu_fp8.py: native fp8 vs bf16 tokens/s and loss difference over 50 steps     105
#   fp8_experts  benchmarks/gpu_fp8_experts.py: bf16 vs ours (ragged fp8, cached weights) vs torchao fp8 at   120
#                the proxy-7b2a MoE layer shape: grouped GEMM and expert SwiGLU fwd+bwd, memory per recipe
#   backbone     benchmarks/gpu_backbone.py: the scorer's backbone in bf16 vs fp32                          45
#   trainer      scripts/gpu/trainer_run.py: `moelab train --no-ray` on proxy-7b2a-h100 for 6 steps: loss,  150
#                tokens/s, MFU, MaxVio, peak memory vs `moelab plan` (the trainer, not a benchmark model)
#   export       scripts/gpu/export_run.py: a small proxy-7b2a-h100 checkpoint made on the device (no     60
#                training), `moelab export` with its round-trip check, `moelab import` back bitwise
# STEPS="gpu_tests fp8" runs only those steps (a rerun of what failed).
# ($OUT/summary.json lists every step's exit status and seconds.) The exit status is non-zero if any
# step failed; on a CPU machine the script still runs end to end (tests skip, benchmarks say they
# need CUDA) and tests/scripts/test_gpu_checks.py keeps it that way.
set -uo pipefail
OUT="${OUT:-gpu-results}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export MOELAB_HOME="$OUT/moelab-home"   # doctor's measured peak lands here, and comes back with the results
MOELAB_COMMIT="$("$PY" -c 'from shared.provenance import tree_commit; print(tree_commit())' 2>/dev/null || echo unknown)"
export MOELAB_COMMIT
echo "tree $MOELAB_COMMIT" | tee "$OUT/commit.txt"

if [ -d .gpu-wheels ]; then
    "$PY" -m pip install -q --no-index --find-links .gpu-wheels pydantic typer 2>&1 | tail -3
    if ls .gpu-wheels/torchao-*.whl >/dev/null 2>&1; then  # the peer of fp8_experts (and precision.backend: torchao)
        "$PY" -m pip install -q --no-index --no-deps --find-links .gpu-wheels torchao 2>&1 | tail -3
    fi
fi
"$PY" -c "import torch; print('torch', torch.__version__, '| cuda', torch.version.cuda, '|',
torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA device')" 2>&1 | tee "$OUT/env.txt"

status=0
summary="$OUT/summary.jsonl"
: > "$summary"
step() {  # step NAME DEFAULT_TIMEOUT COMMAND...: time-boxed, logged, its last output line kept when JSON
    local name=$1 limit_var rc t0 t1
    limit_var="$(echo "$1" | tr '[:lower:]' '[:upper:]')_TIMEOUT"
    local limit=${!limit_var:-$2}
    shift 2
    if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then
        echo "== $name: not in STEPS, skipped"
        return
    fi
    echo "== $name (limit ${limit}s)"
    t0=$(date +%s)
    timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
    rc=${PIPESTATUS[0]}
    t1=$(date +%s)
    if [ ! -s "$OUT/$name.json" ]; then  # benchmarks write it themselves (--out); else the last JSON line
        tail -n 1 "$OUT/$name.log" | "$PY" -c "import json,sys; json.dump(json.loads(sys.stdin.read()), sys.stdout)" \
            > "$OUT/$name.json" 2>/dev/null || rm -f "$OUT/$name.json"
    fi
    echo "{\"step\": \"$name\", \"exit\": $rc, \"seconds\": $((t1 - t0)), \"limit\": $limit}" >> "$summary"
    echo "== $name: exit $rc in $((t1 - t0))s"
    [ "$rc" -eq 0 ] || status=1
}

step gpu_tests 120 "$PY" -m pytest -m gpu -p no:cacheprovider -o addopts=-ra -q tests/shared/kernels tests/shared/model \
    tests/shared/precision tests/shared/plan tests/benchmarks/test_gpu_common.py
step doctor 45 "$PY" -m moelab.cli doctor --json
step moe_layer 60 "$PY" benchmarks/moe_layer.py --gpu --repeats 10
step train_step 120 "$PY" benchmarks/gpu_train_step.py --profile "$OUT/profile" --out "$OUT/train_step.json"
step fp8 105 "$PY" benchmarks/gpu_fp8.py --out "$OUT/fp8.json"
step fp8_experts 120 "$PY" benchmarks/gpu_fp8_experts.py --out "$OUT/fp8_experts.json"
step backbone 45 "$PY" benchmarks/gpu_backbone.py --out "$OUT/backbone.json"
step trainer 150 "$PY" scripts/gpu/trainer_run.py --out "$OUT/trainer.json"
step export 60 "$PY" scripts/gpu/export_run.py --out "$OUT/export.json"
"$PY" -c "import json,sys; rows=[json.loads(l) for l in open(sys.argv[1])]; json.dump({'steps': rows,
'failed': [r['step'] for r in rows if r['exit']]}, open(sys.argv[2], 'w'), indent=1)" "$summary" "$OUT/summary.json"
cat "$OUT/summary.json"
exit $status
