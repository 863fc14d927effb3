#!/usr/bin/env bash
# A whole A-B-A study against the built-in simulator, with no GPU and no AWS: the
# L4 study's flow and report (bf16 -> QAT -> bf16), in about 20 seconds.
#
#   scripts/demo.sh [other `loadgen scenario run` options, e.g. --time-scale 1]
#
# Optional: OUT_DIR (default loadgen-demo-DATE-TIME), LOADGEN (default: loadgen on PATH).
# Every number it prints is SIMULATED.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
loadgen="${LOADGEN:-loadgen}"
out_dir="${OUT_DIR:-loadgen-demo-$(date +%Y%m%d-%H%M%S)}"

if ! command -v "$loadgen" >/dev/null 2>&1; then
  echo "demo.sh: '$loadgen' not found: pip install loadgen, or export LOADGEN=/path/to/loadgen" >&2
  exit 2
fi

# An --out among the arguments wins over OUT_DIR.
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --out) out_dir="${args[i+1]:-$out_dir}" ;;
    --out=*) out_dir="${args[i]#--out=}" ;;
  esac
done

echo "demo.sh: writing $out_dir/report.html and report.md" >&2
# The run ends with its answer: the headline, then the A-B-A drift verdict.
"$loadgen" scenario run "$here/scenarios/demo-simulated.yaml" --simulate --out "$out_dir" "$@"
