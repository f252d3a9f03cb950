#!/usr/bin/env bash
# The real-ONNX core scaling run for a many-core machine (the 16-core GPU machine of
# ../shared/NOTES.md): benchmarks/core_scaling.py at each W, pinned to W cores with
# taskset, one ONNX thread a worker. Builds nothing: the dependencies come as carried
# cp312 wheels (NOTES.md lists them, plus zstandard, which grep's stored texts need;
# `benchmarks/gpu_session.sh prepare` downloads them all), installed with --no-index into
# a folder on PYTHONPATH; Rifflux itself runs from this tree. Writes one JSON file per W
# under $OUT.
#
#   WHEELS=shared/wheels OUT=/tmp/out benchmarks/device_core_scaling.sh
#
# Variables: WHEELS (a folder of wheels; empty: use the interpreter's own packages),
# PYTHON (python3), WORKERS ("2 4 8 16"), FILES (200), CORPUS (a folder of markdown;
# default the benchmark's own, ../shared/corpora/awesome-copilot), SIMULATED (ms a chunk:
# the simulated embedder instead of ONNX), OUT (the results folder).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
WORKERS=${WORKERS:-"2 4 8 16"}
FILES=${FILES:-200}
OUT=${OUT:?set OUT to the results folder}
mkdir -p "$OUT"
if [ -n "${WHEELS:-}" ]; then
  deps="$OUT/.deps"
  "$PYTHON" -m pip install --quiet --no-index --no-deps --target "$deps" "$WHEELS"/*.whl
  export PYTHONPATH="$deps${PYTHONPATH:+:$PYTHONPATH}" PATH="$deps/bin:$PATH"
fi
export RIFFLUX_ONNX_THREADS=1
args=(--files "$FILES")
[ -n "${CORPUS:-}" ] && args+=(--corpus "$CORPUS")
[ -n "${SIMULATED:-}" ] && args+=(--simulated "$SIMULATED")
cores=$(nproc --all)
for w in $WORKERS; do
  if [ "$w" -gt "$cores" ]; then echo "skip W=$w: $cores cores" >&2; continue; fi
  taskset -c "0-$((w - 1))" "$PYTHON" -m benchmarks.core_scaling --workers "$w" "${args[@]}" \
    | tee "$OUT/core_scaling-$w.jsonl"
done
# Efficiency against the smallest W of the run (each W ran alone, so each line says 1.0),
# and whether each W stored the same rows as the smallest.
"$PYTHON" - "$OUT" <<'EOF'
import json, pathlib, sys
rows = []
for path in pathlib.Path(sys.argv[1]).glob("core_scaling-*.jsonl"):
    rows += [r for r in map(json.loads, path.read_text().splitlines()) if r["measure"] == "core_scaling"]
rows.sort(key=lambda r: r["workers"])
if rows:
    w0, t0, d0 = rows[0]["workers"], rows[0]["span_s"], rows[0].get("rows_sha256")
    for r in rows:
        e = round(w0 * t0 / (r["workers"] * r["span_s"]), 3)
        print(json.dumps({"workers": r["workers"], "span_s": r["span_s"], "over_first": round(r["span_s"] / t0, 3), "efficiency_vs_first": e, "units": r["units"], "writer_busy": r["writer_busy"], "same_rows_as_first": r.get("rows_sha256") == d0}))
EOF
