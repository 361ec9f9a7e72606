#!/usr/bin/env python3
"""The swap-planning table of BENCHMARKS.md: predicted step time of every policy.

For VGG-19 at batch 64, 128 and 256, and ResNet-50, ResNet-152, DenseNet-121 and Inception-v3
at batch 128, at budgets of 75 %, 50 % and 30 % of the step's peak and at 8 GB, on the
h200-pcie profile and on a consumer profile (rtx3070-8gb): runs autovm-plan, verifies each
plan with autovm-inspect, and prints each policy's predicted step time divided by no-swap and
AutoVM's divided by the lower bound. Only the baselines whose step-time model was measured to
within 1.5x (the plan's "calibrated", docs/baselines.md) get a column: no-swap and checkpoint.
Checks the targets: AutoVM within 1.15x of the bound in every row it fits, and no baseline that
fits predicted faster than AutoVM (every baseline, calibrated or not: the same simulator).

usage: tools/bench/swap_table.py [--build build] [--devices h200-pcie,rtx3070-8gb] [--mechanism NAME]
                                 [--csv FILE]
--csv FILE also writes the rows that fit as CSV, the raw data of BENCHMARKS.md's table
(tools/bench/data/plan-quality/; tools/bench/report.py renders it).
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = [("vgg19", 64), ("vgg19", 128), ("vgg19", 256), ("resnet50", 128), ("resnet152", 128),
         ("densenet121", 128), ("inception_v3", 128)]
# Every baseline the planner simulates; SHOWN: those with a column (calibrated ones).
POLICIES = ["demand_paging", "vdnn", "save_on_cpu", "checkpoint"]
SHOWN = ["checkpoint"]


def plan(build, model, batch, budget, device, out, mechanism=None):
    cmd = [os.path.join(build, "compiler/driver/autovm-plan"), os.path.join(ROOT, "models", model + ".onnx"),
           "--batch", str(batch), "--budget", budget, "--device", device, "-o", out, "--quiet"]
    if mechanism:
        cmd += ["--mechanism", mechanism]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode == 6:
        return None
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {r.stderr}")
    return json.load(open(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--devices", default="h200-pcie,rtx3070-8gb")
    ap.add_argument("--mechanism", help="transfer mechanism (default: each profile's own)")
    ap.add_argument("--csv", metavar="FILE", help="also write the rows that fit here")
    a = ap.parse_args()
    inspect = os.path.join(a.build, "tools/inspect/autovm-inspect")
    failures = []
    header = (["device", "model", "batch", "budget", "autovm/no-swap", "autovm/bound"]
              + [p + "/no-swap" for p in SHOWN] + ["verified"])
    rows = []
    print("| " + " | ".join(header) + " |")
    print("|---" * (7 + len(SHOWN)) + "|")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "plan.json")
        for device in a.devices.split(","):
            for model, batch in CASES:
                base = plan(a.build, model, batch, "1TB", device, out)
                peak = base["statistics"]["peak_bytes"]
                budgets = [("75%", int(peak * 0.75)), ("50%", int(peak * 0.50)),
                           ("30%", int(peak * 0.30)), ("8 GB", 8 * 10**9)]
                for label, budget in budgets:
                    p = plan(a.build, model, batch, f"{budget}B", device, out, a.mechanism)
                    row = f"| {device} | {model} | {batch} | {label} ({budget / 1e9:.1f} GB) |"
                    if p is None:
                        print(row + " infeasible |" + " |" * (len(SHOWN) + 2))
                        continue
                    st = p["statistics"]
                    pred = st["prediction"]
                    t = pred["step_time_us"]
                    no_swap = pred["no_swap_step_time_us"]
                    ratio_bound = t / pred["bound_us"]
                    cells = [f"{t / no_swap:.2f}", f"{ratio_bound:.3f}"]
                    by_policy = {b["policy"]: b for b in st.get("baselines", [])}
                    for pol in POLICIES:
                        b = by_policy.get(pol)
                        if b is not None and b["fits"] and b["step_time_us"] < t * 0.999:
                            failures.append(f"{device} {model} b{batch} {label}: {pol} faster than autovm")
                        if pol not in SHOWN:
                            continue
                        if b is None:
                            cells.append("-")
                        elif not b["fits"]:
                            cells.append("no fit")
                        else:
                            cells.append(f"{b['step_time_us'] / no_swap:.2f}")
                    v = subprocess.run([inspect, "verify", out], capture_output=True, text=True)
                    cells.append("yes" if v.returncode == 0 else "NO")
                    if v.returncode != 0:
                        failures.append(f"{device} {model} b{batch} {label}: verifier: {v.stdout[:200]}")
                    if ratio_bound > 1.15:
                        failures.append(f"{device} {model} b{batch} {label}: {ratio_bound:.3f}x the bound")
                    print(row + " " + " | ".join(cells) + " |")
                    rows.append([device, model, batch, f"{label} ({budget / 1e9:.1f} GB)"] + cells)
    print()
    if a.csv:
        with open(a.csv + ".tmp", "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows([header] + rows)
        os.replace(a.csv + ".tmp", a.csv)
    if failures:
        print(f"targets missed in {len(failures)} rows:")
        for f in failures:
            print("- " + f)
    else:
        print("all targets met")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
