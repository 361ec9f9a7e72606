#!/usr/bin/env python3
"""AutoVM's PyTorch adapter against PyTorch's own ways to save memory, on one CUDA GPU.

VGG-19 and ResNet-50 at batch 256, fp32, 224x224, SGD with momentum, default cuDNN settings;
for each model:
  plain         plain PyTorch
  save_on_cpu   torch.autograd.graph.save_on_cpu(pin_memory=True)
  checkpoint    VGG: torch.utils.checkpoint.checkpoint_sequential(features, 4 segments);
                ResNet: torch.utils.checkpoint.checkpoint of each layerN
  autovm_soc    autovm.attach under a plan whose budget is save_on_cpu's measured peak
  autovm_half   autovm.attach under a plan whose budget is 50 % of plain's measured peak
  autovm_ckpt   autovm.attach under a plan whose budget is checkpointing's measured peak
  autovm_free   autovm.attach under a plan without a budget (no actions): plain PyTorch seen
                through the adapter's boundaries (not in the default --configs; for
                --trace-memory)
  autovm_rc_soc, autovm_rc_half, autovm_rc_ckpt
                the same three budgets, with plans that also regenerate tensors the adapter
                can replay (autovm.plan(..., recompute=True): convolutions, batch norm, ReLU,
                max pooling and additions)
Every AutoVM plan is made with autovm-plan --pool-indices (what autovm.plan() passes): max
pooling's int64 indices are tensors of the plan, moved by the adapter like any saved tensor.
Per configuration: the median step time of 8 steps after 3 warm-up steps (torch.cuda.synchronize
around each), torch.cuda.max_memory_allocated(), the last loss; for AutoVM also the planner's
predicted step time and lower bound (statistics.prediction: step_time_us, bound_us) and the
adapter's stats (bytes moved, late prefetches). One JSON to --out and a printed table.
With --trace-memory, each AutoVM configuration runs one more step after those, recording at
every plan boundary torch.cuda.memory_allocated() and the peak since the previous boundary
(Attachment.memory_trace) into the result's "memory_trace". With --trace-time, each AutoVM
configuration runs --steps more steps with a CUDA event at every plan boundary
(Attachment.time_trace) into "time_rows"; those of autovm_free (no budget, no actions: plain
PyTorch seen through the adapter's boundaries) are the profile run that --make-plans
--step-times-from turns into each step's measured time (autovm.step_times) for autovm-plan
--step-times. With --profile DIR, each configuration runs one more step under
torch.profiler (CPU and CUDA activity): its Chrome trace goes to DIR/MODEL-CONFIG.trace.json.gz
(-2, -3 ... for a configuration run again), and the result's "profile" holds what the trace
says of the step (profile_summary): each copy of 64 MB or more (direction, start from the first
GPU event, duration, bytes, GB/s) and the longest gaps between kernels on the stream that ran
the most kernel time.

autovm-plan does not run on the GPU machine (no Debian libraries there), so plans are made
beforehand, here, with --make-plans (CPU, Debian's torch 1.13), from the peaks measured on the
H200 (/work/shared/facts/h200.md): VGG-19 b256 plain 22.3 GB, save_on_cpu 18.4 GB; ResNet-50
b256 plain 22.5 GB, save_on_cpu 4.2 GB (GB = 1e9 B); checkpointing's peaks from this script's
own runs (VGG-19 19.22 GB, ResNet-50 12.66 GB). Each budget is what PyTorch may hold:
autovm.plan() plans under it less PyTorch's modelled extra memory over AutoVM's training graph,
moving saved activations only (--movable activation; the adapter moves
nothing else); the manifest records the budget, the planner's budget and the margin, and the
results compare the measured peak with the budget.

  # here:
  /usr/bin/python3 tools/bench/pytorch_compare.py --make-plans tools/bench/data/pytorch/plans
  # on the GPU machine (carry build/runtime/libautovm.so.1 and the plans):
  python3 tools/bench/pytorch_compare.py --plans-dir tools/bench/data/pytorch/plans \
      --lib build/runtime/libautovm.so.1 --out compare.json
"""
import argparse
import contextlib
import inspect
import json
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

