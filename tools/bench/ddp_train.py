#!/usr/bin/env python3
"""Data-parallel training (DistributedDataParallel) under AutoVM plans, one plan per rank.

Launches --world ranks (torch.multiprocessing.spawn), each on its own GPU (or on the CPU with
--device cpu, backend gloo), and trains --steps steps of --model at --batch per rank (SGD with
momentum, fp32) twice in each rank: plain DDP, then DDP under `autovm.attach` with the rank's
own plan (made with `autovm.plan(..., data_parallel=True)`: DDP's gradient buckets are
persistent tensors of the plan). On CUDA plain DDP runs twice first (deterministic cuDNN and
cuBLAS), so that a difference can only come from the adapter. Checks, per rank, that the losses
and the final weights (parameters and batch norm buffers) are identical bit for bit, and reports
each rank's peak (torch.cuda.max_memory_allocated) against the plan's budget, the median step
time, the adapter's stats, and DDP's bucket sizes against the plan's. One JSON to --out.

autovm-plan does not run on the GPU machine, so the plans are made here first:

  # here (CPU, Debian's torch): plans for 2 ranks of ResNet-50 at batch 64 per rank
  /usr/bin/python3 tools/bench/ddp_train.py --make-plans tools/bench/data/ddp-plans
  # on the GPU machine (2 GPUs; carry build/runtime/libautovm.so.1 and the plans):
  python3 tools/bench/ddp_train.py --plans-dir tools/bench/data/ddp-plans \\
      --lib libautovm.so.1 --trace-memory --out $OUT/ddp.json
  # here again: plans with PyTorch's extra memory measured in that run, step by step
  /usr/bin/python3 tools/bench/ddp_train.py --make-plans NEW_DIR \\
      --reserve-from ddp.json tools/bench/data/ddp-plans
  # on the CPU, 2 gloo ranks, planning on the fly (what the 'adapter' test suite runs):
  /usr/bin/python3 tools/bench/ddp_train.py --device cpu --model tiny --batch 4 \\
      --resolution 32 --steps 2 --budget-fraction 0.8 --out /tmp/ddp.json

Exit status: 0 when every rank is bit-identical (and, on CUDA, within its budget), 1 otherwise,
77 when --device cuda has fewer GPUs than --world.
"""
import argparse
import contextlib
import hashlib
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
import traceback

# NVLink multicast (NVLS) stays off: the H200 machines lend GPUs without it working.
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

CLASSES = {"tiny": 5}


def build(name):
    import torch
    from torch import nn

    torch.manual_seed(0)
    if name == "tiny":
        return nn.Sequential(  # a small CNN: conv, batch norm, in-place relu, pooling, linear
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
            nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16),
            nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(16, CLASSES["tiny"])).train()
    import torchvision

    return getattr(torchvision.models, name)(weights=None).train()


def classes(name):
    return CLASSES.get(name, 1000)


def make_optimizer(params):
    import torch

    return torch.optim.SGD(params, lr=0.01, momentum=0.9)


def plan_file(d, args, rank):
    return os.path.join(d, f"{args.model}-b{args.batch}-r{args.resolution}-rank{rank}.json")


def reserve_from(pairs):
    """autovm.step_reserve of every rank's traced AutoVM run in each (trace, plans) of pairs (a
    --trace-memory result of this script, run with the plans in that folder): the memory PyTorch
    held beyond the plan, per step, the largest over the ranks and runs (their steps are
    alike)."""
    import autovm

    runs = []
    for trace_path, plans_dir in pairs:
        with open(trace_path) as f:
            doc = json.load(f)
        found = 0
        for r in doc["ranks"]:
            trace = r.get("autovm", {}).get("memory_trace")
            if trace is None:
                continue
            with open(os.path.join(plans_dir, r["plan"])) as f:
                runs.append((json.load(f), trace))
            found += 1
        if not found:
            raise SystemExit(f"ddp_train.py: {trace_path} has no memory trace (run with "
                             "--trace-memory)")
    return autovm.step_reserve(runs, len(runs[0][0]["steps"]))


