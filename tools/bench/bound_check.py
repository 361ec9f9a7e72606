#!/usr/bin/env python3
"""Checks the planner's lower bound (compiler/plan/bound.h) against real plans: for each model,
batch, optimizer and budget, autovm-plan's own plan and every baseline that fits (demand
paging left out: it is not a plan of the execution model) must predict a step time at or above
the bound the plan states. A bound above any of them is not a lower bound.

usage: tools/bench/bound_check.py [--build build] [--models vgg19,resnet50]
                                  [--batches 32,128] [--optimizers sgd,momentum]

Budgets: --budget min and 30, 40, 50, 60, 75 and 90 % of each step's peak. Prints one line per
violation and a summary; exits 1 when there is a violation.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FRACTIONS = ["min", 0.3, 0.4, 0.5, 0.6, 0.75, 0.9]


def plan(exe, model, batch, optimizer, budget, out):
    cmd = [exe, os.path.join(ROOT, "models", model + ".onnx"), "--batch", str(batch),
           "--optimizer", optimizer, "--budget", budget, "-o", out, "--quiet"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode == 6:  # infeasible budget
        return None
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {r.stderr}")
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", default="vgg16,vgg19,resnet18,mobilenet_v2,resnet50,densenet121,inception_v3,resnet152")
    ap.add_argument("--batches", default="32,128")
    ap.add_argument("--optimizers", default="sgd,momentum")
    a = ap.parse_args()
    exe = os.path.join(a.build, "compiler/driver/autovm-plan")
    plans = violations = 0
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "plan.json")
        for model in a.models.split(","):
            for batch in (int(b) for b in a.batches.split(",")):
                for optimizer in a.optimizers.split(","):
                    peak = plan(exe, model, batch, optimizer, "1TB", out)["statistics"]["peak_bytes"]
                    for f in FRACTIONS:
                        budget = "min" if f == "min" else f"{int(peak * f)}B"
                        d = plan(exe, model, batch, optimizer, budget, out)
                        if d is None:
                            continue
                        pred = d["statistics"]["prediction"]
                        bound = pred["bound_us"]
                        plans += 1
                        for p in [pred] + d["statistics"].get("baselines", []):
                            if p["policy"] == "demand_paging" or not p.get("fits", True):
                                continue
                            if p["step_time_us"] < bound * 0.999:
                                violations += 1
                                print(f"below the bound: {model} b{batch} {optimizer} {f}: "
                                      f"{p['policy']} {p['step_time_us'] / 1e3:.2f} ms < {bound / 1e3:.2f} ms")
    print(f"{plans} plans, {violations} below their bound")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
