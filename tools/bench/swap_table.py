#!/usr/bin/env python3
"""The swap-planning table of BENCHMARKS.md: predicted step time of every policy.

For VGG-19 at batch 64, 128 and 256, and ResNet-50, ResNet-152, DenseNet-121 and Inception-v3
at batch 128, at budgets of 75 %, 50 % and 30 % of the step's peak and at 8 GB, on the
h200-pcie profile and on a consumer profile (rtx3070-8gb): runs autovm-plan, verifies each
plan with autovm-inspect, and prints each policy's predicted step time divided by no-swap and
AutoVM's divided by the lower bound. Checks the targets: AutoVM within 1.15x of the bound in
every row it fits, at least 2.5x faster than demand paging for VGG-19 at 50 %, and faster
than every baseline that fits.

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
POLICIES = ["demand_paging", "vdnn", "save_on_cpu", "checkpoint"]


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
              + [p + "/no-swap" for p in POLICIES] + ["verified"])
    rows = []
    print("| " + " | ".join(header) + " |")
    print("|---" * (7 + len(POLICIES)) + "|")
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
                        print(row + " infeasible |" + " |" * (len(POLICIES) + 2))
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
                        if b is None:
                            cells.append("-")
                        elif not b["fits"]:
                            cells.append("no fit")
                        else:
                            cells.append(f"{b['step_time_us'] / no_swap:.2f}")
                            if b["step_time_us"] < t * 0.999:
                                failures.append(f"{device} {model} b{batch} {label}: {pol} faster than autovm")
                    v = subprocess.run([inspect, "verify", out], capture_output=True, text=True)
                    cells.append("yes" if v.returncode == 0 else "NO")
                    if v.returncode != 0:
                        failures.append(f"{device} {model} b{batch} {label}: verifier: {v.stdout[:200]}")
                    if ratio_bound > 1.15:
                        failures.append(f"{device} {model} b{batch} {label}: {ratio_bound:.3f}x the bound")
                    if model == "vgg19" and label == "50%" and "demand_paging" in by_policy:
                        dp = by_policy["demand_paging"]["step_time_us"] / t
                        print(f"<!-- {device} vgg19 b{batch} 50%: demand paging / autovm = {dp:.2f} -->")
                        if dp < 2.5:
                            failures.append(f"{device} vgg19 b{batch} 50%: only {dp:.2f}x faster than demand paging")
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
