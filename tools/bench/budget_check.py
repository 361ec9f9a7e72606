#!/usr/bin/env python3
"""Does the budget hold? The README's lines run as a new user runs them, on one CUDA GPU.

For each configuration: a torchvision model (weights=None, seed 0), SGD with momentum 0.9,
random 224x224 input and labels at the batch given, and

    plan = autovm.plan(model, (x, y), optimizer, budget=B, recompute=R)   # nothing else
    with autovm.attach(model, optimizer, plan):
        ...--steps training steps: zero_grad, cross-entropy, backward, step...

torch.cuda.max_memory_allocated() is reset before plan() and read after the last step, so the
peak covers everything, plan()'s calibration included; it is compared with B. The step time
is the median of the steps after the first. Plain PyTorch runs the same steps from the same
weights first (its peak and time are printed beside), and again after plan(): AutoVM's losses
must equal that second run's bit for bit (cuDNN deterministic). The calibration's cap may make
PyTorch choose other cuDNN algorithms than the unconstrained first run did, as a smaller GPU
would, and PyTorch keeps them for the process.

usage (GPU machine; autovm-plan and libautovm from $AUTOVM_PLAN / $AUTOVM_LIB or the build):
  python3 tools/bench/budget_check.py [--configs resnet50:256:4.25GB:rc,...] --out FILE.json
With --runtime, the README's runtime path: autovm.allocator.install("managed") before the first
CUDA tensor, plan(..., executor="runtime") and attach(..., executor="runtime"); the peak is then
also the runtime's count (peak_resident_bytes), which is what its budget bounds.
A configuration is MODEL:BATCH:BUDGET[:rc][:nocal] (rc: recompute=True; nocal: calibrate=False,
the plan as the modelled margin makes it).
"""
import argparse
import copy
import datetime
import json
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

# The README's first line (ResNet-50, recomputing, at save_on_cpu's peak) and the rows the
# three lines were once measured over (VGG-19 recomputing at 18.39 GB, ResNet-50 at 11.24 GB).
CONFIGS = ["resnet50:256:4.25GB:rc", "resnet50:256:11.24GB", "vgg19:256:18.39GB:rc"]


def parse(spec):
    parts = spec.split(":")
    flags = set(parts[3:])
    if len(parts) < 3 or flags - {"rc", "nocal"}:
        raise SystemExit(f"budget_check.py: bad configuration {spec!r}: "
                         "MODEL:BATCH:BUDGET[:rc][:nocal]")
    return {"model": parts[0], "batch": int(parts[1]), "budget": parts[2],
            "recompute": "rc" in flags, "calibrate": "nocal" not in flags}


def steps(model, opt, x, y, n, attachment=None):
    import torch
    import torch.nn.functional as F

    losses, times = [], []
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
        losses.append(loss.item())
    return losses, times


def reset_peak(executor):
    import torch

    import autovm
    if executor == "runtime":  # PyTorch's statistics raise on a pluggable allocator
        autovm.allocator.reset_peaks()
    else:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def read_peak(executor):
    """max_memory_allocated, or the pool's peak of allocated bytes on the runtime path."""
    import torch

    import autovm
    if executor == "runtime":
        return autovm.allocator.stats()["peak_allocated_bytes"]
    return torch.cuda.max_memory_allocated()


