#!/usr/bin/env bash
# The T4 study: bf16 vs QAT (A-B-A) on vLLM servers already running on a Tesla T4 VM.
#
#   export T4_BF16_URL=http://VM:8000   # vllm serve google/gemma-4-E2B-it --dtype float16
#   export T4_QAT_URL=http://VM:8001    # vllm serve google/gemma-4-E2B-it-qat-w4a16-ct --dtype float16
#   export T4_PRICE_PER_HOUR=0.54       # what the VM costs per hour, USD
#   scripts/t4-compare.sh [--phases bf16-a] [--resume] [other `loadgen scenario run` options]
#
# With one server at a time (16 GB is tight for two), run --phases bf16-a, swap the
# server, --phases qat --resume, swap back, --phases bf16-b --resume.
# Optional: VLLM_API_KEY (if the servers use --api-key), T4_INSTANCE_TYPE,
# OUT_DIR (default t4-compare-results), LOADGEN (default: loadgen on PATH).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
loadgen="${LOADGEN:-loadgen}"
out_dir="${OUT_DIR:-t4-compare-results}"
missing=0

need() {  # need NAME "what it is": one clear line when NAME is unset or empty
  if [ -z "${!1:-}" ]; then
    echo "t4-compare.sh: $1 is not set: $2" >&2
    missing=1
  fi
}

need T4_BF16_URL "export the URL of the vLLM server with google/gemma-4-E2B-it (e.g. http://10.0.0.5:8000)"
need T4_QAT_URL "export the URL of the vLLM server with google/gemma-4-E2B-it-qat-w4a16-ct"
need T4_PRICE_PER_HOUR "export the T4 VM's price in USD per hour (e.g. 0.54), for \$ per 1M tokens"
if ! command -v "$loadgen" >/dev/null 2>&1; then
  echo "t4-compare.sh: '$loadgen' not found: pip install loadgen, or export LOADGEN=/path/to/loadgen" >&2
  missing=1
fi
if [ "$missing" -ne 0 ]; then
  exit 2
fi

exec "$loadgen" scenario run "$here/scenarios/t4-vllm-gemma4-e2b.yaml" --out "$out_dir" "$@"
