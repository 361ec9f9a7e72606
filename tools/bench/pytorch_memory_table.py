#!/usr/bin/env python3
"""Predicted against measured PyTorch peak memory, as in BENCHMARKS.md.

Reads the JSON that tools/bench/torch_memory.py wrote on the GPU machine, runs
`autovm-plan models/MODEL.onnx --batch B --optimizer OPT --memory-model pytorch` for each
configuration in it, and prints a markdown table of torch.cuda.max_memory_allocated (measured)
against the plan's pytorch_memory.peak_allocated_bytes (predicted), with the error. Exits 1 when
any error exceeds --tolerance (default 5%).

torch_memory.py counts every figure from what the process held when the model was built
("allocated_at_start"): the cuBLAS workspaces of an earlier model's matrix products, which
PyTorch keeps for the process's life and which this model's own products would have allocated
(every model it runs has a linear classifier). Those bytes are added back to each measured
figure, so that the comparison is with a fresh process running the model alone.

usage: tools/bench/pytorch_memory_table.py [DATA.json] [--plan build/compiler/driver/autovm-plan]
       (--phases adds forward / backward / end-of-forward columns; --csv FILE also writes the
       table's rows as CSV, the raw data of BENCHMARKS.md: tools/bench/data/memory-model/h200.csv)
"""
import argparse
import csv
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def predict(plan, model, batch, optimizer):
    r = subprocess.run([plan, os.path.join(ROOT, "models", f"{model}.onnx"), "--batch", str(batch),
                        "--optimizer", optimizer, "--memory-model", "pytorch", "--quiet"],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["pytorch_memory"]


def gib(n):
    return f"{n / 2**30:.3f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", nargs="?", default=os.path.join(ROOT, "tools/bench/data/memory-model/torch_memory_h200.json"))
    ap.add_argument("--plan", default=os.path.join(ROOT, "build/compiler/driver/autovm-plan"))
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--phases", action="store_true")
    ap.add_argument("--csv", metavar="FILE", help="also write the table's rows here")
    a = ap.parse_args()
    doc = json.load(open(a.data))
    meta = doc["meta"]
    print(f"Measured: {meta.get('gpu', meta['device'])}, torch {meta['torch']}, cuDNN {meta.get('cudnn')}, "
          f"optimizer {meta['optimizer']}.\n")
    head = "| model | batch | measured GiB | predicted GiB | error | peak at (predicted) |"
    if a.phases:
        head += " fwd meas/pred | end fwd meas/pred | bwd meas/pred |"
    print(head)
    rows = [[c.strip() for c in head.strip("|").split("|")]]
    print("|" + "---|" * head.count("|")[:-1] if False else "|" + "---|" * (head.count("|") - 1))
    worst = 0.0
    for r in doc["results"]:
        if "error" in r or r.get("peak_allocated") is None:
            print(f"| {r['model']} | {r['batch']} | {r.get('error', 'no CUDA figures')} | | | |")
            continue
        p = predict(a.plan, r["model"], r["batch"], meta["optimizer"])
        held = r.get("allocated_at_start", 0)
        meas, pred = r["peak_allocated"] + held, p["peak_allocated_bytes"]
        err = (pred - meas) / meas
        worst = max(worst, abs(err))
        line = (f"| {r['model']} | {r['batch']} | {gib(meas)} | {gib(pred)} | {err * 100:+.1f}% | "
                f"{p['peak_phase']} {p['peak_at']} |")
        if a.phases:
            line += (f" {gib(r['peak_forward'] + held)}/{gib(p['forward_peak_bytes'])} |"
                     f" {gib(r['end_forward_allocated'] + held)}/{gib(p['end_forward_bytes'])} |"
                     f" {gib(r['peak_backward'] + held)}/{gib(p['backward_peak_bytes'])} |")
        print(line)
        rows.append([c.strip() for c in line.strip("|").split("|")])
    if a.csv:
        with open(a.csv + ".tmp", "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows(rows)
        os.replace(a.csv + ".tmp", a.csv)
    print(f"\nlargest error {worst * 100:.1f}% (tolerance {a.tolerance * 100:.0f}%)")
    return 0 if worst <= a.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
