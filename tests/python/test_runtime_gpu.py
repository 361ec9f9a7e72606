#!/usr/bin/env python3
"""attach(..., executor="runtime") on a CUDA GPU: libautovm executes the plan on PyTorch's own
tensors, on each pool. ResNet-18 (torchvision) at batch 16, 112x112, SGD with momentum, cuDNN
deterministic, trains 3 steps under a plan at the least budget (every kind the runtime binds
movable), in a fresh process per pool:
  vmm      the mapped mechanism: copies to pinned host memory, pages unmapped while away
  managed  the prefetch mechanism: migration
Each run's losses and final weights are bit-identical to plain training of a twin on the same
pool in the same process; the runtime really moved bytes both ways; on the vmm pool it unmapped pages (the pool's paged_out_bytes > 0) and mapped them again.

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


def check(r):
    if "error" in r:
        return r["error"]
    s, p = r["runtime"], r["pool"]
    if r["difference"]:
        return f"not bit-identical to plain training: {r['difference']}"
    if s["bytes_to_host"] == 0 or s["bytes_to_device"] == 0:
        return f"the runtime moved nothing: {s}"
    if r["memory"] == "vmm" and (p["paged_out_bytes"] == 0 or p["paged_in_bytes"] == 0):
        return f"no pages went and came back: {p}"
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
    for memory in MEMORIES:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", memory, "--plan", plan.path,
               "--lib", args.lib or ""]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        r = json.loads(line[-1][7:]) if line else {"error": _error_lines(proc.stderr)}
        why = check(r)
        failed += bool(why)
        print(f"{'PASS' if not why else 'FAIL'} {memory}: "
              + (why or f"runtime {json.dumps(r['runtime'])}; pool {json.dumps(r['pool'])}"),
              flush=True)
    print(f"{len(MEMORIES) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
