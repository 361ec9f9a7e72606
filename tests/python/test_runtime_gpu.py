#!/usr/bin/env python3
"""attach(..., executor="runtime") on a CUDA GPU: libautovm executes the plan on PyTorch's own
tensors, on each pool. ResNet-18 (torchvision) at batch 16, 112x112, SGD with momentum, cuDNN
deterministic, trains 3 steps under a plan at the least budget (every kind the runtime binds
movable), in a fresh process per pool:
  vmm      the mapped mechanism: copies to pinned host memory, pages unmapped while away
  managed  the prefetch mechanism: migration
Each run's losses and final weights are bit-identical to plain training of a twin on the same
pool in the same process; the runtime really moved bytes both ways; on the vmm pool it unmapped pages (the pool's paged_out_bytes > 0) and mapped them again.
A third run, "vmm calibrated", plans in the child itself, on the GPU: plan(executor="runtime")
at the least budget plan() promises of what the process holds beside the pool (the CUDA
context, the libraries' handles) plus 80, 70, 60, 50 and 40 % of the device memory plain
training's allocations held on the vmm pool (its peak in use) measures the convolutions'
workspaces on the pool, with their times, and calibrates. Training under that plan (attach limits the pool to the
budget less what is beside it) holds at most that share in the pool and, by cudaMemGetInfo,
at most the budget on the device, and is bit-identical to the twin.

usage: test_runtime_gpu.py --planner AUTOVM_PLAN --lib LIBAUTOVM   (exits 77 without a GPU)
       test_runtime_gpu.py --child MEMORY --plan PLAN --lib LIBAUTOVM   (one run, JSON out)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "python")]

MEMORIES = ("vmm", "managed")
BATCH, RESOLUTION, CLASSES = 16, 112, 10


def make_model():
    import torch
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=CLASSES)


def child(memory, plan_path, lib):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    import autovm
    from autovm import allocator
    from adapter_models import batch, compare, momentum, train, twins

    allocator.install(memory, capacity_bytes=8 << 30, lib_path=lib,
                      chunk_bytes=(8 << 20) if memory == "vmm" else 0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    a, oa, b, ob = twins(make_model().to(dev), momentum)
    x, y = batch(BATCH, RESOLUTION, CLASSES, device=dev)
    out = {"memory": memory}
    with allocator.out_of_memory_errors():
        la = train(a, oa, x, y)
        plan = autovm.load_plan(plan_path, lib=lib)
        with autovm.attach(b, ob, plan, unrealized="ignore", executor="runtime") as run:
            lb = train(b, ob, x, y)
        torch.cuda.synchronize()
        out["runtime"] = run.runtime.stats()
        out["pool"] = allocator.stats()
    out["difference"] = compare(a, la, b, lb)
    return out


def child_calibrated(planner, lib):
    """Plain training of a twin, then plan() on the GPU at CALIBRATED_FRACTION of the pool's
    peak in use under it, then training under that plan."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    import autovm
    from autovm import allocator
    from adapter_models import batch, compare, momentum, train, twins

    allocator.install("vmm", capacity_bytes=8 << 30, lib_path=lib)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    a, oa, b, ob = twins(make_model().to(dev), momentum)
    x, y = batch(BATCH, RESOLUTION, CLASSES, device=dev)
    out = {"memory": "vmm calibrated"}
    with allocator.out_of_memory_errors():
        allocator.trim()
        allocator.reset_peaks()
        la = train(a, oa, x, y)
        plain_peak = allocator.stats()["peak_in_use_bytes"]
        a.cpu()  # compared on the host; its momentum goes with its optimizer
        del oa
        # What the budget holds beside the pool: the CUDA context, the libraries' handles.
        beside = allocator.outside_bytes()
        tmp = tempfile.mkdtemp(prefix="autovm-calibrated-")  # the plan file stays for attach
        plan = budget = None
        refused = ""
        for fraction in CALIBRATED_FRACTIONS:  # the least that plan() promises
            asked = beside + int(fraction * plain_peak)
            try:
                p = autovm.plan(b, (x, y), ob, budget=asked, executor="runtime",
                                planner=planner or None, lib=lib or None,
                                out=os.path.join(tmp, f"plan-{asked}.json"))
            except autovm.PlannerError as e:
                refused = str(e).splitlines()[0][:300]
                break
            plan, budget = p, asked
        if plan is None:
            return {**out, "error": f"no calibrated plan at {CALIBRATED_FRACTIONS[0]:.0%} of "
                                    f"plain's peak in use ({plain_peak} B): {refused}"}
        if plan.calibration is None:
            return {**out, "error": "plan() did not calibrate"}
        allocator.trim()
        allocator.reset_peaks()
        with autovm.attach(b, ob, plan, unrealized="ignore", executor="runtime") as run:
            limit_inside = allocator.stats()["limit_bytes"]
            lb = train(b, ob, x, y)
            torch.cuda.synchronize()
            free, total = torch.cuda.mem_get_info()
        out.update(limits=[limit_inside, allocator.stats()["limit_bytes"]],
                   device_used_bytes=total - free)
        out.update(runtime=run.runtime.stats(), pool=allocator.stats(), budget_bytes=budget,
                   plain_peak_in_use_bytes=plain_peak,
                   calibration={k: v for k, v in plan.calibration.items() if k != "tries"},
                   workspaces=len((plan.conv_workspaces or {}).get("convolutions", [])),
                   untimed=[e for e in (plan.conv_workspaces or {}).get("convolutions", [])
                            if not all(e.get(k, 0) > 0 for k in
                                       ("forward_us", "backward_us", "backward_weight_us"))])
    b.cpu()
    out["difference"] = compare(a, [t.cpu() for t in la], b, [t.cpu() for t in lb])
    return out


