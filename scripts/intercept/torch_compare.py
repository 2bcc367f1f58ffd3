"""Compares the outputs of two torch_check.py runs (e.g. without and with
lithos): per output, bitwise equality and the largest absolute difference.
  python3 torch_compare.py A.pt B.pt  -> one JSON line; exit 1 if any output
  differs beyond rtol=1e-4/atol=1e-4."""
import json
import sys

import torch

a = torch.load(sys.argv[1])
b = torch.load(sys.argv[2])
report, ok = {}, True
for k in sorted(a):
    if k not in b:
        report[k] = "missing"
        ok = False
        continue
    x, y = a[k], b[k]
    same = torch.equal(x, y)
    diff = (x - y).abs().max().item() if x.shape == y.shape else float("inf")
    close = x.shape == y.shape and torch.allclose(x, y, rtol=1e-4, atol=1e-4)
    ok = ok and close
    report[k] = {"bitwise_equal": same, "max_abs_diff": diff, "allclose": close}
print("COMPARE", json.dumps({"all_close": ok, "outputs": report}))
sys.exit(0 if ok else 1)
