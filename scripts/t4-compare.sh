#!/usr/bin/env bash
# The T4 study in one command: bf16 vs QAT (A-B-A) on a Tesla T4, loadgen starting and
# stopping each phase's vLLM server (scenarios/t4-vllm-gemma4-e2b.yaml).
#
#   export T4_PRICE_PER_HOUR=0.54       # what the VM costs per hour, USD
#   export T4_HOST=me@t4-vm             # optional: start vLLM there over ssh (else: here)
#   scripts/t4-compare.sh [--phases bf16-a] [--resume] [other `loadgen scenario run` options]
#
# Optional: T4_PORT (default 8000), T4_VLLM (default "vllm serve"; vLLM's CPU build needs
# "python -m vllm.entrypoints.openai.api_server --model"), VLLM_API_KEY, T4_INSTANCE_TYPE,
# OUT_DIR (default t4-compare-results), LOADGEN (default: loadgen on PATH).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
loadgen="${LOADGEN:-loadgen}"
out_dir="${OUT_DIR:-t4-compare-results}"
missing=0

if [ -z "${T4_PRICE_PER_HOUR:-}" ]; then
  echo "t4-compare.sh: T4_PRICE_PER_HOUR is not set: export the T4 VM's price in USD per hour (e.g. 0.54), for \$ per 1M tokens" >&2
  missing=1
fi
if ! command -v "$loadgen" >/dev/null 2>&1; then
  echo "t4-compare.sh: '$loadgen' not found: pip install loadgen, or export LOADGEN=/path/to/loadgen" >&2
  missing=1
fi
vllm="${T4_VLLM:-vllm serve}"
if [ -n "${T4_HOST:-}" ]; then
  # Fail fast, in one line, when ssh would ask for a password or cannot reach the host.
  if ! ssh -o BatchMode=yes -o ConnectTimeout=15 -- "$T4_HOST" true 2>/dev/null; then
    echo "t4-compare.sh: cannot ssh to $T4_HOST without a prompt: check that \`ssh $T4_HOST true\` works with your key or agent" >&2
    missing=1
  fi
elif ! command -v "${vllm%% *}" >/dev/null 2>&1; then
  echo "t4-compare.sh: '${vllm%% *}' not found: run this on the T4 VM with vLLM installed, or export T4_HOST=user@vm to start vLLM there" >&2
  missing=1
fi
if [ "$missing" -ne 0 ]; then
  exit 2
fi

exec "$loadgen" scenario run "$here/scenarios/t4-vllm-gemma4-e2b.yaml" --out "$out_dir" "$@"
