#!/usr/bin/env python3
"""Where a runtime plan's training step spends its time, against the plan's prediction.

One model at batch 256 (as runtime_training.py builds it), on libautovm's vmm pool with its
capacity at the plan's budget (as runtime_training.py --capacity-at-budget runs "mapped"),
trained for --steps steps under attach(executor="runtime") with the adapter's time trace
(Attachment.time_trace: a CUDA event at each plan boundary). For the last step, each interval
between two marks, plan steps (previous mark, mark], is measured against the plan's own
timeline for those steps (the predicted end of the last step less that of the step before the
interval; the prediction counts compute, stalls and remote reads). Prints the total, and the
intervals whose time exceeds the prediction most, with their ops, workspaces and remote
reads; writes every interval to --out.

  python3 tools/bench/runtime_step_times.py --plans-dir DIR --model vgg19 \\
      --lib build/runtime/libautovm.so.1 --out $OUT/vgg19-steps.json
  /usr/bin/python3 tools/bench/runtime_step_times.py --from-json vgg19-steps.json --csv steps.csv
DIR is a folder of runtime_training.py --make-plans (its manifest.json gives the budget).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)

from pytorch_compare import BATCH, RESOLUTION, build, make_optimizer  # noqa: E402
from runtime_training import runtime_plan_path  # noqa: E402


def intervals(doc, rows):
    """The last training step's intervals between marks: dicts with the plan steps they hold,
    [first, last] (both inclusive), their ops, workspace bytes and remote reads, and the
    measured and predicted microseconds."""
    steps = doc["steps"]
    remote = {}
    for a in doc["actions"]:
        if a.get("kind") == "read_remote":
            remote.setdefault(a["ready_before_step"], []).append(a["tensor"])
    size = {t["id"]: t["bytes"] for t in doc["tensors"]}
    last = max(r["step"] for r in rows)
    marks = [r for r in rows if r["step"] == last]
    out = []
    prev_pos, prev_us = marks[0]["pos"], marks[0]["us"]
    for m in marks[1:]:
        pos = int(m["pos"])
        if pos <= prev_pos:
            continue
        first = prev_pos + 1
        start = steps[first - 1]["end_us"] if first > 0 else 0.0
        predicted = steps[pos]["end_us"] - start
        measured = m["us"] - prev_us
        span = steps[first:pos + 1]
        out.append({"first": first, "last": pos, "measured_us": measured,
                    "predicted_us": predicted,
                    "ops": [f'{s["id"]} {s["op"]} {s["node"]}' for s in span],
                    "workspace_bytes": sum(size[s["workspace"]] for s in span
                                           if s.get("workspace") is not None),
                    "remote_reads": sum(len(remote.get(s["id"], [])) for s in span)})
        prev_pos, prev_us = pos, m["us"]
    return out


def table(found, top):
    """The `top` intervals whose time exceeds the prediction most, as CSV rows (header first)."""
    rows = [["plan steps", "ops", "inputs read remotely", "workspace GB", "measured ms",
             "predicted ms", "measured / predicted"]]
    for i in sorted(found, key=lambda i: i["predicted_us"] - i["measured_us"])[:top]:
        first, last = i["first"], i["last"]
        rows.append([str(first) if first == last else f"{first}-{last}",
                     "; ".join(o.split(" ", 1)[1] for o in i["ops"])[:120],
                     str(i["remote_reads"]), f"{i['workspace_bytes'] / 1e9:.2f}",
                     f"{i['measured_us'] / 1e3:.1f}", f"{i['predicted_us'] / 1e3:.1f}",
                     f"{i['measured_us'] / max(i['predicted_us'], 1):.1f}x"])
    return rows


def summary(doc):
    found = doc["intervals"]
    measured = sum(i["measured_us"] for i in found)
    predicted = sum(i["predicted_us"] for i in found)
    rt = doc["runtime"]
    steps = max(rt.get("training_steps", 1), 1)

    def per_step(key):
        return f"{rt.get(key, 0) / 1e3 / steps:.1f}"
    host = (f"; the host spent {per_step('host_us')} ms a step in the runtime's boundaries, "
            f"{per_step('host_wait_us')} ms of it blocked on the device and "
            f"{per_step('paging_us')} ms mapping and unmapping chunks"
            if "host_us" in rt else "")  # JSON of a library without those figures
    return (f"{doc['model']}: budget {doc['budget_bytes'] / 1e9:.2f} GB, last step "
            f"{measured / 1e3:.1f} ms measured, {predicted / 1e3:.1f} ms predicted "
            f"({measured / max(predicted, 1):.2f}x); stall {per_step('stall_us')} ms a step "
            f"counted by the runtime{host}; the pool refused "
            f"{doc['pool'].get('failed_allocations', 0)} requests{pressure(doc['pool'])}")


def pressure(pool):
    """The pool's waits for frees under its limit, over the whole run (its figures are not
    reset per step); empty for a library without them."""
    if "pressure_waits" not in pool:
        return ""
    return (f" and waited {pool['pressure_waits']} times for the device to pass a free, "
            f"{pool['pressure_wait_us'] / 1e3:.1f} ms in all (every step of the run)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plans-dir")
    ap.add_argument("--model", default="vgg19")
    ap.add_argument("--lib")
    ap.add_argument("--chunk-bytes", type=int, default=8 << 20)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--out", help="the JSON of everything measured")
    ap.add_argument("--from-json", metavar="FILE",
                    help="print (and with --csv write) the table of an earlier --out, no GPU")
    ap.add_argument("--csv", help="the table as CSV")
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            doc = json.load(f)
    else:
        if not (args.plans_dir and args.lib and args.out):
            ap.error("--plans-dir, --lib and --out are needed unless --from-json is given")
        doc = measure(args)
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, args.out)
    rows = table(doc["intervals"], args.top)
    print(summary(doc))
    for r in rows:
        print(" | ".join(r))
    if args.csv:
        import csv
        with open(args.csv, "w", newline="") as f:
            csv.writer(f).writerows(rows)


def measure(args):
    """Trains under the plan with the time trace: the JSON document --out holds."""
    import torch
    import torch.nn.functional as F

    import autovm
    from autovm import allocator

    with open(os.path.join(args.plans_dir, "manifest.json")) as f:
        budget = json.load(f)[args.model]["budget_bytes"]
    path = runtime_plan_path(args.plans_dir, args.model)
    with open(path) as f:
        doc = json.load(f)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    allocator.install("vmm", capacity_bytes=budget, lib_path=args.lib,
                      chunk_bytes=args.chunk_bytes)
    dev = torch.device("cuda")
    model = build(args.model).to(dev)
    opt = make_optimizer(model)
    g = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(BATCH, 3, RESOLUTION, RESOLUTION, generator=g).to(dev)
    y = torch.randint(0, 1000, (BATCH,), generator=g).to(dev)
    plan = autovm.load_plan(path, lib=args.lib)
    with allocator.out_of_memory_errors():
        with autovm.attach(model, opt, plan, executor="runtime") as run:
            run.time_trace = []
            for _ in range(args.steps):
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(model(x), y).backward()
                opt.step()
            torch.cuda.synchronize()
            rows = run.time_rows()
            runtime_stats = run.runtime.stats()
    return {"model": args.model, "budget_bytes": budget, "device": torch.cuda.get_device_name(),
            "torch": torch.__version__, "runtime": runtime_stats, "pool": allocator.stats(),
            "rows": rows, "intervals": intervals(doc, rows)}


if __name__ == "__main__":
    main()
