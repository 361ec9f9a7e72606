#!/usr/bin/env python3
"""Every model in models/ plans: at batch 32 without a budget (parameter bytes equal to
PyTorch's count in models/param_counts.json, peak above the parameters), and at 50 % of its
peak on h200-pcie, each plan checked by autovm-inspect's verifier.

usage: test_models.py AUTOVM_PLAN AUTOVM_INSPECT MODELS_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

PLAN, INSPECT, MODELS = sys.argv[1:4]
counts = json.load(open(os.path.join(MODELS, "param_counts.json")))
results = []
with tempfile.TemporaryDirectory() as tmp:
    for f in sorted(os.listdir(MODELS)):
        if not f.endswith(".onnx"):
            continue
        name = f[:-5]
        path = os.path.join(MODELS, f)
        out = os.path.join(tmp, name + ".json")
        r = subprocess.run([PLAN, path, "--batch", "32", "-o", out, "--quiet"], capture_output=True, text=True)
        ok = r.returncode == 0
        why = r.stderr.strip()[-300:]
        if ok:
            st = json.load(open(out))["statistics"]
            want = counts[name]["parameter_bytes"]
            ok = st["parameter_bytes"] == want and st["peak_bytes"] > want
            why = f"parameter bytes {st['parameter_bytes']} vs PyTorch {want}, peak {st['peak_bytes']}"
            half = st["peak_bytes"] // 2
            r = subprocess.run([PLAN, path, "--batch", "32", "--budget", f"{half}B", "-o", out, "--quiet"],
                               capture_output=True, text=True)
            if r.returncode == 0:
                v = subprocess.run([INSPECT, "verify", out], capture_output=True, text=True)
                ok = ok and v.returncode == 0
                why += f"; 50 % plan verified: {v.returncode == 0} {v.stdout.strip()[:300]}"
            else:
                ok = ok and r.returncode == 6  # a step alone needs more than half the peak
                why += f"; 50 %: exit {r.returncode}"
        results.append(ok)
        print(f"{'PASS' if ok else 'FAIL'} {name}: {why}")
failed = results.count(False)
print(f"{len(results) - failed} passed, {failed} failed")
sys.exit(1 if failed or not results else 0)