BATCH = 256
RESOLUTION = 224
# Peaks measured on the H200 with PyTorch 2.11 (h200.md), bytes.
MEASURED = {"vgg19": {"plain": 22.3e9, "save_on_cpu": 18.4e9, "checkpoint": 19.22e9},
            "resnet50": {"plain": 22.5e9, "save_on_cpu": 4.2e9, "checkpoint": 12.66e9}}
PLAN_LABELS = {"autovm_soc": "the save_on_cpu peak", "autovm_half": "50 % of plain's peak",
               "autovm_ckpt": "the checkpoint peak", "autovm_free": "no budget",
               "autovm_rc_soc": "the save_on_cpu peak, recomputing",
               "autovm_rc_half": "50 % of plain's peak, recomputing",
               "autovm_rc_ckpt": "the checkpoint peak, recomputing"}
CONFIGS = ["plain", "save_on_cpu", "checkpoint", "autovm_soc", "autovm_half", "autovm_ckpt",
           "autovm_rc_soc", "autovm_rc_half", "autovm_rc_ckpt"]
NO_BUDGET = 10**15  # bytes: more than any step holds, so the plan has no actions


def budgets(name):
    m = MEASURED[name]
    b = {"autovm_soc": int(m["save_on_cpu"]), "autovm_half": int(m["plain"] * 0.5),
         "autovm_ckpt": int(m["checkpoint"]), "autovm_free": NO_BUDGET}
    b.update({f"autovm_rc_{k[len('autovm_'):]}": v for k, v in list(b.items()) if k != "autovm_free"})
    return b


def plan_path(d, name, label):
    return os.path.join(d, f"{name}-b{BATCH}-{label}.json")


def build(name):
    import torch
    import torchvision

    torch.manual_seed(0)
    return getattr(torchvision.models, name)(weights=None).train()


def make_optimizer(model):
    import torch

    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def reserves_from(pairs):
    """{model: autovm.step_reserve of every traced AutoVM run of it}: the memory PyTorch held
    beyond each plan, per step, measured with --trace-memory; pairs = [(trace JSON, the
    directory of the plans it ran)], the reserve being the largest over all of their runs."""
    import autovm

    runs = {}
    for trace_path, plans_dir in pairs:
        with open(trace_path) as f:
            doc = json.load(f)
        for r in doc["results"]:
            if "memory_trace" not in r:
                continue
            with open(os.path.join(plans_dir, r["plan"])) as f:
                plan_doc = json.load(f)
            runs.setdefault(r["model"], []).append((plan_doc, r["memory_trace"]))
    return {m: autovm.step_reserve(rs, len(rs[0][0]["steps"])) for m, rs in runs.items()}