def run(cfg, n, lib, executor="copy"):
    import torch
    import torchvision

    import autovm
    from autovm.planner import parse_size

    budget = parse_size(cfg["budget"])
    torch.manual_seed(0)
    base = getattr(torchvision.models, cfg["model"])(weights=None).cuda().train()
    start = copy.deepcopy(base.state_dict())
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(cfg["batch"], 3, 224, 224, device="cuda", generator=g)
    y = torch.randint(0, 1000, (cfg["batch"],), device="cuda", generator=g)
    row = dict(cfg, budget_bytes=budget)

    def fresh():
        base.load_state_dict(start)
        return base, torch.optim.SGD(base.parameters(), lr=0.01, momentum=0.9)

    model, opt = fresh()
    reset_peak(executor)
    plain_losses, plain_times = steps(model, opt, x, y, n)
    row["plain"] = {"peak_bytes": read_peak(executor),
                    "step_ms": statistics.median(plain_times[1:])}
    del opt
    model, opt = fresh()
    reset_peak(executor)
    t = time.perf_counter()
    try:
        plan = autovm.plan(model, (x, y), opt, budget=cfg["budget"], recompute=cfg["recompute"],
                           calibrate="auto" if cfg["calibrate"] else False, lib=lib,
                           executor=executor)
    except autovm.PlannerError as e:
        row["error"] = str(e)[:1500]
        return row
    row["plan_s"] = time.perf_counter() - t
    row["calibration"] = plan.calibration
    row["planned_budget_bytes"] = plan.budget_bytes
    row["prediction"] = plan.prediction
    peak = read_peak(executor)
    reference = copy.deepcopy(model)
    reference.load_state_dict(start)
    ropt = torch.optim.SGD(reference.parameters(), lr=0.01, momentum=0.9)
    plain_losses, _ = steps(reference, ropt, x, y, n)
    del reference, ropt
    reset_peak(executor)
    with autovm.attach(model, opt, plan, executor=executor) as att:
        losses, times = steps(model, opt, x, y, n)
        if executor == "runtime":
            row["runtime"] = att.runtime.stats()
    if executor == "runtime":  # the runtime's count is what its budget bounds
        peak = row["runtime"]["peak_resident_bytes"]
        row["pool_peak_allocated_bytes"] = read_peak(executor)
    else:
        peak = max(peak, read_peak(executor))
    row.update(peak_bytes=peak, within_budget=peak <= budget, step_ms=statistics.median(times[1:]),
               losses=losses, bit_identical=losses == plain_losses, stats=att.stats.as_dict())
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lib", default=os.environ.get("AUTOVM_LIB"))
    ap.add_argument("--runtime", action="store_true",
                    help="the runtime path (libautovm's managed pool, executor='runtime')")
    ap.add_argument("--out")
    ap.add_argument("--csv", help="also write the table BENCHMARKS.md shows")
    ap.add_argument("--render", metavar="JSON", help="write --csv from an earlier --out, run nothing")
    a = ap.parse_args()
    if a.render:
        with open(a.render) as f:
            doc = json.load(f)
        write_csv(a.csv, doc["results"], doc["meta"].get("executor", "copy"))
        return 0
    import torch

    if a.runtime:
        import autovm
        autovm.allocator.install("managed")

    if not torch.cuda.is_available():
        print("budget_check.py: no CUDA GPU", file=sys.stderr)
        return 77
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    meta = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
            "executor": "runtime" if a.runtime else "copy",
            "python": platform.python_version(), "steps": a.steps,
            "date": datetime.date.today().isoformat(),
            "command": " ".join(["tools/bench/budget_check.py"] + sys.argv[1:])}
    rows = []
    for spec in a.configs.split(","):
        r = run(parse(spec), a.steps, a.lib, "runtime" if a.runtime else "copy")
        rows.append(r)
        if "error" in r:
            print(f"{spec}: {r['error'][:1500]}", flush=True)
        else:
            c = r["calibration"] or {}
            print(f"{spec}: peak {r['peak_bytes'] / 1e9:.2f} GB of {r['budget_bytes'] / 1e9:.2f} "
                  f"({'within' if r['within_budget'] else 'OVER'}), {r['step_ms']:.1f} ms "
                  f"(plain {r['plain']['step_ms']:.1f} ms, {r['plain']['peak_bytes'] / 1e9:.2f} GB)"
                  f", plans {c.get('plans')}, margin {c.get('margin_bytes', 0) / 1e9:.2f} GB, "
                  f"planned {r['planned_budget_bytes'] / 1e9:.2f} GB, plan() {r['plan_s']:.1f} s, "
                  f"bit-identical {r['bit_identical']}", flush=True)
        if not a.runtime:
            torch.cuda.empty_cache()
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "results": rows}, f, indent=1)
    if a.csv:
        write_csv(a.csv, rows, "runtime" if a.runtime else "copy")
    return 0


def write_csv(path, rows, executor):
    import csv

    head = ["model", "batch", "executor", "recompute", "calibrated", "budget GB", "peak GB", "within",
            "step ms", "plain ms", "plain peak GB", "plans", "margin GB", "bit-identical"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(head)
        for r in rows:
            base = [r["model"], r["batch"], executor, "yes" if r["recompute"] else "no",
                    "yes" if r.get("calibrate", True) else "no", f"{r['budget_bytes'] / 1e9:.2f}"]
            if "error" in r:
                w.writerow(base + ["-", "refused: " + r["error"][:160]] + [""] * 6)
                continue
            c = r["calibration"] or {}
            w.writerow(base + [f"{r['peak_bytes'] / 1e9:.2f}", "yes" if r["within_budget"] else "NO",
                               f"{r['step_ms']:.1f}", f"{r['plain']['step_ms']:.1f}",
                               f"{r['plain']['peak_bytes'] / 1e9:.2f}", c.get("plans", "-"),
                               f"{c.get('margin_bytes', 0) / 1e9:.2f}",
                               "yes" if r["bit_identical"] else "no"])


if __name__ == "__main__":
    sys.exit(main())
