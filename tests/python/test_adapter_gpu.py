#!/usr/bin/env python3
"""The PyTorch adapter (python/autovm) on a CUDA GPU: ResNet-18 and VGG-11 at batch 32, under a
plan whose budget (60 % of the unconstrained plan's peak) forces activation evictions. For each:
3 training steps bit-identical to plain training (losses, weights, batch norm statistics; cuDNN
in deterministic mode, plain checked against itself first), the evictions really made (bytes
moved > 0, every one back ahead of its use), and the peak torch.cuda.max_memory_allocated() of
the steps (above what was allocated before them) lower than plain training's.

usage:
  test_adapter_gpu.py --lib LIBAUTOVM [--planner AUTOVM_PLAN | --plans-dir DIR]
      exits 77 (skipped) when torch.cuda.is_available() is False. Plans come from DIR
      (made beforehand with --make-plans) or are made now with autovm-plan.
  test_adapter_gpu.py --make-plans DIR [--planner AUTOVM_PLAN] [--lib LIBAUTOVM]
      makes the plans on a machine with autovm-plan (no GPU needed) and exits.
"""
import argparse
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "python")]

import torch  # noqa: E402
import torchvision  # noqa: E402

import autovm  # noqa: E402
from adapter_models import batch, compare, train, twins  # noqa: E402

MODELS = [("resnet18", 32), ("vgg11", 32)]
RESOLUTION = 224
BUDGET_FRACTION = 0.6


def build(name):
    torch.manual_seed(0)
    return getattr(torchvision.models, name)(weights=None).train()


def momentum(m):
    return torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)


def plan_file(d, name, n):
    return os.path.join(d, f"{name}-b{n}-gpu-test.json")


def make_plans(d, planner, lib):
    os.makedirs(d, exist_ok=True)
    for name, n in MODELS:
        m = build(name)
        x, _ = batch(n, RESOLUTION, 1000)
        free = autovm.plan(m, x, momentum(m), planner=planner, lib=lib)
        budget = int(free.peak_bytes * BUDGET_FRACTION)
        p = autovm.plan(m, x, momentum(m), budget=budget, out=plan_file(d, name, n),
                        planner=planner, lib=lib)
        print(f"{name} batch {n}: peak {free.peak_bytes} B, budget {budget} B -> {p.path}",
              flush=True)


def run_steps(model, opt, x, y, plan=None):
    """3 steps; returns (losses, peak bytes above what was allocated before, stats)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    stats = None
    if plan is None:
        losses = train(model, opt, x, y)
    else:
        with autovm.attach(model, opt, plan, unrealized="ignore") as run:
            losses = train(model, opt, x, y)
        stats = run.stats
    torch.cuda.synchronize()
    return losses, torch.cuda.max_memory_allocated() - base, stats


def check(name, n, plan):
    dev = torch.device("cuda")
    model = build(name).to(dev)
    x, y = batch(n, RESOLUTION, 1000, device=dev)
    a, oa, b, ob = twins(model, momentum)
    c, oc = twins(model, momentum)[:2]
    del model
    la, peak_plain, _ = run_steps(a, oa, x, y)
    lc, _, _ = run_steps(c, oc, x, y)
    if compare(a, la, c, lc):
        return (f"plain PyTorch is not reproducible here ({compare(a, la, c, lc)}): "
                "bit identity cannot be judged")
    del c, oc
    lb, peak_autovm, st = run_steps(b, ob, x, y, plan)
    print(f"  {name} b{n}: plain peak {peak_plain / 1e6:.0f} MB, AutoVM peak "
          f"{peak_autovm / 1e6:.0f} MB; {st}", flush=True)
    diff = compare(a, la, b, lb)
    if diff:
        return f"not bit-identical: {diff}"
    if st.evictions == 0 or st.bytes_to_host == 0:
        return f"no evictions made: {st}"
    if st.bytes_to_device != st.bytes_to_host:
        return f"not every eviction came back: {st}"
    if peak_autovm >= peak_plain:
        return f"peak {peak_autovm} B is not below plain's {peak_plain} B"
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--planner", help="autovm-plan (default: $AUTOVM_PLAN or the build's)")
    ap.add_argument("--lib", help="libautovm (default: $AUTOVM_LIB or the build's)")
    ap.add_argument("--plans-dir", help="plans made beforehand with --make-plans")
    ap.add_argument("--make-plans", metavar="DIR", help="make the plans into DIR and exit")
    args = ap.parse_args()
    if args.make_plans:
        make_plans(args.make_plans, args.planner, args.lib)
        return 0
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device (torch.cuda.is_available() is False)")
        return 77
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    results = []
    for name, n in MODELS:
        if args.plans_dir:
            plan = autovm.load_plan(plan_file(args.plans_dir, name, n), lib=args.lib)
        else:
            tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), "autovm-gpu-test-plans")
            make_plans(tmp, args.planner, args.lib)
            plan = autovm.load_plan(plan_file(tmp, name, n), lib=args.lib)
        try:
            why = check(name, n, plan)
        except Exception as e:
            why = f"{type(e).__name__}: {e}"
        results.append(not why)
        print(f"{'PASS' if not why else 'FAIL'} {name} batch {n} under {plan.path}"
              + (f": {why}" if why else ""), flush=True)
        torch.cuda.empty_cache()
    failed = results.count(False)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