def step_peaks(result_path, budget=None):
    """Per rank of a --trace-memory result, the most PyTorch held in each training step: the
    largest peak of the boundaries that step recorded (its first one, at the forward's start,
    also covers the end of the step before). Returns {rank: {step: bytes}}."""
    with open(result_path) as f:
        doc = json.load(f)
    peaks = {}
    for r in doc["ranks"]:
        trace = r.get("autovm", {}).get("memory_trace")
        if trace is None:
            continue
        by_step = peaks.setdefault(r["rank"], {})
        for e in trace:
            by_step[e["step"]] = max(by_step.get(e["step"], 0), int(e["peak"]))
    return peaks


def make_plans(d, args):
    """One plan per rank (the ranks' models and batches are alike, so are their plans), under
    --budget or --budget-fraction of PyTorch's modelled peak for this data-parallel step; with
    --reserve-from, PyTorch's extra memory measured step by step instead of the modelled margin
    (autovm.plan(reserve=...)), and at least the least budget a plan can then promise."""
    import torch

    import autovm

    os.makedirs(d, exist_ok=True)
    model = build(args.model)
    example = torch.zeros(1, 3, args.resolution, args.resolution).expand(args.batch, -1, -1, -1)
    opt = make_optimizer(model.parameters())
    kw = dict(planner=args.planner, lib=args.lib, data_parallel=True, bucket_mb=args.bucket_mb,
              extra_args=tuple(args.plan_arg))
    if args.reserve_from:
        kw["reserve"] = reserve_from(args.reserve_from)
    note = None
    low = autovm.plan(model, example, opt, budget="min", **kw)
    least = low.budget_bytes + (0 if "reserve" in kw else low.modelled_margin_bytes)
    if args.budget:
        budget = autovm.planner.parse_size(args.budget)
        asked = f"--budget {budget} B"
    else:
        free = autovm.plan(model, example, opt, **kw)
        budget = int(free.pytorch_memory["peak_allocated_bytes"] * args.budget_fraction)
        asked = f"{args.budget_fraction} of the modelled peak ({budget} B)"
    if budget < least:
        note = (f"{asked} is below what a plan moving activations only can keep PyTorch "
                f"within: planned for that, {least} B")
        budget = least
        print(note, flush=True)
    manifest = {"model": args.model, "batch": args.batch, "resolution": args.resolution,
                "bucket_mb": args.bucket_mb, "requested_budget_bytes": budget, "note": note,
                "reserve": "measured (--reserve-from)" if "reserve" in kw else None,
                "ranks": {}}
    for rank in range(args.world):
        t0 = time.monotonic()
        p = autovm.plan(model, example, opt, budget=budget, out=plan_file(d, args, rank), **kw)
        manifest["ranks"][str(rank)] = {
            "file": os.path.basename(p.path), "planner_budget_bytes": p.budget_bytes,
            "pytorch_margin_bytes": p.pytorch_margin_bytes,
            "predicted_pytorch_peak_bytes": p.pytorch_memory["peak_allocated_bytes"],
            "predicted_step_time_us": p.prediction.get("step_time_us"),
            "bound_us": p.prediction.get("bound_us"), "data_parallel": p.data_parallel,
            "actions": {f"{k[0]} {k[1]}": v for k, v in sorted(p.action_counts().items())}}
        print(f"rank {rank}: {args.model} b{args.batch} budget {budget / 1e9:.3f} GB (planned "
              f"under {p.budget_bytes / 1e9:.3f} GB, PyTorch margin "
              f"{p.pytorch_margin_bytes / 1e9:.3f} GB), {len(p.actions)} actions, "
              f"{time.monotonic() - t0:.0f} s -> {p.path}", flush=True)
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")
    return manifest


def _digest(state):
    h = hashlib.sha256()
    for k in sorted(state):
        t = state[k].detach().cpu().contiguous().reshape(-1)
        h.update(k.encode())
        h.update(t.view(__import__("torch").uint8).numpy().tobytes())
    return h.hexdigest()


