#!/usr/bin/env python3
"""Real training with libautovm as the executor, on one CUDA GPU, against plain PyTorch, the
adapter's copy path and "default unified memory".

VGG-19 and ResNet-50 at batch 256, fp32, 224x224, SGD with momentum 0.9,
torch.backends.cudnn.deterministic = True (benchmark off); per model, one process each for:
  plain     plain PyTorch on its caching allocator
  copy      autovm.attach(executor="copy") under the activations-only plan at 50 % of plain's
            peak (tools/bench/data/pytorch/plans: autovm_half; where that budget is below what
            moving activations can reach, the least that can)
  runtime   autovm.allocator.install("managed") and autovm.attach(executor="runtime") in mode
            PLAN under a plan moving every kind the runtime binds, at 50 % of plain's peak or,
            where no plan fits that, at the least budget that works (autovm-plan --budget min)
  mapped    autovm.allocator.install("vmm", chunk_bytes=--chunk-bytes) and the same plan in
            mode PLAN: the runtime copies evicted tensors to pinned host memory on its copy
            streams and unmaps their pages (the mapped mechanism on trainer memory)
  demand    the runtime on managed memory, in mode DEMAND_PAGING: the runtime evicts at the plan's points (pages to
            the host by migration) and never prefetches, so pages fault back when a kernel
            touches them. This emulates default unified memory under a budget without
            oversubscribing the shared card; its victims are chosen with the plan's full
            knowledge, so it is no harsher than the driver's own eviction would be.
The managed pool's capacity is --pool-capacity (never more than the card has free, less a
margin); budgets are the runtime's accounting, never real oversubscription.
Per configuration: the step time (median of steps 3-10: the first two are warm-up; demand
paging stops after --demand-seconds once it has 2 steps, the others after --max-seconds once
they have 4; the median is then of the steps after the first two, or after the first),
every loss as float.hex, the
runtime's stats (peak resident bytes against the budget, moves, skipped actions) and the
device memory cudaMemGetInfo says is used. One JSON to --out ($OUT/runtime_training.json on
the device) and a printed table; losses are compared with plain's, bit for bit.

  # here (autovm-plan runs on the CPU only):
  /usr/bin/python3 tools/bench/runtime_training.py --make-plans tools/bench/data/runtime-loop/plans
  # or on the GPU machine, measured and calibrated on the vmm pool, then trained with the
  # pool's capacity at the budget:
  python3 tools/bench/runtime_training.py --make-plans $OUT/plans --measure \\
      --budget-fractions 0.5,0.8 --planner build/compiler/autovm-plan --lib ...
  python3 tools/bench/runtime_training.py --plans-dir $OUT/plans --configs mapped \\
      --capacity-at-budget --lib ... --out $OUT/runtime_training.json
  # on the GPU machine:
  python3 tools/bench/runtime_training.py --plans-dir tools/bench/data/runtime-loop/plans \\
      --copy-plans-dir tools/bench/data/pytorch/plans --lib build/runtime/libautovm.so.1 \\
      --out $OUT/runtime_training.json
"""
import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)

from pytorch_compare import BATCH, MEASURED, RESOLUTION, build, make_optimizer  # noqa: E402

MODELS = ("vgg19", "resnet50")
CONFIGS = ("plain", "copy", "runtime", "mapped", "demand")


def runtime_plan_path(d, name):
    return os.path.join(d, f"{name}-b{BATCH}-runtime.json")


def make_plans(d, names, args):
    """The runtime plans of `names` into d, with a manifest.json. Without --measure, here on
    the CPU: at 50 % of plain's peak, or the least budget (autovm-plan's estimates). With
    --measure, on the GPU: each model in a process of its own with the vmm pool installed
    (--chunk-bytes), so that plan() measures the convolutions' workspaces on the pool and
    calibrates the plan until the device memory the pool's live allocations need (its peak
    in use) is within the budget; the budgets are tried in the order of --budget-fractions of plain's peak, and the
    first that holds is kept."""
    os.makedirs(d, exist_ok=True)
    manifest = {}
    for name in names:
        if not args.measure:
            manifest[name] = plan_one(name, int(MEASURED[name]["plain"] * 0.5), d, args)
            continue
        refused = []
        for fraction in (float(f) for f in args.budget_fractions.split(",")):
            budget = int(MEASURED[name]["plain"] * fraction)
            # -X faulthandler: a child killed by a fault prints its Python stack.
            cmd = [sys.executable, "-X", "faulthandler"] + sys.argv + [
                "--one-plan", f"{name}/{budget}"]
            proc = _run_child(cmd, args.config_timeout)
            line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if line:
                entry = json.loads(line[-1][len("RESULT "):])
                entry["refused_budgets"] = refused
                manifest[name] = entry
                break
            refused.append({"budget_bytes": budget, "fraction_of_plain": fraction,
                            "returncode": proc.returncode,
                            "error": (proc.stderr or proc.stdout)[-1500:]
                            or f"the planning process {_exit_said(proc.returncode)} and "
                               f"printed nothing"})
            print(f"{name}: {budget / 1e9:.2f} GB refused: {refused[-1]['error'][-400:]}",
                  flush=True)
        else:
            manifest[name] = {"file": None, "refused_budgets": refused}
        _write_manifest(d, manifest)  # after every model: a later one may not finish
    _write_manifest(d, manifest)


