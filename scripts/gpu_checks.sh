#!/usr/bin/env bash
# Every GPU check the open work asks for, in one call on a bare CUDA machine (a lent H200 has
# ~15 minutes of device time per session: prepare everything here, run this once there).
#
#   here:  make gpu-wheels                    # wheels the CUDA image lacks -> .gpu-wheels/
#   there: bash scripts/gpu_checks.sh         # carry .gpu-wheels; logs go to $OUT (default gpu-results/)
#
# Runs the `gpu` tests of the kernels, the model (attention variants, the MoE layer benchmark's
# GPU mode) and precision (transformer-engine tests skip where TE is absent), then
# `benchmarks/moe_layer.py --gpu` (proxy-7b2a layer shape, bf16, tokens/s per backend). Each step
# has its own time limit and log; the exit status is non-zero if any step failed.
set -uo pipefail
OUT="${OUT:-gpu-results}"
PY="${PYTHON:-python3}"
STEP_TIMEOUT="${STEP_TIMEOUT:-240}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

if [ -d .gpu-wheels ]; then
    "$PY" -m pip install -q --no-index --find-links .gpu-wheels pydantic 2>&1 | tail -3
fi
"$PY" -c "import torch, triton; print('torch', torch.__version__, '| triton', triton.__version__, '|',
torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA device')" 2>&1 | tee "$OUT/env.txt"

status=0
step() {  # step NAME COMMAND...: run with a time limit, log to $OUT/NAME.log, remember failures
    local name=$1 rc
    shift
    echo "== $name"
    timeout "$STEP_TIMEOUT" "$@" 2>&1 | tee "$OUT/$name.log"
    rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc"
    [ "$rc" -eq 0 ] || status=1
}

step gpu_tests "$PY" -m pytest -m gpu -p no:cacheprovider -o addopts=-ra tests/shared/kernels tests/shared/model \
    tests/shared/precision
step moe_layer_gpu "$PY" benchmarks/moe_layer.py --gpu --repeats 10
exit $status
