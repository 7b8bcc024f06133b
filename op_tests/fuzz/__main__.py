"""``python -m op_tests.fuzz [op ...] [--csv PATH]``: every registered op's fuzz cases
(``cases.py``), their outcome counts per op and in total, and each failure."""

import argparse
import collections
import csv
import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported

from aiter_lite.library import OPS  # noqa: E402
from aiter_lite.ops.triton.quant import get_fp8_e4m3_dtype  # noqa: E402
from op_tests.fuzz.cases import FAILURES, OUTCOMES, cases, run  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("ops", nargs="*", help="ops to fuzz (default: every registered op)")
    p.add_argument("--csv", help="one row a case")
    args = p.parse_args(argv)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    dtypes = [(torch.float32, torch.int8)]
    if device.type == "cuda":
        dtypes.append((torch.bfloat16, get_fp8_e4m3_dtype()))
    total, rows = collections.Counter(), []
    for name in args.ops or sorted(OPS):
        for dtype, qdtype in dtypes:
            torch.manual_seed(0)
            results = [run(c) for c in cases(name, device, dtype, qdtype)]
            counts = collections.Counter(r.outcome for r in results)
            total.update(counts)
            print(f"{name} ({dtype}, {qdtype}): " + ", ".join(f"{k} {counts[k]}" for k in OUTCOMES if counts[k]))
            for r in results:
                rows.append(dict(op=name, dtype=str(dtype), qdtype=str(qdtype), kind=r.case.kind, arg=r.case.arg,
                                 outcome=r.outcome, detail=r.detail))
                if r.outcome in FAILURES:
                    print("   ", r)
    print(f"{sum(total.values())} cases: " + ", ".join(f"{k} {total[k]}" for k in OUTCOMES))
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 1 if any(total[k] for k in FAILURES) else 0


if __name__ == "__main__":
    sys.exit(main())
