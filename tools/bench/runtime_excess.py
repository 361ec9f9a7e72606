#!/usr/bin/env python3
"""Where a runtime plan's training step holds device memory beyond the plan, on a vmm pool.

One model at batch 256 (as runtime_training.py builds it), on libautovm's vmm pool (its
capacity the device's free memory less 1 GiB, no limit), planned by autovm.plan(executor=
"runtime") at --budget with the convolutions' workspaces measured on the pool
(autovm.conv_workspaces.measure) and without calibration, then
trained for --steps steps under attach(executor="runtime") with the adapter's memory trace.
Between two plan boundaries the trace holds the pool's peak in use (device memory its live
allocations' chunks hold); less the most the plan keeps resident at the steps between them
(planfile.resident_bytes) it is the excess there: workspaces, tensors the plan does not name,
chunk rounding. Prints the intervals of the last step with the largest excess, each with its
steps' ops and the plan tensors they write and read, and writes everything to --out. With
--limit the steps run again with the pool limited (as attach() limits it for a calibrated
plan), and the boundaries where that run's peak differs are printed, with its out-of-memory
error if it had one.

  python3 tools/bench/runtime_excess.py --model vgg19 --budget 13.16e9 \\
      --planner build/compiler/autovm-plan --lib build/runtime/libautovm.so.1 --out $OUT/x.json
"""
import argparse
import contextlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)

from pytorch_compare import BATCH, RESOLUTION, build, make_optimizer  # noqa: E402


