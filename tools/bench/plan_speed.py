#!/usr/bin/env python3
"""Whole-process time of autovm-plan (issue: planning speed), as in BENCHMARKS.md.

Times `autovm-plan MODEL --batch B -o /dev/null --quiet` end to end (process start to exit),
the median of --repeat runs (of max(5, repeat / 2) runs for the chains), for the shipped
VGG-19 and ResNet-152 graphs and for synthetic chains of 1,000, 10,000 and 100,000
convolutions made by tools/gen_chain.py. Prints a markdown
table and checks the targets: VGG-19 < 20 ms, ResNet-152 < 50 ms, chain time growing no faster
than n log n, 100,000 convolutions < 2 s.

usage: tools/bench/plan_speed.py [--plan build/compiler/driver/autovm-plan] [--repeat 11]
                                 [--output /dev/null] [--csv FILE]

--output names where the plans go (default /dev/null). A build that renames its temporary file
over the target even when that is a device replaces /dev/null with a regular file: to time such
a build, pass a file on a RAM file system (e.g. /dev/shm/plan.json), which costs it what its
/dev/null did.

With --budgets it times planning under a budget instead (the target: "planning VGG-19 and
ResNet-152 at any budget well under a second"): VGG-19 at batch 64, 128 and 256 and ResNet-152
at batch 128, at 75 %, 50 % and 30 % of the step's peak, at 8 GB and at --budget min, on each
of --devices (default h200-pcie,rtx3070-8gb), the median of --repeat runs (default 11; 3 is
enough for a look). --against OTHER_PLAN times another build's autovm-plan on the same rows,
alternating the two run by run, and prints before / after: same machine, same moment. The
target: every row under 1 s. Rows whose budget no plan can meet (exit 6) are marked so.

usage: tools/bench/plan_speed.py --budgets [--plan ...] [--against OTHER_PLAN] [--repeat N]
                                 [--devices h200-pcie,rtx3070-8gb] [--csv FILE]
"""
import argparse
import csv
import json
import math
import os
import stat
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def time_plan(plan, model, args, repeat, output):
    cmd = [plan, model, "-o", output, "--quiet"] + args
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


BUDGET_CASES = [("VGG-19", "vgg19", 64), ("VGG-19", "vgg19", 128), ("VGG-19", "vgg19", 256),
                ("ResNet-152", "resnet152", 128)]


def peak_bytes(plan, model, batch):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "plan.json")
        subprocess.run([plan, model, "--batch", str(batch), "-o", out, "--quiet"], check=True)
        with open(out) as f:
            return json.load(f)["statistics"]["peak_bytes"]


