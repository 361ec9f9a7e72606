#!/usr/bin/env python3
"""The PyTorch memory model against PyTorch's measured peaks, model by model.

Reads the JSON lines tools/bench/autocast_peak.py printed on the GPU machine (one per model and
mode: fp32, bf16 or fp16, with torch.cuda.max_memory_allocated of step 3 as "peak_bytes"), plans
each model with `autovm-plan MODEL.onnx --batch B --optimizer sgd --memory-model pytorch
[--autocast MODE]` (SGD without momentum, as the script trains) and prints model, mode,
measured, predicted and the error. The models are read from --models DIR as MODEL.onnx; with
--export, the missing ones are exported there first with tools/export_models.py (Debian's
/usr/bin/python3 and torch 1.13; 224x224 for every model, as the measurement runs them).
Rows whose model cannot be exported or planned say why and count as no figure.

Exit status: 0 when every error is within --tolerance (default 5%), 1 otherwise, 2 on bad usage.

usage: tools/bench/memory_model_check.py [TRUTH.jsonl] --models DIR [--export]
       [--plan build/compiler/driver/autovm-plan] [--csv FILE] [-j JOBS] [--only M1,M2]
"""
import argparse
import concurrent.futures
import csv
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tools/bench/data/memory-model")


def export(models, out):
    """Exports the models that are not in `out` yet; returns {model: why} for those that failed."""
    missing = [m for m in models if not os.path.exists(os.path.join(out, f"{m}.onnx"))]
    failed = {}
    for m in missing:  # one at a time: a model torch 1.13 cannot build fails alone
        r = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tools/export_models.py"), "--out", out,
                            "--resolution", "224", m], capture_output=True, text=True)
        if r.returncode != 0:
            lines = (r.stderr or r.stdout).strip().splitlines()
            failed[m] = lines[-1] if lines else f"exit {r.returncode}"
    return failed


def predict(plan, path, batch, mode):
    cmd = [plan, path, "--batch", str(batch), "--optimizer", "sgd", "--memory-model", "pytorch", "--quiet"]
    if mode != "fp32":
        cmd += ["--autocast", mode]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines()
        why = lines[-1] if lines else f"exit {r.returncode}"
        return None, why.split("; AutoVM supports")[0][:200]  # the op list is long
    return json.loads(r.stdout)["pytorch_memory"], None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("truth", nargs="?", default=os.path.join(DATA, "torchvision_peaks_b32.jsonl"))
    ap.add_argument("--models", required=True, metavar="DIR", help="folder of MODEL.onnx exports")
    ap.add_argument("--export", action="store_true", help="export the models missing from DIR first")
    ap.add_argument("--plan", default=os.path.join(ROOT, "build/compiler/driver/autovm-plan"))
    ap.add_argument("--csv", metavar="FILE", help="also write the rows as CSV "
                    "(tools/bench/data/memory-model/torchvision-b32.csv)")
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--only", metavar="M1,M2", help="check these models of the truth file only")
    a = ap.parse_args()
    if not os.path.isfile(a.plan):
        print(f"memory_model_check: no autovm-plan at '{a.plan}'; build it or pass --plan", file=sys.stderr)
        return 2
    try:
        rows = [json.loads(line) for line in open(a.truth) if line.strip()]
    except (OSError, ValueError) as e:
        print(f"memory_model_check: cannot read the truth file '{a.truth}': {e}", file=sys.stderr)
        return 2
    rows = [r for r in rows if "peak_bytes" in r]
    if a.only:
        only = set(a.only.split(","))
        missing = only - {r["model"] for r in rows}
        if missing:
            print(f"memory_model_check: no measurement of {', '.join(sorted(missing))} in '{a.truth}'",
                  file=sys.stderr)
            return 2
        rows = [r for r in rows if r["model"] in only]
    os.makedirs(a.models, exist_ok=True)
    failed = export(sorted({r["model"] for r in rows}), a.models) if a.export else {}

    def one(r):
        path = os.path.join(a.models, f"{r['model']}.onnx")
        if r["model"] in failed:
            return None, "export: " + failed[r["model"]]
        if not os.path.exists(path):
            return None, f"no {path} (use --export)"
        return predict(a.plan, path, r["batch"], r["mode"])

    with concurrent.futures.ThreadPoolExecutor(max(1, a.jobs)) as pool:
        results = list(pool.map(one, rows))
    table = []  # [model, batch, mode, measured, predicted or None, error % or None, peak at / why]
    print(f"{'model':22} {'mode':5} {'measured MiB':>13} {'predicted MiB':>14} {'error':>8}  peak at (predicted)")
    worst = 0.0
    for r, (p, why) in zip(rows, results):
        meas = r["peak_bytes"]
        if p is None:
            print(f"{r['model']:22} {r['mode']:5} {meas / 2**20:13.1f} {'':>14} {'':>8}  {why}")
            table.append([r["model"], r["batch"], r["mode"], meas, None, None, why])
            continue
        pred = p["peak_allocated_bytes"]
        err = (pred - meas) / meas
        worst = max(worst, abs(err))
        at = f"{p['peak_phase']} {p['peak_at']}"
        print(f"{r['model']:22} {r['mode']:5} {meas / 2**20:13.1f} {pred / 2**20:14.1f} {err * 100:+7.1f}%  {at}")
        table.append([r["model"], r["batch"], r["mode"], meas, pred, err * 100, at])
    if a.csv:  # one row per model and batch, its modes side by side
        modes = sorted({t[2] for t in table}, key=lambda m: (m != "fp32", m))
        wide = {}
        for model, batch, mode, meas, pred, err, note in table:
            row = wide.setdefault((model, batch), {"notes": []})
            row[mode] = (meas, pred, err)
            if err is None:
                row["notes"].append(f"{mode}: {note}")
        header = ["model", "batch"] + [c for m in modes for c in (f"{m} measured MiB",
                                                                   f"{m} predicted MiB", f"{m} error")]
        out = [header + ["note"]]
        for (model, batch), row in wide.items():
            cells = [model, batch]
            for m in modes:
                meas, pred, err = row.get(m, (None, None, None))
                cells += [f"{meas / 2**20:.1f}" if meas else "-", f"{pred / 2**20:.1f}" if pred else "-",
                          f"{err:+.1f} %" if err is not None else "-"]
            out.append(cells + ["; ".join(row["notes"])])
        with open(a.csv + ".tmp", "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows(out)
        os.replace(a.csv + ".tmp", a.csv)
    over = sum(1 for row in table if row[5] is None or abs(row[5]) > a.tolerance * 100)
    print(f"\nlargest error {worst * 100:.1f}%; {over} of {len(table)} rows over "
          f"{a.tolerance * 100:.0f}% or without a figure")
    return 0 if over == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
