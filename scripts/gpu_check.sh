#!/usr/bin/env bash
# On a GPU machine, from the repo root: the GPU test suite, then the benchmark sweeps.
# Logs and CSVs go to ${OUT:-gpu_out}; the benchmark tables print last.
#   PYTHONPATH=. bash scripts/gpu_check.sh [bench_activation ...]
set -uo pipefail
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-.}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
python3 -m pytest op_tests -n 8 -q -p no:cacheprovider 2>&1 | tee "$OUT/tests.log" | tail -15
status=${PIPESTATUS[0]}
python3 scripts/check_targets.py -j "$(nproc)" --csv "$OUT/targets.csv" --markdown "$OUT/platforms.md" > "$OUT/targets.log" 2>&1 \
    || { echo "check_targets failed"; status=1; }
grep -v -i warn "$OUT/targets.log" | grep -B2 -A12 "^| target"
benches=${*:-$(cd op_benchmarks && ls bench_*.py | sed 's/\.py$//')}
for b in $benches; do
    python3 "op_benchmarks/$b.py" -o "$OUT/$b.csv" > "$OUT/$b.log" 2>&1 || { echo "$b failed"; tail -20 "$OUT/$b.log"; status=1; }
    python3 "op_benchmarks/$b.py" -M 1 16 64 128 --cudagraph -o "$OUT/${b}_cudagraph.csv" > "$OUT/${b}_cudagraph.log" 2>&1 \
        || { echo "$b --cudagraph failed"; tail -20 "$OUT/${b}_cudagraph.log"; status=1; }
done
for b in $benches; do grep -v -i warn "$OUT/$b.log" | tail -60; grep -v -i warn "$OUT/${b}_cudagraph.log" | tail -30; done
exit $status
