#!/usr/bin/env python3
"""Checks the planner's lower bound (compiler/plan/bound.h) against real plans: for each model,
batch, optimizer and budget, autovm-plan's own plan and every baseline that fits (demand
paging left out: it is not a plan of the execution model) must predict a step time at or above
the bound the plan states. A bound above any of them is not a lower bound.

usage: tools/bench/bound_check.py [--build build] [--models vgg19,resnet50]
                                  [--batches 32,128] [--optimizers sgd,momentum]
                                  [--against OTHER_BUILD]

--against OTHER_BUILD: also plan each case with that build's autovm-plan and compare the two
bounds (a change to the bound should never make it lower): prints each case where this build's
bound is below the other's (or the other build finds no plan), and how many rose, fell and
stayed; exits 1 when one fell.

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
    ap.add_argument("--against", metavar="OTHER_BUILD", help="compare the bounds with this build's")
    a = ap.parse_args()
    other = os.path.join(a.against, "compiler/driver/autovm-plan") if a.against else None
    rose = fell = same = 0
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
                        o = plan(other, model, batch, optimizer, budget, out) if other else None
                        if other and o is None:  # that build finds the budget infeasible
                            fell += 1
                            print(f"no plan from {a.against}: {model} b{batch} {optimizer} {f}")
                        elif other:
                            was = o["statistics"]["prediction"]["bound_us"]
                            if bound < was * (1 - 1e-9):
                                fell += 1
                                print(f"lower than {a.against}'s: {model} b{batch} {optimizer} {f}: "
                                      f"{bound / 1e3:.2f} ms < {was / 1e3:.2f} ms")
                            elif bound > was * (1 + 1e-9):
                                rose += 1
                                print(f"higher: {model} b{batch} {optimizer} {f}: "
                                      f"{was / 1e3:.2f} -> {bound / 1e3:.2f} ms")
                            else:
                                same += 1
                        for p in [pred] + d["statistics"].get("baselines", []):
                            if p["policy"] == "demand_paging" or not p.get("fits", True):
                                continue
                            if p["step_time_us"] < bound * 0.999:
                                violations += 1
                                print(f"below the bound: {model} b{batch} {optimizer} {f}: "
                                      f"{p['policy']} {p['step_time_us'] / 1e3:.2f} ms < {bound / 1e3:.2f} ms")
    print(f"{plans} plans, {violations} below their bound")
    if other:
        print(f"against {a.against}: {rose} bounds higher, {fell} lower, {same} the same")
    return 1 if violations or fell else 0


if __name__ == "__main__":
    sys.exit(main())