def make_plans(d, names, planner, lib, reserves=None, step_times=None):
    import torch

    import autovm

    os.makedirs(d, exist_ok=True)
    manifest = {}
    with contextlib.suppress(OSError, ValueError):  # other models' entries stay
        with open(os.path.join(d, "manifest.json")) as f:
            manifest = {k: v for k, v in json.load(f).items() if k.split("/")[0] not in names}
    for name in names:
        model = build(name)
        x = torch.randn(1, 3, RESOLUTION, RESOLUTION)
        example = x.expand(BATCH, -1, -1, -1)  # plan() reads its batch size; exports 2 of it
        onnx_path = os.path.join(d, f"{name}.onnx")
        for label, budget in budgets(name).items():
            t0 = time.monotonic()
            out = plan_path(d, name, label)
            asked, note = budget, None
            kw = dict(planner=planner, lib=lib, recompute=label.startswith("autovm_rc_"))
            if reserves and name in reserves:
                kw["reserve"] = reserves[name]
            if step_times and name in step_times:
                kw["step_times"] = step_times[name]
            try:
                p = autovm.plan(model, example, make_optimizer(model), budget=budget, out=out,
                                keep_onnx=onnx_path if not os.path.exists(onnx_path) else None,
                                **kw)
            except autovm.PlannerError as e:
                if e.exit_code != 6:
                    print(f"{name} {label}: {e}", flush=True)
                    manifest[f"{name}/{label}"] = {"budget_bytes": budget, "error": str(e)}
                    continue
                # Below what activations-only plans plus PyTorch's margin can promise: plan at
                # the smallest budget that can (the smallest planner budget plus the margin).
                low = autovm.plan(model, example, make_optimizer(model), budget="min", **kw)
                margin = 0 if "reserve" in kw else low.modelled_margin_bytes
                budget = low.budget_bytes + margin
                note = (f"{asked / 1e9:.2f} GB is below what a plan moving activations only can "
                        f"keep PyTorch within ({budget / 1e9:.2f} GB: the smallest planner "
                        f"budget {low.budget_bytes / 1e9:.2f} GB plus PyTorch's margin "
                        f"{margin / 1e9:.2f} GB); planned for that")
                print(f"{name} {label}: {note}", flush=True)
                p = autovm.plan(model, example, make_optimizer(model), budget=budget, out=out,
                                **kw)
            pr = p.prediction
            manifest[f"{name}/{label}"] = {
                "file": os.path.basename(out), "budget_bytes": budget,
                "asked_budget_bytes": asked, "note": note,
                "planner_budget_bytes": p.budget_bytes,
                "pytorch_margin_bytes": p.pytorch_margin_bytes,
                "predicted_pytorch_peak_unplanned_bytes": p.pytorch_memory["peak_allocated_bytes"],
                "movable": ",".join(p.options.get("movable", [])), "recompute": kw["recompute"],
                "reserve": "measured (--reserve-from)" if "reserve" in kw else None,
                "step_times": "measured (--step-times-from)" if "step_times" in kw else None,
                "predicted_step_time_us": pr.get("step_time_us"), "bound_us": pr.get("bound_us"),
                "actions": {f"{k[0]} {k[1]}": v for k, v in sorted(p.action_counts().items())}}
            print(f"{name} {label}: budget {budget / 1e9:.2f} GB (planned under "
                  f"{p.budget_bytes / 1e9:.2f} GB: PyTorch margin "
                  f"{p.pytorch_margin_bytes / 1e9:.2f} GB), predicted "
                  f"{pr.get('step_time_us', 0) / 1e3:.1f} ms (bound {pr.get('bound_us', 0) / 1e3:.1f}"
                  f" ms), {len(p.actions)} actions, {time.monotonic() - t0:.0f} s -> {out}",
                  flush=True)
        if os.path.exists(onnx_path):
            os.remove(onnx_path)
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")


def forward_fn(name, model, config):
    """The forward pass of `config` (checkpointing changes how the model is called)."""
    import torch
    from torch.utils import checkpoint as ckpt

    if config != "checkpoint":
        return model
    kw = {}
    if "use_reentrant" in inspect.signature(ckpt.checkpoint_sequential).parameters:
        kw["use_reentrant"] = False
    if name.startswith("vgg"):
        def fwd(x):
            x = ckpt.checkpoint_sequential(model.features, 4, x, **kw)
            return model.classifier(torch.flatten(model.avgpool(x), 1))
        return fwd

    def fwd(x):
        m = model
        x = m.maxpool(m.relu(m.bn1(m.conv1(x))))
        for layer in (m.layer1, m.layer2, m.layer3, m.layer4):
            x = ckpt.checkpoint(layer, x, use_reentrant=False)
        return m.fc(torch.flatten(m.avgpool(x), 1))
    return fwd


def step_times_from(trace_path, plans_dir):
    """{model: {"step_us": [...]}}: each plan step's time measured by a --trace-time run (its
    JSON) of the autovm_free configuration, whose plan (no budget) is in plans_dir."""
    import autovm

    with open(trace_path) as f:
        doc = json.load(f)
    out = {}
    for r in doc["results"]:
        if r.get("config") != "autovm_free" or "time_rows" not in r:
            continue
        with open(os.path.join(plans_dir, r["plan"])) as f:
            plan_doc = json.load(f)
        out[r["model"]] = autovm.step_times(plan_doc["steps"], r["time_rows"], skip=0)
    if not out:
        raise SystemExit(f"{trace_path}: no autovm_free result with time_rows (run it with "
                         "--configs autovm_free --trace-time)")
    return out