def _exit_said(returncode):
    """How a child ended, by subprocess's returncode (negative: the signal that killed it)."""
    if returncode is not None and returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited {returncode}"


def _run_child(cmd, timeout):
    """subprocess.run(cmd) with its output as text; past `timeout` seconds the child is killed
    and the result says so in its stderr (returncode None)."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        def text(b):  # the partial output comes as bytes, whatever text= says
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        return subprocess.CompletedProcess(
            cmd, None, text(e.stdout),
            text(e.stderr) + f"\n(timed out: over --config-timeout, {timeout:.0f} s)")


def _write_manifest(d, manifest):
    tmp = os.path.join(d, "manifest.json.tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, os.path.join(d, "manifest.json"))


def plan_one(name, asked, d, args, on_gpu=False):
    """The manifest entry of `name`'s runtime plan at `asked` bytes, written into d. on_gpu:
    the model and batch are on the GPU under the installed pool (plan() measures and
    calibrates there), and a refused budget is an error; else a refused budget falls back to
    the least one."""
    import torch

    import autovm

    model = build(name)
    example = torch.randn(1, 3, RESOLUTION, RESOLUTION).expand(BATCH, -1, -1, -1)
    if on_gpu:
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        model = model.cuda()
        example = example.cuda()
    out = runtime_plan_path(d, name)
    kw = dict(planner=args.planner, lib=args.lib, executor="runtime", out=out)
    t0 = time.monotonic()
    note = None
    try:
        p = autovm.plan(model, example, make_optimizer(model), budget=asked, **kw)
    except autovm.PlannerError as e:
        if e.exit_code != 6 or on_gpu:
            raise
        p = autovm.plan(model, example, make_optimizer(model), budget="min", **kw)
        note = (f"{asked / 1e9:.2f} GB (50 % of plain's peak) fits no plan; planned at the "
                f"least budget, {p.requested_budget_bytes / 1e9:.2f} GB")
    entry = {"file": os.path.basename(out), "asked_budget_bytes": asked,
             "budget_bytes": p.requested_budget_bytes,
             "planner_budget_bytes": p.budget_bytes, "note": note,
             "movable": list(autovm.RUNTIME_KINDS),
             "movable_at_last_use": p.options.get("movable_at_last_use", []),
             "predicted_step_time_us": p.prediction.get("step_time_us"),
             "bound_us": p.prediction.get("bound_us"),
             "actions": {f"{k[0]} {k[1]}": v for k, v in sorted(p.action_counts().items())}}
    if on_gpu:
        entry.update(measured_on=torch.cuda.get_device_name(), chunk_bytes=args.chunk_bytes,
                     calibration=p.calibration,
                     conv_workspaces_measured=len((p.conv_workspaces or {}).get(
                         "convolutions", [])))
    print(f"{name}: {entry} ({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
    return entry


def plan_on_gpu(name, budget, args):
    """--one-plan: the vmm pool (its capacity the device's free memory less 1 GiB: plan()
    measures the steps' need without a limit), then plan_one on the GPU."""
    from autovm import allocator

    allocator.install("vmm", lib_path=args.lib, chunk_bytes=args.chunk_bytes)
    with allocator.out_of_memory_errors():
        return plan_one(name, budget, args.make_plans, args, on_gpu=True)


def run_one(name, config, args):
    """One configuration, in this process (the allocator is installed once a process)."""
    import torch

    import autovm
    from autovm import allocator

    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    result = {"model": name, "config": config, "batch": BATCH}
    if config in ("runtime", "demand"):
        allocator.install("managed", capacity_bytes=args.pool_capacity, lib_path=args.lib)
    elif config == "mapped":
        capacity = args.pool_capacity
        if args.capacity_at_budget:  # the device memory the pool holds is the plan's budget
            with open(os.path.join(args.plans_dir, "manifest.json")) as f:
                entry = json.load(f).get(name, {})
            if not entry.get("file"):
                return {**result, "error": f"no plan of {name} in {args.plans_dir}: "
                        f"{json.dumps(entry.get('refused_budgets', 'not in manifest.json'))[:1500]}"}
            capacity = entry["budget_bytes"]
        allocator.install("vmm", capacity_bytes=capacity, lib_path=args.lib,
                          chunk_bytes=args.chunk_bytes)
        result.update(chunk_bytes=args.chunk_bytes, pool_capacity_bytes=capacity)
    dev = torch.device("cuda")
    model = build(name).to(dev)
    opt = make_optimizer(model)
    g = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(BATCH, 3, RESOLUTION, RESOLUTION, generator=g).to(dev)
    y = torch.randint(0, 1000, (BATCH,), generator=g).to(dev)
    att = None
    if config == "copy":
        path = os.path.join(args.copy_plans_dir, f"{name}-b{BATCH}-autovm_half.json")
        plan = autovm.load_plan(path, lib=args.lib)
        att = autovm.attach(model, opt, plan, unrealized="ignore")
        result.update(plan=os.path.basename(path), planner_budget_bytes=plan.budget_bytes)
    elif config in ("runtime", "mapped", "demand"):
        path = runtime_plan_path(args.plans_dir, name)
        plan = autovm.load_plan(path, lib=args.lib)
        att = autovm.attach(model, opt, plan, unrealized="ignore", executor="runtime",
                            runtime_mode="demand_paging" if config == "demand" else "plan")
        result.update(plan=os.path.basename(path), planner_budget_bytes=plan.budget_bytes,
                      predicted_step_time_ms=plan.prediction.get("step_time_us", 0) / 1e3,
                      bound_ms=plan.prediction.get("bound_us", 0) / 1e3)
    times, losses = [], []
    started = time.monotonic()
    torch.cuda.synchronize()
    ctx = att if att is not None else _null()
    with allocator.out_of_memory_errors(), ctx:
        for i in range(args.steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            losses.append(float(loss.item()).hex())
            if i == 1 and config != "plain" and config != "copy":
                # The pool's peaks of the first two steps (momentum buffers made, first binds)
                # apart from those of the steps measured.
                result["pool_first_steps"] = allocator.stats()
                allocator.reset_peaks()
            # Slow configurations stop early: demand paging after 2 steps, the others after
            # 4, once over their time (the device's time is short).
            cap = args.demand_seconds if config == "demand" else args.max_seconds
            if i >= (1 if config == "demand" else 3) and time.monotonic() - started > cap:
                break
    free, total = torch.cuda.mem_get_info()
    measured = times[2:] or times[1:] or times
    result.update(steps=len(times), step_ms=statistics.median(measured) * 1e3,
                  step_ms_all=[t * 1e3 for t in times], losses=losses,
                  cuda_used_bytes=total - free, device=torch.cuda.get_device_name(),
                  torch=torch.__version__)
    if config == "plain" or config == "copy":
        result["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    if att is not None and att.runtime is not None:
        result["runtime"] = att.runtime.stats()
        result["budget_bytes"] = plan.budget_bytes
        result["pool"] = allocator.stats()
    if att is not None:
        result["adapter"] = att.stats.as_dict()
    return result


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--make-plans", metavar="DIR")
    ap.add_argument("--planner")
    ap.add_argument("--lib")
    ap.add_argument("--plans-dir", default=os.path.join(HERE, "data", "runtime-loop", "plans"))
    ap.add_argument("--copy-plans-dir", default=os.path.join(HERE, "data", "pytorch", "plans"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--demand-seconds", type=float, default=40.0)
    ap.add_argument("--max-seconds", type=float, default=120.0)
    ap.add_argument("--pool-capacity", type=int, default=40 << 30)
    ap.add_argument("--chunk-bytes", type=int, default=8 << 20,
                    help="the vmm pool's chunk for config mapped (default 8 MiB: with 32 MiB, "
                    "whole-chunk rounding cost ResNet-50 more than 1 GB)")
    ap.add_argument("--measure", action="store_true",
                    help="with --make-plans: plan on this GPU, on the vmm pool at the budget, "
                    "measuring workspaces and calibrating (see make_plans)")
    ap.add_argument("--budget-fractions", default="0.5",
                    help="with --measure: the budgets to try, as fractions of plain's peak, in "
                    "order (default 0.5)")
    ap.add_argument("--capacity-at-budget", action="store_true",
                    help="config mapped: the pool's capacity is the plan's budget "
                    "(manifest.json), not --pool-capacity")
    ap.add_argument("--config-timeout", type=float, default=150.0)
    ap.add_argument("--baseline", help="a JSON of this script whose plain runs the losses are "
                    "compared with")
    ap.add_argument("--out")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # MODEL/CONFIG: run it here, JSON to stdout
    ap.add_argument("--one-plan", help=argparse.SUPPRESS)  # MODEL/BYTES: plan it on the GPU
    args = ap.parse_args()
    models = args.models.split(",")
    if args.one_plan:
        name, budget = args.one_plan.split("/")
        print("RESULT " + json.dumps(plan_on_gpu(name, int(budget), args)), flush=True)
        return 0
    if args.make_plans:
        make_plans(args.make_plans, models, args)
        return 0
    if args.one:
        name, config = args.one.split("/")
        print("RESULT " + json.dumps(run_one(name, config, args)), flush=True)
        return 0
    results, baseline = [], []
    if args.baseline:  # plain runs measured before, for the comparison of losses
        with open(args.baseline) as f:
            baseline = [r for r in json.load(f)["results"] if r.get("config") == "plain"]
    doc = {"script": "tools/bench/runtime_training.py", "host": platform.node(),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "results": results}
    for config in args.configs.split(","):
        for name in models:
            cmd = [sys.executable] + sys.argv + ["--one", f"{name}/{config}"]
            t0 = time.monotonic()
            proc = _run_child(cmd, args.config_timeout)
            out, err = proc.stdout, proc.stderr
            rc = "timeout" if proc.returncode is None else proc.returncode
            line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
            if not line:
                r = {"model": name, "config": config, "error": err[-3000:], "rc": rc}
            else:  # a failure at exit, after the result, is recorded beside it
                r = json.loads(line[-1][len("RESULT "):])
                r["rc"] = rc
            r["wall_s"] = time.monotonic() - t0
            results.append(r)
            print(summary(r, baseline + results), flush=True)
            if args.out:  # after every configuration: a later one may not finish
                tmp = args.out + ".tmp"
                with open(tmp, "w") as f:
                    json.dump(doc, f, indent=1)
                os.replace(tmp, args.out)
    return 0


def summary(r, results):
    if "error" in r:
        return f"{r['model']:9} {r['config']:8} ERROR {r['error'][-600:]}"
    plain = next((p for p in results if p["model"] == r["model"] and p["config"] == "plain"
                  and "losses" in p), None)
    n = min(len(r["losses"]), len(plain["losses"])) if plain else 0
    same = r["losses"][:n] == plain["losses"][:n] if plain else None
    compared = (f"losses {'bit-identical' if same else 'DIFFER'} to plain ({n})" if plain else
                "losses not compared (no plain run here or in --baseline)")
    text = (f"{r['model']:9} {r['config']:8} {r['step_ms']:9.1f} ms ({r['steps']} steps) "
            f"{compared}; cudaMemGetInfo used {r['cuda_used_bytes'] / 1e9:.2f} GB")
    r["losses_identical_to_plain"] = same
    if "max_memory_allocated" in r:
        text += f", max_memory_allocated {r['max_memory_allocated'] / 1e9:.2f} GB"
    if "runtime" in r:
        s = r["runtime"]
        text += (f", runtime peak resident {s['peak_resident_bytes'] / 1e9:.2f} GB of budget "
                 f"{r['budget_bytes'] / 1e9:.2f} GB, violations {s['violations']}, "
                 f"{s['bytes_to_host'] / 1e9:.1f} GB out, {s['bytes_to_device'] / 1e9:.1f} GB in, "
                 f"skipped {s['unbound_actions']}, stall {s['stall_us'] / 1e3:.0f} ms, "
                 f"late requires {s.get('late_requires', 0)}, stale {s.get('stale_prefetches', 0)}")
    if "pool" in r:
        p = r["pool"]
        text += (f"; pool peak resident {p['peak_resident_bytes'] / 1e9:.2f} GB, paged out "
                 f"{p.get('paged_out_bytes', 0) / 1e9:.1f} GB")
    return text


if __name__ == "__main__":
    sys.exit(main())