def write_csv(path, rows):
    with open(path + ".tmp", "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    os.replace(path + ".tmp", path)


def cells(row):
    return [c.strip() for c in row.strip().strip("|").split("|")]


def time_budgets(a):
    """The --budgets table; returns whether every row is under 1 s."""
    plans = [a.plan] + ([a.against] if a.against else [])
    head = "| device | model | batch | budget | time (median) |"
    if a.against:
        head = "| device | model | batch | budget | other build | this build | other / this |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    table = [cells(head)]
    ok, worst, ratios = True, 0.0, []
    for device in a.devices.split(","):
        for name, model, batch in BUDGET_CASES:
            path = os.path.join(ROOT, "models", model + ".onnx")
            peak = peak_bytes(a.plan, path, batch)
            for label, budget in [("75 %", f"{int(peak * 0.75)}B"), ("50 %", f"{int(peak * 0.5)}B"),
                                  ("30 %", f"{int(peak * 0.3)}B"), ("8 GB", "8GB"), ("min", "min")]:
                cmd = ["--batch", str(batch), "--budget", budget, "--device", device,
                       "-o", a.output, "--quiet"]
                times = {p: [] for p in plans}
                infeasible = False
                for _ in range(a.repeat):
                    for p in reversed(plans):  # the other build first, then this one
                        t0 = time.perf_counter()
                        r = subprocess.run([p, path] + cmd, stderr=subprocess.PIPE, text=True)
                        times[p].append(time.perf_counter() - t0)
                        if r.returncode == 6:
                            infeasible = True
                        elif r.returncode != 0:
                            sys.exit(f"{p} {path} {' '.join(cmd)} failed: {r.stderr}")
                    if infeasible:
                        break
                row = f"| {device} | {name} | {batch} | {label} |"
                if infeasible:
                    print(row + " infeasible |" + (" - | - |" if a.against else ""))
                    continue  # left out of --csv: no plan meets the budget
                this = statistics.median(times[a.plan])
                worst = max(worst, this)
                ok &= this < 1.0
                if a.against:
                    other = statistics.median(times[a.against])
                    ratios.append(other / this)
                    row += f" {other * 1000:.0f} ms | {this * 1000:.0f} ms | {other / this:.2f}x |"
                else:
                    row += f" {this * 1000:.0f} ms |"
                print(row)
                table.append(cells(row))
    print()
    if a.csv:
        write_csv(a.csv, table)
    print(f"slowest row: {worst * 1000:.0f} ms (target: every row under 1 s)")
    if ratios:
        print(f"other / this: {min(ratios):.2f}x to {max(ratios):.2f}x, geometric mean "
              f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}x")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan", default=os.path.join(ROOT, "build/compiler/driver/autovm-plan"))
    ap.add_argument("--repeat", type=int, default=11)
    ap.add_argument("--output", default="/dev/null", help="where the plans go (default /dev/null)")
    ap.add_argument("--budgets", action="store_true", help="time planning under budgets instead")
    ap.add_argument("--against", help="with --budgets: another autovm-plan to time beside it")
    ap.add_argument("--devices", default="h200-pcie,rtx3070-8gb", help="with --budgets")
    ap.add_argument("--csv", metavar="FILE", help="also write the table's rows here (the raw data "
                    "of BENCHMARKS.md: tools/bench/data/planning-speed/)")
    a = ap.parse_args()
    if a.against and not a.budgets:
        sys.exit("plan_speed.py: --against goes with --budgets")
    if a.output == "/dev/null" and not stat.S_ISCHR(os.stat("/dev/null").st_mode):
        sys.exit("plan_speed.py: /dev/null is not a character device here (an old autovm-plan renamed "
                 "a file over it?): every timing would include writing the plans to memory. Restore "
                 "it as root: rm /dev/null && mknod -m 666 /dev/null c 1 3")
    if a.budgets:
        ok = time_budgets(a)
        print("targets met" if ok else "TARGETS MISSED")
        return 0 if ok else 1
    rows, ok = [], True
    for name, model, target in [("VGG-19 batch 64", "models/vgg19.onnx", 0.020),
                                ("ResNet-152 batch 64", "models/resnet152.onnx", 0.050)]:
        t = time_plan(a.plan, os.path.join(ROOT, model), ["--batch", "64"], a.repeat, a.output)
        rows.append((name, t, target))
        ok &= t < target
    chain_times = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in (1000, 10000, 100000):
            path = os.path.join(tmp, f"chain{n}.onnx")
            subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tools/gen_chain.py"), str(n), path],
                           check=True, stdout=subprocess.DEVNULL)
            t = time_plan(a.plan, path, ["--batch", "8"], max(5, a.repeat // 2), a.output)
            chain_times[n] = t
            rows.append((f"chain of {n} convolutions, batch 8", t, 2.0 if n == 100000 else None))
    ok &= chain_times[100000] < 2.0
    print("| model | whole-process time (median) | target |")
    print("|---|---|---|")
    for name, t, target in rows:
        print(f"| {name} | {t * 1000:.1f} ms | {'< %d ms' % (target * 1000) if target else '-'} |")
    if a.csv:
        write_csv(a.csv, [["model", "whole-process time (median)", "target"]]
                  + [[name, f"{t * 1000:.1f} ms", "< %d ms" % (target * 1000) if target else "-"]
                     for name, t, target in rows])
    print()
    for small, big in ((1000, 10000), (10000, 100000)):
        ratio = chain_times[big] / chain_times[small]
        nlogn = (big * math.log(big)) / (small * math.log(small))
        print(f"chain {small} -> {big}: time x{ratio:.2f}, n log n x{nlogn:.2f}")
        ok &= ratio <= nlogn * 1.1
    print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
