#!/usr/bin/env bash
# The GPU test suite in parts that each fit a 10-minute command on one H100 / H200
# (the whole suite took about 16 minutes at -n 14 on an H200), run from the repo root:
#   PYTHONPATH=. bash scripts/gpu_tests.sh a|b|c|d|e [pytest args]
# Verbose into ${OUT:-gpu_out}/tests_<part>.log, so a run cut off by its time limit still
# names every test that failed; prints those, then pytest's summary line.
set -uo pipefail
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-.}
part=${1:?part a, b, c, d or e}; shift
case "$part" in
    a) paths=(op_tests/fuzz op_tests/integration op_tests/layers op_tests/test_*.py) ;;
    b) paths=(op_tests/triton_tests/quant) ;;
    c) paths=(op_tests/triton_tests/rope) ;;
    d) paths=(op_tests/triton_tests/fusions op_tests/triton_tests/moe op_tests/triton_tests/normalization) ;;
    e) paths=(op_tests/triton_tests/test_*.py op_tests/vllm) ;;
    *) echo "part a, b, c, d or e, got $part"; exit 2 ;;
esac
python3 -m pytest "${paths[@]}" -n "${WORKERS:-14}" -v -p no:cacheprovider --tb=short "$@" > "$OUT/tests_$part.log" 2>&1
status=$?
grep -E "^\[gw[0-9]+\].*(FAILED|ERROR)|^(FAILED|ERROR) " "$OUT/tests_$part.log" | sort -u | head -40
grep -E "passed|failed" "$OUT/tests_$part.log" | tail -1
exit $status