def profile_summary(trace, min_copy_bytes=64 << 20, gaps=20):
    """What a torch.profiler Chrome trace (the loaded JSON) says of one step: its copies of
    min_copy_bytes or more, and the `gaps` longest idle gaps between kernels on the stream with
    the most kernel time. Times in ms from the first GPU event."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    gpu = [e for e in events
           if str(e.get("cat", "")).lower() in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not gpu:
        return {"error": "no GPU events in the trace"}
    t0 = min(e["ts"] for e in gpu)
    copies = []
    for e in gpu:
        if str(e.get("cat", "")).lower() != "gpu_memcpy":
            continue
        args = e.get("args", {})
        nbytes = int(args.get("bytes", 0) or 0)
        if nbytes < min_copy_bytes:
            continue
        copies.append({"name": e.get("name"), "stream": args.get("stream"),
                       "start_ms": (e["ts"] - t0) / 1e3, "ms": e["dur"] / 1e3, "bytes": nbytes,
                       "GBps": nbytes / (e["dur"] * 1e3) if e["dur"] > 0 else None})
    copies.sort(key=lambda c: c["start_ms"])
    by_stream = {}
    for e in gpu:
        if str(e.get("cat", "")).lower() == "kernel":
            by_stream.setdefault(e.get("args", {}).get("stream"), []).append(e)
    stream, kernels = max(by_stream.items(), key=lambda kv: sum(e["dur"] for e in kv[1]),
                          default=(None, []))
    kernels.sort(key=lambda e: e["ts"])
    holes = []
    for a, b in zip(kernels, kernels[1:]):
        idle = b["ts"] - (a["ts"] + a["dur"])
        if idle > 0:
            holes.append({"after_ms": (a["ts"] + a["dur"] - t0) / 1e3, "idle_ms": idle / 1e3,
                          "before": str(a.get("name"))[:60], "after": str(b.get("name"))[:60]})
    holes.sort(key=lambda h: -h["idle_ms"])
    span = (max(e["ts"] + e["dur"] for e in gpu) - t0) / 1e3
    return {"gpu_span_ms": span, "compute_stream": stream,
            "compute_stream_kernel_ms": sum(e["dur"] for e in kernels) / 1e3,
            "compute_stream_idle_ms": sum(h["idle_ms"] for h in holes),
            "copies": copies, "longest_gaps": holes[:gaps]}


def run_config(name, config, plan_dir, lib, warmup, steps, trace_memory=False,
               trace_time=False, profile_dir=None):
    import contextlib

    import torch
    import torch.nn.functional as F

    import autovm

    dev = torch.device("cuda")
    model = build(name).to(dev)
    opt = make_optimizer(model)
    g = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(BATCH, 3, RESOLUTION, RESOLUTION, generator=g).to(dev)
    y = torch.randint(0, 1000, (BATCH,), generator=g).to(dev)
    fwd = forward_fn(name, model, config)
    result = {"model": name, "config": config, "batch": BATCH}
    plan = None
    if config.startswith("autovm"):
        path = plan_path(plan_dir, name, config)
        requested = None
        with contextlib.suppress(OSError, KeyError, ValueError):
            with open(os.path.join(plan_dir, "manifest.json")) as f:
                requested = json.load(f)[f"{name}/{config}"]["budget_bytes"]
        plan = autovm.load_plan(path, lib=lib, requested_budget=requested)
        result.update(plan=os.path.basename(path), budget_bytes=plan.requested_budget_bytes,
                      planner_budget_bytes=plan.budget_bytes,
                      pytorch_margin_bytes=plan.pytorch_margin_bytes,
                      predicted_step_time_ms=plan.prediction.get("step_time_us", 0) / 1e3,
                      bound_ms=plan.prediction.get("bound_us", 0) / 1e3,
                      planned_actions={f"{k[0]} {k[1]}": v
                                       for k, v in sorted(plan.action_counts().items())})
    if config == "save_on_cpu":
        ctx = torch.autograd.graph.save_on_cpu(pin_memory=True)
    elif plan is not None:
        ctx = autovm.attach(model, opt, plan, unrealized="ignore")
    else:
        ctx = contextlib.nullcontext()
    times, loss = [], None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    with ctx as run:
        for i in range(warmup + steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(fwd(x), y)
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        result.update(step_ms=statistics.median(times) * 1e3,
                      step_ms_all=[t * 1e3 for t in times],
                      max_memory_allocated=torch.cuda.max_memory_allocated(),
                      last_loss=float(loss.item()))
        if plan is not None and trace_memory:
            run.memory_trace = []
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(fwd(x), y).backward()
            opt.step()
            torch.cuda.synchronize()
            result["memory_trace"] = run.memory_trace + [
                {"step": run.memory_trace[-1]["step"] if run.memory_trace else 0, "pos": "end",
                 "allocated": torch.cuda.memory_allocated(),
                 "peak": torch.cuda.max_memory_allocated()}]
            run.memory_trace = None
        if plan is not None and trace_time:
            run.time_trace = []
            for _ in range(steps):
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(fwd(x), y).backward()
                opt.step()
            result["time_rows"] = run.time_rows()
            run.time_trace = None
            st = autovm.step_times(plan.steps, result["time_rows"], skip=0)["step_us"]
            result["timed_step_ms"] = sum(st) / 1e3
        if profile_dir:
            import gzip

            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(fwd(x), y).backward()
                opt.step()
                torch.cuda.synchronize()
            os.makedirs(profile_dir, exist_ok=True)
            raw = os.path.join(profile_dir, f".{name}-{config}.trace.json")
            prof.export_chrome_trace(raw)
            with open(raw) as f:
                trace = json.load(f)
            result["profile"] = profile_summary(trace)
            path, k = os.path.join(profile_dir, f"{name}-{config}.trace.json.gz"), 1
            while os.path.exists(path):  # a configuration run twice keeps both traces
                k += 1
                path = os.path.join(profile_dir, f"{name}-{config}-{k}.trace.json.gz")
            with open(raw, "rb") as f, gzip.open(path, "wb") as out:
                out.write(f.read())
            os.remove(raw)
            result["profile"]["trace"] = os.path.basename(path)
    if plan is not None:
        result["peak_within_budget"] = result["max_memory_allocated"] <= result["budget_bytes"]
    if plan is not None:
        result["adapter_stats"] = run.stats.as_dict()
    del model, opt, x, y, fwd, run, ctx
    torch.cuda.empty_cache()
    return result


def table(results):
    lines = [f"{'model':<9} {'config':<12} {'step ms':>9} {'vs plain':>8} {'peak GB':>8} "
             f"{'budget GB':>9} {'pred ms':>8} {'bound ms':>8} {'to host GB':>10} {'late':>5}"]
    plain = {r["model"]: r.get("step_ms") for r in results if r["config"] == "plain"}
    for r in results:
        if "error" in r:
            lines.append(f"{r['model']:<9} {r['config']:<12} ERROR {r['error'][:90]}")
            continue
        base = plain.get(r["model"])
        rel = f"{r['step_ms'] / base:.2f}x" if base else "-"
        st = r.get("adapter_stats", {})
        pred = f"{r['predicted_step_time_ms']:.1f}" if "predicted_step_time_ms" in r else "-"
        bound = f"{r['bound_ms']:.1f}" if "bound_ms" in r else "-"
        host = f"{st['bytes_to_host'] / 1e9 / max(1, st['training_steps']):.2f}" if st else "-"
        late = str(st.get("late_prefetches", "-")) if st else "-"
        budget = f"{r['budget_bytes'] / 1e9:.2f}" if "budget_bytes" in r else "-"
        lines.append(f"{r['model']:<9} {r['config']:<12} {r['step_ms']:9.1f} {rel:>8} "
                     f"{r['max_memory_allocated'] / 1e9:8.2f} {budget:>9} {pred:>8} {bound:>8} "
                     f"{host:>10} {late:>5}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__[__doc__.index("  # here"):])
    ap.add_argument("--make-plans", metavar="DIR",
                    help="export and plan the AutoVM configurations into DIR (no GPU) and exit")
    ap.add_argument("--plans-dir", metavar="DIR", help="plans made with --make-plans")
    ap.add_argument("--out", metavar="JSON", help="write the results here")
    ap.add_argument("--models", default="vgg19,resnet50")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--reserve-from", nargs=2, metavar=("TRACE", "PLANS"),
                    action="append",
                    help="--make-plans: plan with the memory PyTorch held beyond the plans, per "
                         "step, measured by a --trace-memory run (its JSON) under the plans in "
                         "PLANS (autovm.step_reserve), instead of the modelled margin; given "
                         "more than once, the largest over all the runs")
    ap.add_argument("--step-times-from", nargs=2, metavar=("TRACE", "PLANS"),
                    help="--make-plans: plan with each step's compute time measured by a "
                         "--trace-time run (its JSON) of autovm_free under the plans in PLANS "
                         "(autovm.step_times), instead of the cost model's")
    ap.add_argument("--write-reserves", metavar="DIR",
                    help="with --reserve-from: write each model's reserve to "
                         "DIR/MODEL-reserve.json (for autovm-plan --reserve), and with "
                         "--step-times-from its step times to DIR/MODEL-step-times.json "
                         "(for --step-times), and exit")
    ap.add_argument("--planner", help="autovm-plan (--make-plans; default: $AUTOVM_PLAN or "
                                      "the build's)")
    ap.add_argument("--lib", help="libautovm (default: $AUTOVM_LIB or the build's)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--trace-time", action="store_true",
                    help="time every plan boundary of --steps more steps with CUDA events "
                         "(AutoVM configurations; autovm_free gives --step-times-from its times)")
    ap.add_argument("--profile", metavar="DIR",
                    help="profile one more step of each configuration with torch.profiler: "
                         "its gzipped Chrome trace to DIR, a summary in the result")
    ap.add_argument("--trace-memory", action="store_true",
                    help="record PyTorch's memory at every plan boundary of one more step "
                         "(AutoVM configurations)")
    args = ap.parse_args()
    names = [n for n in args.models.split(",") if n]
    for n in names:
        if n not in MEASURED:
            ap.error(f"--models: {n} has no measured peaks (known: {', '.join(MEASURED)})")
    if args.write_reserves:
        if not args.reserve_from:
            ap.error("--write-reserves needs --reserve-from")
        os.makedirs(args.write_reserves, exist_ok=True)
        for model, reserve in reserves_from(args.reserve_from).items():
            path = os.path.join(args.write_reserves, f"{model}-reserve.json")
            with open(path, "w") as f:
                json.dump(reserve, f)
            print(f"{model}: {len(reserve['step_bytes'])} steps -> {path}")
        if args.step_times_from:
            for model, times in step_times_from(*args.step_times_from).items():
                path = os.path.join(args.write_reserves, f"{model}-step-times.json")
                with open(path, "w") as f:
                    json.dump(times, f)
                print(f"{model}: {len(times['step_us'])} step times -> {path}")
        return 0
    if args.make_plans:
        reserves = reserves_from(args.reserve_from) if args.reserve_from else None
        times = step_times_from(*args.step_times_from) if args.step_times_from else None
        make_plans(args.make_plans, names, args.planner, args.lib, reserves, times)
        return 0
    import torch

    if not torch.cuda.is_available():
        print("pytorch_compare.py measures on a CUDA GPU; there is none here "
              "(--make-plans runs without one)", file=sys.stderr)
        return 77
    configs = [c for c in args.configs.split(",") if c]
    if any(c.startswith("autovm") for c in configs) and not args.plans_dir:
        ap.error("the autovm configurations need --plans-dir (plans made with --make-plans)")
    results = []
    for name in names:
        for config in configs:
            try:
                r = run_config(name, config, args.plans_dir, args.lib, args.warmup, args.steps,
                               args.trace_memory, args.trace_time, args.profile)
            except Exception as e:  # one configuration failing (OOM, say) must not lose the rest
                r = {"model": name, "config": config, "error": f"{type(e).__name__}: {e}"}
                torch.cuda.empty_cache()
            results.append(r)
            print(json.dumps(r), flush=True)
    doc = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "python": platform.python_version(), "batch": BATCH, "resolution": RESOLUTION,
           "warmup": args.warmup, "steps": args.steps, "results": results}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    print(table(results))
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