def train(autovm, allocator, torch, model, opt, plan, x, y, steps, limit):
    """`steps` training steps under `plan` (the pool limited to `limit` bytes, if given): the
    memory trace of each step begun, the pool's figures, the adapter's stats, and the message
    of the out-of-memory error that stopped them, if one did."""
    traces, oom = [], None
    ctx = allocator.limit(limit) if limit else contextlib.nullcontext()
    with allocator.out_of_memory_errors(), ctx:
        with autovm.attach(model, opt, plan, unrealized="ignore", executor="runtime") as run:
            for _ in range(steps):
                run.memory_trace = []
                traces.append(run.memory_trace)
                try:
                    opt.zero_grad(set_to_none=True)
                    torch.nn.functional.cross_entropy(model(x), y).backward()
                    opt.step()
                    torch.cuda.synchronize()
                except RuntimeError as e:  # the pool's refusal (OutOfMemoryError outside)
                    if allocator.OOM_MARK not in str(e):
                        raise
                    oom = str(e).splitlines()[0][:600]
                    run.abandon_step()
                    break
            run.memory_trace = None
            pool = allocator.stats()
            done = len(traces) - (1 if oom else 0)
    opt.zero_grad(set_to_none=True)
    return {"limit_bytes": limit, "steps": done, "out_of_memory": oom, "pool": pool,
            "stats": run.stats.as_dict(), "traces": traces}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vgg19")
    ap.add_argument("--budget", type=float, required=True, help="bytes, e.g. 13.16e9")
    ap.add_argument("--no-margin", action="store_true",
                    help="plan for --budget itself (autovm.plan(pytorch_margin=False))")
    ap.add_argument("--limit", type=float, default=0,
                    help="bytes: train again with the pool limited to it (as attach() limits "
                         "it for a calibrated plan), and compare")
    ap.add_argument("--limited-only", action="store_true",
                    help="with --limit: only the run at the limit, in a process of its own")
    ap.add_argument("--planner", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--chunk-bytes", type=int, default=8 << 20)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import torch

    import autovm
    from autovm import allocator, conv_workspaces, planfile

    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    allocator.install("vmm", lib_path=args.lib, chunk_bytes=args.chunk_bytes)
    dev = torch.device("cuda")
    model = build(args.model).to(dev)
    opt = make_optimizer(model)
    example = torch.randn(1, 3, RESOLUTION, RESOLUTION).expand(BATCH, -1, -1, -1).to(dev)
    plan_path = os.path.splitext(args.out)[0] + "-plan.json"
    with allocator.out_of_memory_errors():
        workspaces = conv_workspaces.measure(model, example)
        p = autovm.plan(model, example, opt, budget=int(args.budget), planner=args.planner,
                        lib=args.lib, executor="runtime", calibrate=False, out=plan_path,
                        conv_workspaces=workspaces, pytorch_margin=not args.no_margin)
        g = torch.Generator(device="cpu").manual_seed(1)
        x = torch.randn(BATCH, 3, RESOLUTION, RESOLUTION, generator=g).to(dev)
        y = torch.randint(0, 1000, (BATCH,), generator=g).to(dev)
    runs = [] if args.limited_only else \
        [train(autovm, allocator, torch, model, opt, p, x, y, args.steps, None)]
    if args.limit:
        runs.append(train(autovm, allocator, torch, model, opt, p, x, y, args.steps,
                          int(args.limit)))
    traces = runs[0]["traces"]
    if args.limited_only:  # the intervals of the last step begun, where it ran out
        traces = [t for t in traces if t] or [[]]
    with open(plan_path) as f:
        doc = json.load(f)
    steps = doc["steps"]
    resident = planfile.resident_bytes(doc)
    rows = [(lo, hi, peak, max(resident[lo:hi + 1]), peak - max(resident[lo:hi + 1]))
            for lo, hi, peak in planfile.trace_intervals(traces[-1], len(steps))]
    tensors = doc.get("tensors", [])

    def names(ids):
        return [f"{tensors[t].get('name', t)}:{tensors[t].get('bytes', 0) / 1e9:.2f}"
                for t in ids if t < len(tensors)]

    out_rows = []
    for lo, hi, peak, most, excess in sorted(rows, key=lambda r: -r[4])[:args.top]:
        def workspace(k):
            w = steps[k].get("workspace")
            return 0 if w is None else int(tensors[w].get("bytes", 0))

        ops = [{"step": k, "op": steps[k].get("op"), "node": steps[k].get("node"),
                "workspace": workspace(k),
                "outputs": names(steps[k].get("outputs", [])),
                "inputs": names(steps[k].get("inputs", []))} for k in range(lo, hi + 1)]
        out_rows.append({"steps": [lo, hi], "peak_in_use_bytes": peak,
                         "resident_bytes": most, "excess_bytes": excess, "ops": ops})
        print(f"steps {lo}-{hi}: in use {peak / 1e9:.3f} GB, plan resident {most / 1e9:.3f} GB,"
              f" excess {excess / 1e9:.3f} GB")
        for o in ops:
            print(f"   {o['step']} {o['op']} {o['node']} ws {o['workspace'] / 1e6:.0f} MB "
                  f"out {o['outputs']} in {o['inputs']}")
    for r in ([] if args.limited_only else runs[1:]):  # at the limit: where it ran out, against the run without one
        t = r["traces"][-1]
        print(f"limit {r['limit_bytes'] / 1e9:.3f} GB: {r['steps']} steps, "
              f"out of memory: {r['out_of_memory']}")
        for e, f in zip(t, traces[-1]):
            if e["pos"] == f["pos"] and abs(int(e["peak"]) - int(f["peak"])) > 16 << 20:
                print(f"   pos {e['pos']}: in use {e['peak'] / 1e9:.3f} GB at the limit, "
                      f"{f['peak'] / 1e9:.3f} GB without")
        if t:
            print(f"   last boundary at the limit: pos {t[-1]['pos']}, in use "
                  f"{t[-1]['allocated'] / 1e9:.3f} GB; the run without the limit peaked at "
                  f"{max(int(e['peak']) for e in traces[-1]) / 1e9:.3f} GB")
    result = {"model": args.model, "budget_bytes": int(args.budget),
              "planner_budget_bytes": p.budget_bytes, "max_resident_bytes": max(resident),
              "worst": out_rows, "runs": runs}
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
