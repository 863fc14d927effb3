#!/usr/bin/env bash
# The L4 study end to end: bf16 -> QAT -> bf16 on SageMaker ml.g6.xlarge (one NVIDIA L4).
#
# Each phase deploys an endpoint with the AWS vLLM container (about 10 minutes to
# InService), measures it, and deletes it. Three endpoints in turn: roughly an hour
# of ml.g6.xlarge time in all. Results and reports go to $OUT_DIR.
#
#   export SAGEMAKER_VLLM_IMAGE=...   # the AWS vLLM container image URI
#   export SAGEMAKER_ROLE_ARN=...     # the SageMaker execution role
#   export HF_TOKEN=...               # Gemma checkpoints are gated on Hugging Face
#   AWS credentials: AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or ~/.aws
#   (on an instance role, set LOADGEN_AWS_INSTANCE_ROLE=1)
#   scripts/l4-aba.sh [--yes] [--resume] [other `loadgen scenario run` options]
#
# Optional: AWS_REGION (default us-east-2), L4_PRICE_PER_HOUR (default 1.1267),
# OUT_DIR (default l4-aba-results), LOADGEN (default: loadgen on PATH).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
loadgen="${LOADGEN:-loadgen}"
out_dir="${OUT_DIR:-l4-aba-results}"
missing=0

need() {  # need NAME "what it is": one clear line when NAME is unset or empty
  if [ -z "${!1:-}" ]; then
    echo "l4-aba.sh: $1 is not set: $2" >&2
    missing=1
  fi
}

has_aws_credentials() {  # the sources boto3 reads, checked without any network call
  [ -n "${AWS_ACCESS_KEY_ID:-}" ] && [ -n "${AWS_SECRET_ACCESS_KEY:-}" ] && return 0
  [ -n "${AWS_PROFILE:-}${AWS_WEB_IDENTITY_TOKEN_FILE:-}${LOADGEN_AWS_INSTANCE_ROLE:-}" ] && return 0
  [ -n "${AWS_CONTAINER_CREDENTIALS_FULL_URI:-}${AWS_CONTAINER_CREDENTIALS_RELATIVE_URI:-}" ] && return 0
  [ -n "${HOME:-}" ] && [ -f "${AWS_SHARED_CREDENTIALS_FILE:-$HOME/.aws/credentials}" ] && return 0
  [ -n "${HOME:-}" ] && [ -f "${AWS_CONFIG_FILE:-$HOME/.aws/config}" ] && return 0
  return 1
}

need SAGEMAKER_VLLM_IMAGE "export the AWS vLLM container image URI (ECR) to deploy"
need SAGEMAKER_ROLE_ARN "export the SageMaker execution role ARN (arn:aws:iam::ACCOUNT:role/NAME)"
need HF_TOKEN "export a Hugging Face token that may download google/gemma-4-E2B-it (gated)"
if ! has_aws_credentials; then
  echo "l4-aba.sh: no AWS credentials: export AWS_PROFILE, or AWS_ACCESS_KEY_ID and" \
       "AWS_SECRET_ACCESS_KEY, or run 'aws configure' (on an EC2 instance role, export" \
       "LOADGEN_AWS_INSTANCE_ROLE=1)" >&2
  missing=1
fi
if ! command -v "$loadgen" >/dev/null 2>&1; then
  echo "l4-aba.sh: '$loadgen' not found: pip install loadgen, or export LOADGEN=/path/to/loadgen" >&2
  missing=1
fi
if [ "$missing" -ne 0 ]; then
  exit 2
fi

exec "$loadgen" scenario run "$here/scenarios/l4-sagemaker-gemma4-e2b.yaml" --out "$out_dir" "$@"
