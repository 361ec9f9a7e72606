#!/usr/bin/env python3
"""Compares two builds of autovm-plan plan by plan: for each model, batch, budget and device
profile (and a few option sets), both builds plan the same case and the predicted step time and
lower bound of each are printed, with whether this build's plan is faster, slower or the same.
A check for planner changes that are meant to make plans faster: it shows where they made one
slower.

usage: tools/bench/plan_compare.py --against OTHER_AUTOVM_PLAN [--plan build/compiler/driver/autovm-plan]
                                   [--models vgg19:64,resnet50:128] [--jobs 2]

Budgets: 75, 50 and 30 % of each model's peak at its batch, 8 GB and --budget min, on
h200-pcie and rtx3070-8gb; then VGG-19 b256 min with --optimizer momentum, ResNet-50 b128 50 %
with --movable activation and VGG-19 b64 50 % with --mechanism staged. A case one build cannot
plan (exit 6: infeasible) is printed as such. Exits 0.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = ("vgg19:64,vgg19:128,vgg19:256,resnet50:128,resnet152:128,densenet121:128,"
          "inception_v3:128,resnet18:128,vgg16:128,mobilenet_v2:128")
EXTRA = [("vgg19", 256, "min", "h200-pcie", ["--optimizer", "momentum"]),
         ("resnet50", 128, "50%", "h200-pcie", ["--movable", "activation"]),
         ("vgg19", 64, "50%", "h200-pcie", ["--mechanism", "staged"])]


def model_path(m):
    return os.path.join(ROOT, "models", m + ".onnx")


def peak_bytes(exe, model, batch):
    r = subprocess.run([exe, model_path(model), "--batch", str(batch), "-o", "/dev/stdout", "--quiet"],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["statistics"]["peak_bytes"]


def plan(exe, model, batch, budget, device, extra, out):
    r = subprocess.run([exe, model_path(model), "--batch", str(batch), "--budget", budget,
                        "--device", device, "-o", out, "--quiet"] + extra,
                       capture_output=True, text=True)
    if r.returncode == 6:
        return None
    if r.returncode != 0:
        raise SystemExit(f"{exe} failed on {model} b{batch} {budget} {device}: {r.stderr}")
    p = json.load(open(out))["statistics"]["prediction"]
    return p["step_time_us"] / 1e3, p["bound_us"] / 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan", default=os.path.join(ROOT, "build", "compiler", "driver", "autovm-plan"))
    ap.add_argument("--against", required=True, help="the other build's autovm-plan")
    ap.add_argument("--models", default=MODELS, help="MODEL:BATCH,... (default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    cases = []
    for item in a.models.split(","):
        model, batch = item.split(":")
        for budget in ("75%", "50%", "30%", "8GB", "min"):
            for device in ("h200-pcie", "rtx3070-8gb"):
                cases.append((model, int(batch), budget, device, []))
    cases += EXTRA
    peaks = {(m, b): peak_bytes(a.plan, m, b) for m, b, *_ in cases}

    def budget_of(model, batch, budget):
        if budget.endswith("%"):
            return f"{peaks[(model, batch)] * int(budget[:-1]) // 100}B"
        return budget

    with tempfile.TemporaryDirectory() as tmp:
        def both(i):
            model, batch, budget, device, extra = cases[i]
            b = budget_of(model, batch, budget)
            return (plan(a.against, model, batch, b, device, extra, os.path.join(tmp, f"{i}-other.json")),
                    plan(a.plan, model, batch, b, device, extra, os.path.join(tmp, f"{i}-this.json")))
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
            results = list(pool.map(both, range(len(cases))))
    counts = {"faster": 0, "slower": 0, "same": 0, "infeasible": 0}
    print("| model | batch | budget | device | options | other ms | other / bound | this ms | this / bound | |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (model, batch, budget, device, extra), (other, this) in zip(cases, results):
        opts = " ".join(extra) or "-"
        if other is None or this is None:
            counts["infeasible"] += 1
            print(f"| {model} | {batch} | {budget} | {device} | {opts} | "
                  f"{'infeasible' if other is None else f'{other[0]:.1f}'} | | "
                  f"{'infeasible' if this is None else f'{this[0]:.1f}'} | | |")
            continue
        verdict = ("same" if abs(this[0] - other[0]) < 1e-6 else
                   "faster" if this[0] < other[0] else "slower")
        counts[verdict] += 1
        print(f"| {model} | {batch} | {budget} | {device} | {opts} | {other[0]:.1f} | "
              f"{other[0] / other[1]:.3f} | {this[0]:.1f} | {this[0] / this[1]:.3f} | {verdict} |")
    print()
    print(", ".join(f"{k} {v}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