# Of the device memory plain training's allocations held at once (the pool's peak in use), the
# budgets plan() is asked for in turn; the child trains under the last it promises before one
# is refused. That one sits just above the floor (the model's parameters, small allocations
# and largest step, with what calibration measures beyond the plan), so pages must move.
CALIBRATED_FRACTIONS = (0.8, 0.7, 0.6, 0.5, 0.4)


def check(r):
    if "error" in r:
        return r["error"]
    s, p = r["runtime"], r["pool"]
    if r["difference"]:
        return f"not bit-identical to plain training: {r['difference']}"
    if s["bytes_to_host"] == 0 or s["bytes_to_device"] == 0:
        return f"the runtime moved nothing: {s}"
    if r["memory"] != "managed" and (p["paged_out_bytes"] == 0 or p["paged_in_bytes"] == 0):
        return f"no pages went and came back: {p}"
    if s["host_us"] <= 0 or (r["memory"] != "managed" and s["paging_us"] <= 0):
        return f"the runtime timed no host work (host_us, paging_us): {s}"
    if "budget_bytes" in r:
        c, limit = r["calibration"], r["calibration"]["pool_limit_bytes"]
        if limit != r["budget_bytes"] - c["outside_pool_bytes"]:
            return f"the pool's share {limit} B is not the budget less what is beside it: {c}"
        if p["peak_resident_bytes"] > limit:
            return (f"the pool held {p['peak_resident_bytes']} B at its peak, over its share "
                    f"{limit} B of the budget {r['budget_bytes']} B (calibration {c})")
        if r["device_used_bytes"] > r["budget_bytes"]:
            return (f"cudaMemGetInfo counted {r['device_used_bytes']} B in use after training, "
                    f"over the budget {r['budget_bytes']} B (calibration {c})")
        if r["limits"] != [limit, p["capacity_bytes"]]:
            return (f"the pool's limit was {r['limits'][0]} B under the plan and "
                    f"{r['limits'][1]} B after it: not its share {limit} B, then the capacity")
    if "budget_bytes" in r and not r["workspaces"]:
        return "plan() measured no convolution's workspace on the pool"
    if r.get("untimed"):
        return f"convolutions measured without their times: {r['untimed'][:2]}"
    return ""


def _error_lines(stderr):
    """A child's traceback, cut to the lines that say what failed."""
    lines = stderr.splitlines()
    keep = [ln for ln in lines if "Error" in ln or "error" in ln or ln.startswith("  File")]
    return "\n".join(keep[-30:]) or stderr[-3000:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--planner")
    ap.add_argument("--lib")
    ap.add_argument("--child")
    ap.add_argument("--plan")
    args = ap.parse_args()
    if args.child == "calibrated":
        print("RESULT " + json.dumps(child_calibrated(args.planner, args.lib)), flush=True)
        return 0
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.plan, args.lib)), flush=True)
        return 0
    import torch

    if not torch.cuda.is_available():
        print("SKIP: no CUDA device (torch.cuda.is_available() is False)")
        return 77
    import autovm
    from adapter_models import batch, momentum

    tmp = tempfile.mkdtemp(prefix="autovm-runtime-gpu-")
    model = make_model()
    x, _ = batch(BATCH, RESOLUTION, CLASSES)
    plan = autovm.plan(model, x, momentum(model), budget="min", executor="runtime",
                       planner=args.planner, lib=args.lib, out=os.path.join(tmp, "plan.json"))
    print(f"plan {plan.path}: budget {plan.budget_bytes / 1e6:.0f} MB, "
          f"{plan.action_counts()}", flush=True)
    failed = 0
    for memory in MEMORIES + ("calibrated",):
        cmd = [sys.executable, os.path.abspath(__file__), "--child", memory, "--plan", plan.path,
               "--lib", args.lib or "", "--planner", args.planner or ""]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        r = json.loads(line[-1][7:]) if line else {"error": _error_lines(proc.stderr)}
        why = check(r)
        failed += bool(why)
        print(f"{'PASS' if not why else 'FAIL'} {memory}: "
              + (why or f"runtime {json.dumps(r['runtime'])}; pool {json.dumps(r['pool'])}"),
              flush=True)
    print(f"{len(MEMORIES) + 1 - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
