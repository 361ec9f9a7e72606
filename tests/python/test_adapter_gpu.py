#!/usr/bin/env python3
"""The PyTorch adapter (python/autovm) on a CUDA GPU: ResNet-18, VGG-11 and ResNet-50 (the last
with recomputation replayed, autovm.plan(..., recompute=True)) at batch 32, under a
plan whose budget (60 % of PyTorch's peak as the planner models it, or the next of 70, 80, 90 and 95 % that the
planner can promise) forces activation evictions. For each: 3 training steps bit-identical to
plain training (losses, weights, batch norm statistics; cuDNN in deterministic mode, plain
checked against itself first), the evictions really made (bytes moved > 0, every one back ahead
of its use), the peak torch.cuda.max_memory_allocated() of the steps (above what was allocated
before them) lower than plain training's; the whole peak against the budget asked for is
printed (a memory target: BENCHMARKS.md, not a test). Then a profile run of ResNet-18 at batch
32 under a plan without a budget (Attachment.time_trace, measured_step_times): the plan
steps' times from CUDA events add up to the training step's wall-clock time (80-102 %).

usage:
  test_adapter_gpu.py --lib LIBAUTOVM [--planner AUTOVM_PLAN | --plans-dir DIR]
      exits 77 (skipped) when torch.cuda.is_available() is False. Plans come from DIR
      (made beforehand with --make-plans) or are made now with autovm-plan.
  test_adapter_gpu.py --make-plans DIR [--planner AUTOVM_PLAN] [--lib LIBAUTOVM]
      makes the plans on a machine with autovm-plan (no GPU needed) and exits.
"""
import argparse
import json
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "python")]

import torch  # noqa: E402
import torchvision  # noqa: E402

import autovm  # noqa: E402
from adapter_models import batch, compare, train, twins  # noqa: E402

# (model, batch, plan with PyTorch's margin, recompute=True). ResNet-50's plan also
# regenerates tensors (convolutions, batch norm, ReLU, max pooling and additions replayed by
# the adapter). Every plan has max pooling's indices as saved tensors (autovm-plan
# --pool-indices), which the adapter moves too.
MODELS = [("resnet18", 32, True, False), ("vgg11", 32, True, False), ("resnet50", 32, True, True)]
RESOLUTION = 224
BUDGET_FRACTIONS = (0.6, 0.7, 0.8, 0.9, 0.95)
TIMED, TIMED_BATCH = "resnet18", 32  # the profile run (measured_step_times)


def build(name):
    torch.manual_seed(0)
    return getattr(torchvision.models, name)(weights=None).train()


def momentum(m):
    return torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)


def plan_file(d, name, n, recompute=False):
    return os.path.join(d, f"{name}-b{n}-gpu-test{'-recompute' if recompute else ''}.json")


def budgets_file(d):
    return os.path.join(d, "budgets.json")


def make_plans(d, planner, lib):
    os.makedirs(d, exist_ok=True)
    budgets = {}
    for name, n, margin, recompute in MODELS:
        m = build(name)
        x, _ = batch(n, RESOLUTION, 1000)
        free = autovm.plan(m, x, momentum(m), planner=planner, lib=lib, recompute=recompute)
        # PyTorch's peak as the planner models it (what plain training allocates).
        peak = (free.pytorch_memory or {}).get("peak_allocated_bytes", free.peak_bytes)
        peak = peak if margin else free.peak_bytes
        for fraction in BUDGET_FRACTIONS:
            budget = int(peak * fraction)
            try:
                p = autovm.plan(m, x, momentum(m), budget=budget,
                                out=plan_file(d, name, n, recompute), planner=planner, lib=lib,
                                pytorch_margin=margin, recompute=recompute)
                break
            except autovm.PlannerError as e:
                if fraction == BUDGET_FRACTIONS[-1]:
                    raise
                print(f"{name}: {fraction:.0%} of the peak cannot be promised ({e}); next",
                      flush=True)
        budgets[plan_file("", name, n, recompute)] = budget if margin else None
        print(f"{name} batch {n}: PyTorch's modelled peak {peak} B, budget {budget} B -> {p.path}",
              flush=True)
    m = build(TIMED)
    x, _ = batch(TIMED_BATCH, RESOLUTION, 1000)
    p = autovm.plan(m, x, momentum(m), out=free_plan_file(d), planner=planner, lib=lib)
    print(f"{TIMED} batch {TIMED_BATCH}: no budget -> {p.path}", flush=True)
    with open(budgets_file(d), "w") as f:
        json.dump(budgets, f, indent=1, sort_keys=True)


def free_plan_file(d):
    return os.path.join(d, f"{TIMED}-b{TIMED_BATCH}-gpu-test-free.json")