def _bucket_sizes(ddp):
    """Bytes of each of the Reducer's buckets now (rebuilt after the first step)."""
    try:
        return [b.buffer().numel() * b.buffer().element_size()
                for b in ddp.reducer._get_zeros_like_grad_buckets()]
    except Exception:  # not in this torch: DDP's logging has them from the 3rd step on
        pass
    try:
        data = ddp._get_ddp_logging_data()
    except Exception:
        return None
    text = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes")
    if text is None:
        return None
    return [int(v) for v in str(text).replace(" ", "").split(",") if v]


def train(args, rank, device, plan=None):
    """One training run in this rank; returns what it measured."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    import autovm

    cuda = device.type == "cuda"
    model = build(args.model).to(device)
    ddp = DDP(model, device_ids=[device.index] if cuda else None, bucket_cap_mb=args.bucket_mb)
    opt = make_optimizer(ddp.parameters())
    g = torch.Generator().manual_seed(1000 + rank)  # each rank its own data
    x = torch.randn(args.batch, 3, args.resolution, args.resolution, generator=g).to(device)
    y = torch.randint(0, classes(args.model), (args.batch,), generator=g).to(device)
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    ctx = autovm.attach(ddp, opt, plan, unrealized="warn") if plan else contextlib.nullcontext()
    torch.manual_seed(7 + rank)
    losses, times = [], []
    trace = None
    tracing = plan is not None and cuda and args.trace_memory
    with ctx as run:
        if tracing:  # every step: DDP's first steps differ (it rebuilds its buckets)
            run.memory_trace = []
        for _ in range(args.steps):
            if cuda:
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(ddp(x), y)
            loss.backward()
            opt.step()
            if cuda:
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - t0)
            losses.append(loss.detach().cpu().clone())
        peak = torch.cuda.max_memory_allocated(device) if cuda else None
        if tracing:
            # Each boundary took the peak since the one before and reset it: the run's peak is
            # the largest of them.
            trace = run.memory_trace + [
                {"step": run.memory_trace[-1]["step"] if run.memory_trace else 0, "pos": "end",
                 "allocated": torch.cuda.memory_allocated(device), "peak": peak}]
            run.memory_trace = None
            peak = max(int(e["peak"]) for e in trace)
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    out = {"losses": [float(v) for v in losses],
           "losses_hex": [v.reshape(1).view(torch.int32).item() & 0xFFFFFFFF for v in losses],
           "weights_sha256": _digest(state),
           "step_ms": [t * 1e3 for t in times],
           "median_step_ms": statistics.median(times[1:] if len(times) > 1 else times) * 1e3,
           "ddp_bucket_sizes": _bucket_sizes(ddp)}
    if cuda:
        out["max_memory_allocated"] = peak
    if trace is not None:
        out["memory_trace"] = trace
    if plan is not None:
        out["adapter_stats"] = run.stats.as_dict()
    del ddp, model, opt, x, y
    if cuda:
        torch.cuda.empty_cache()
    return out, losses, state


def worker(rank, args, port, result_dir):
    import torch
    import torch.distributed as dist

    import autovm

    out = {"rank": rank}
    try:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        cuda = args.device == "cuda"
        if cuda:
            torch.cuda.set_device(rank)
            torch.backends.cudnn.benchmark = False
            torch.backends.cudnn.deterministic = True
            device = torch.device("cuda", rank)
            out["device"] = torch.cuda.get_device_name(device)
        else:
            torch.set_num_threads(max(1, (os.cpu_count() or 2) // args.world))
            device = torch.device("cpu")
            out["device"] = "cpu"
        dist.init_process_group(args.backend, rank=rank, world_size=args.world)
        path = plan_file(args.plans_dir, args, rank)
        plan = autovm.load_plan(path, lib=args.lib, requested_budget=args.requested_budget)
        out.update(plan=os.path.basename(path), requested_budget_bytes=plan.requested_budget_bytes,
                   planner_budget_bytes=plan.budget_bytes,
                   pytorch_margin_bytes=plan.pytorch_margin_bytes,
                   predicted_step_time_ms=plan.prediction.get("step_time_us", 0) / 1e3,
                   bound_ms=plan.prediction.get("bound_us", 0) / 1e3,
                   plan_bucket_sizes=[t["bytes"] for t in plan.tensors
                                      if t["name"].startswith("ddp_bucket.")])
        runs = []
        for i in range(args.plain_runs):
            r, losses, state = train(args, rank, device)
            runs.append((losses, state))
            out[f"plain{i + 1}" if args.plain_runs > 1 else "plain"] = r
        r, losses, state = train(args, rank, device, plan)
        out["autovm"] = r
        ref_losses, ref_state = runs[0]

        def same(a, b):
            return (a.shape == b.shape and a.dtype == b.dtype and
                    torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)))
        diffs = [f"loss {i}" for i, (a, b) in enumerate(zip(ref_losses, losses)) if not same(a, b)]
        diffs += [k for k in ref_state if not same(ref_state[k], state[k])]
        out["identical"] = not diffs
        out["differences"] = diffs[:10]
        if len(runs) > 1:
            out["plain_deterministic"] = (
                all(same(a, b) for a, b in zip(runs[0][0], runs[1][0]))
                and all(same(runs[0][1][k], runs[1][1][k]) for k in ref_state))
        if cuda:
            out["peak_within_budget"] = r["max_memory_allocated"] <= plan.requested_budget_bytes
        dist.barrier()
        dist.destroy_process_group()
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
        out["traceback"] = traceback.format_exc()[-3000:]
    with open(os.path.join(result_dir, f"rank{rank}.json"), "w") as f:
        json.dump(out, f, indent=2)


def nccl_version():
    import torch

    try:
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)
    except Exception as e:
        return f"unknown ({type(e).__name__})"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__[__doc__.index("autovm-plan does not"):])
    ap.add_argument("--model", default="resnet50", help="'tiny' or a torchvision model name")
    ap.add_argument("--batch", type=int, default=64, help="batch per rank")
    ap.add_argument("--resolution", type=int, default=224)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--world", type=int, default=2, help="ranks (one GPU each)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None,
                    help="default: cuda when available")
    ap.add_argument("--backend", choices=("nccl", "gloo"), default=None,
                    help="default: nccl on cuda, gloo on cpu")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP's bucket_cap_mb")
    ap.add_argument("--budget", help="each rank's budget (a size, e.g. 4GB); default: "
                                     "--budget-fraction of PyTorch's modelled peak")
    ap.add_argument("--budget-fraction", type=float, default=0.5)
    ap.add_argument("--plain-runs", type=int, default=None,
                    help="plain DDP runs before the AutoVM one (default: 2 on cuda, 1 on cpu)")
    ap.add_argument("--plan-arg", action="append", default=[],
                    help="extra autovm-plan argument (repeat; e.g. --plan-arg=--workspace-limit "
                         "--plan-arg=4KB)")
    ap.add_argument("--make-plans", metavar="DIR", help="make the ranks' plans into DIR and exit")
    ap.add_argument("--reserve-from", nargs=2, metavar=("TRACE", "PLANS"), action="append",
                    help="with --make-plans: plan with PyTorch's extra memory measured step by "
                         "step in TRACE (a --trace-memory result of this script) under the plans "
                         "in PLANS (autovm.step_reserve), instead of the modelled margin; given "
                         "more than once, the largest over all the runs")
    ap.add_argument("--step-peaks", metavar="RESULT",
                    help="print, per rank of a --trace-memory result, the most PyTorch held in "
                         "each training step (MiB), and exit")
    ap.add_argument("--trace-memory", action="store_true",
                    help="on cuda, record in every AutoVM step the memory PyTorch held at each "
                         "plan boundary (Attachment.memory_trace) into the result's "
                         "ranks[].autovm.memory_trace (its steps then take longer: the host "
                         "reads the allocator at each boundary)")
    ap.add_argument("--plans-dir", metavar="DIR",
                    help="plans made with --make-plans (default: plan now, into a temporary "
                         "folder; needs autovm-plan)")
    ap.add_argument("--planner", help="autovm-plan (default: $AUTOVM_PLAN or the build's)")
    ap.add_argument("--lib", help="libautovm (default: $AUTOVM_LIB or the build's)")
    ap.add_argument("--out", metavar="JSON", help="write the results here")
    args = ap.parse_args()
    if args.lib:
        args.lib = os.path.abspath(args.lib)
        os.environ["AUTOVM_LIB"] = args.lib
    if args.step_peaks:
        peaks = step_peaks(args.step_peaks)
        if not peaks:
            ap.error(f"{args.step_peaks} has no memory trace (run with --trace-memory)")
        for rank, by_step in sorted(peaks.items()):
            print(f"rank {rank}: " + ", ".join(f"step {k} {v / 2**20:.0f} MiB"
                                               for k, v in sorted(by_step.items())))
        return 0
    if args.reserve_from and not args.make_plans:
        ap.error("--reserve-from needs --make-plans")
    if args.make_plans:
        make_plans(args.make_plans, args)
        return 0

    import torch
    import torch.multiprocessing as mp

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.backend is None:
        args.backend = "nccl" if args.device == "cuda" else "gloo"
    if args.plain_runs is None:
        args.plain_runs = 2 if args.device == "cuda" else 1
    if args.device == "cuda" and torch.cuda.device_count() < args.world:
        print(f"ddp_train.py: {args.world} ranks need {args.world} GPUs, "
              f"{torch.cuda.device_count()} here", file=sys.stderr)
        return 77
    tmp = tempfile.mkdtemp(prefix="autovm-ddp-")
    if not args.plans_dir:
        args.plans_dir = os.path.join(tmp, "plans")
        make_plans(args.plans_dir, args)
    with open(os.path.join(args.plans_dir, "manifest.json")) as f:
        manifest = json.load(f)
    for key in ("model", "batch", "resolution"):
        if manifest.get(key) != getattr(args, key):
            ap.error(f"--plans-dir was made for {key} {manifest.get(key)}, not "
                     f"{getattr(args, key)}")
    args.requested_budget = manifest["requested_budget_bytes"]
    result_dir = os.path.join(tmp, "results")
    os.makedirs(result_dir)
    t0 = time.monotonic()
    spawn_error = None
    try:
        mp.spawn(worker, args=(args, free_port(), result_dir), nprocs=args.world, join=True)
    except Exception as e:
        spawn_error = f"{type(e).__name__}: {e}"
    ranks = []
    for rank in range(args.world):
        p = os.path.join(result_dir, f"rank{rank}.json")
        ranks.append(json.load(open(p)) if os.path.exists(p) else
                     {"rank": rank, "error": spawn_error or "no result"})
    ok = all("error" not in r and r.get("identical") for r in ranks)
    if args.device == "cuda":
        ok = ok and all(r.get("peak_within_budget") for r in ranks)
    doc = {"model": args.model, "batch_per_rank": args.batch, "resolution": args.resolution,
           "world": args.world, "device": args.device, "backend": args.backend,
           "steps": args.steps, "bucket_mb": args.bucket_mb, "torch": torch.__version__,
           "python": platform.python_version(),
           "nccl": nccl_version() if args.device == "cuda" else None,
           "env": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "CUBLAS_WORKSPACE_CONFIG")},
           "plans": manifest, "wall_s": time.monotonic() - t0,
           "all_identical": all(r.get("identical") for r in ranks), "ok": ok, "ranks": ranks}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    for r in ranks:
        if "error" in r:
            print(f"rank {r['rank']}: ERROR {r['error']}\n{r.get('traceback', '')}")
            continue
        a = r["autovm"]
        plain = r.get("plain") or r.get("plain1")
        peak = (f", peak {a['max_memory_allocated'] / 1e9:.2f} GB (plain "
                f"{plain['max_memory_allocated'] / 1e9:.2f}) vs budget "
                f"{r['requested_budget_bytes'] / 1e9:.2f} GB" if "max_memory_allocated" in a
                else "")
        print(f"rank {r['rank']} ({r['device']}): identical {r['identical']}"
              + (f" (plain vs plain {r['plain_deterministic']})" if "plain_deterministic" in r
                 else "")
              + f", step {a['median_step_ms']:.1f} ms (plain {plain['median_step_ms']:.1f}, "
                f"predicted {r['predicted_step_time_ms']:.1f}){peak}; losses {a['losses']}; "
                f"{a['adapter_stats']}; DDP buckets {a['ddp_bucket_sizes']} plan "
                f"{r['plan_bucket_sizes']}")
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