def check_profile(plan):
    """A profile run (Attachment.time_trace under a plan without a budget): each plan step's
    time from CUDA events, which together make up the step as the wall clock measures it."""
    import statistics
    import time

    import torch.nn.functional as F

    dev = torch.device("cuda")
    model = build(TIMED).to(dev)
    opt = momentum(model)
    x, y = batch(TIMED_BATCH, RESOLUTION, 1000, device=dev)
    walls = []
    with autovm.attach(model, opt, plan, unrealized="ignore") as run:
        run.time_trace = []
        for _ in range(6):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            opt.step()
            torch.cuda.synchronize()
            walls.append((time.perf_counter() - t0) * 1e6)
        times = run.measured_step_times(skip=2)["step_us"]
    wall = statistics.median(walls[2:])
    total = sum(times)
    conv = sum(t for t, s in zip(times, plan.steps) if s["op"] == "Conv")
    print(f"  {TIMED} b{TIMED_BATCH}: {len(times)} steps timed, {total / 1e3:.2f} ms in all "
          f"(forward convolutions {conv / 1e3:.2f} ms), wall clock {wall / 1e3:.2f} ms; the plan "
          f"estimated {sum(s['compute_us'] for s in plan.steps) / 1e3:.2f} ms", flush=True)
    if len(times) != len(plan.steps) or min(times) < 0:
        return f"{len(times)} times for {len(plan.steps)} steps, least {min(times)}"
    if not 0.8 * wall <= total <= 1.02 * wall:
        return f"the steps' times add up to {total:.0f} us, the wall clock says {wall:.0f} us"
    if conv <= 0:
        return "no time on the forward convolutions"
    return ""


def run_steps(model, opt, x, y, plan=None):
    """3 steps; returns (losses, peak bytes above what was allocated before, stats, peak)."""
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
    peak = torch.cuda.max_memory_allocated()
    return losses, peak - base, stats, peak


def check(name, n, plan, margin, recompute):
    dev = torch.device("cuda")
    model = build(name).to(dev)
    x, y = batch(n, RESOLUTION, 1000, device=dev)
    a, oa, b, ob = twins(model, momentum)
    c, oc = twins(model, momentum)[:2]
    del model
    la, peak_plain, _, _ = run_steps(a, oa, x, y)
    lc, _, _, _ = run_steps(c, oc, x, y)
    if compare(a, la, c, lc):
        return (f"plain PyTorch is not reproducible here ({compare(a, la, c, lc)}): "
                "bit identity cannot be judged")
    del c, oc
    lb, peak_autovm, st, whole = run_steps(b, ob, x, y, plan)
    budget = plan.requested_budget_bytes
    print(f"  {name} b{n}: plain peak {peak_plain / 1e6:.0f} MB, AutoVM peak "
          f"{peak_autovm / 1e6:.0f} MB; whole peak {whole / 1e6:.0f} MB against the budget of "
          f"{budget / 1e6:.0f} MB; {st}", flush=True)
    diff = compare(a, la, b, lb)
    if diff:
        return f"not bit-identical: {diff}"
    if recompute and (st.discards == 0 or st.recomputes < st.discards or st.late_recomputes
                      or st.missed_discards):
        return f"every discard should be regenerated ahead of its use: {st}"
    if not recompute and (st.evictions == 0 or st.bytes_to_host == 0):
        return f"no evictions made: {st}"
    if st.bytes_to_device != st.bytes_to_host:
        return f"not every eviction came back: {st}"
    if peak_autovm >= peak_plain:
        return f"peak {peak_autovm} B is not below plain's {peak_plain} B"
    if margin and whole > budget:  # a memory target, recorded by the benchmark, not a failure
        print(f"  {name} b{n}: whole peak {whole} B is over the budget of {budget} B "
              f"(BENCHMARKS.md, PyTorch end to end)", flush=True)
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
    d = args.plans_dir
    if not d:
        d = os.path.join(os.environ.get("TMPDIR", "/tmp"), "autovm-gpu-test-plans")
        make_plans(d, args.planner, args.lib)
    with open(budgets_file(d)) as f:
        budgets = json.load(f)
    for name, n, margin, recompute in MODELS:
        plan = autovm.load_plan(plan_file(d, name, n, recompute), lib=args.lib,
                                requested_budget=budgets[plan_file("", name, n, recompute)])
        try:
            why = check(name, n, plan, margin, recompute)
        except Exception as e:
            why = f"{type(e).__name__}: {e}"
        results.append(not why)
        print(f"{'PASS' if not why else 'FAIL'} {name} batch {n} under {plan.path}"
              + (f": {why}" if why else ""), flush=True)
        torch.cuda.empty_cache()
    try:
        why = check_profile(autovm.load_plan(free_plan_file(d), lib=args.lib))
    except Exception as e:
        why = f"{type(e).__name__}: {e}"
    results.append(not why)
    print(f"{'PASS' if not why else 'FAIL'} a profile run of {TIMED} batch {TIMED_BATCH}"
          + (f": {why}" if why else ""), flush=True)
    failed = results.count(False)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
