#!/usr/bin/env python3
"""What libautovm's pool costs as PyTorch's allocator: plain training (torchvision models, fp32,
SGD with momentum, random data, cuDNN benchmark off on every side because the global pluggable
allocator cannot run it) on PyTorch's caching allocator against the pool on managed memory and on
VMM memory (autovm.allocator.install) and the pool on managed memory behind a torch.cuda.MemPool
(install_mempool). Each run is a fresh process (PyTorch's allocator is chosen once a process);
the runs alternate, the allocators' order rotating each round, and each allocator's figure is
the median over rounds of its mean step time (CUDA events, after warm-up steps). The ratio is
that figure over the caching allocator's. Then DDP with one rank (NCCL, NVLink multicast off)
trains a few steps on each allocator; its losses must match the caching allocator's bit for bit.

usage: allocator_overhead.py --lib LIBAUTOVM [--models vgg19 resnet50] [--batch 256]
           [--allocators caching managed vmm mempool] [--rounds 2] [--steps 10] [--warmup 3]
           [--ddp-model resnet50] [--ddp-steps 4] [--out RESULT.json]
Prints one JSON object (and writes it to --out).
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))


def child(a):
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    import torch
    from autovm import allocator as pool

    mempool = None
    if a.child in ("managed", "vmm"):
        pool.install(a.child, lib_path=a.lib)
    elif a.child == "mempool":
        mempool = pool.install_mempool("managed", lib_path=a.lib)
        torch.autograd.set_multithreading_enabled(False)
    import contextlib

    import torchvision

    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = a.ddp  # DDP's losses are compared bit for bit
    torch.manual_seed(0)
    scope = torch.cuda.use_mem_pool(mempool) if mempool is not None else contextlib.nullcontext()
    with scope:
        model = getattr(torchvision.models, a.model)().cuda()
        if a.ddp:
            import torch.distributed as dist
            dist.init_process_group("nccl", init_method=f"file://{a.ddp_file}", rank=0,
                                    world_size=1)
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        g = torch.Generator(device="cpu").manual_seed(1)
        x = torch.randn(a.batch, 3, 224, 224, generator=g).cuda()
        y = torch.randint(0, 1000, (a.batch,), generator=g).cuda()
        losses, events = [], []
        for i in range(a.warmup + a.steps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            end.record()
            losses.append(loss.detach())
            if i >= a.warmup:
                events.append((start, end))
        torch.cuda.synchronize()
        step_ms = [s.elapsed_time(e) for s, e in events]
        out = {"model": a.model, "allocator": a.child, "batch": a.batch, "ddp": a.ddp,
               "step_ms": step_ms, "mean_ms": sum(step_ms) / len(step_ms),
               "losses": [float.hex(v.item()) for v in losses]}
        if a.child in ("caching", "mempool"):
            out["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        if a.child != "caching":
            s = pool.stats()
            out["pool"] = {k: s[k] for k in ("peak_allocated_bytes", "peak_resident_bytes",
                                             "alloc_calls", "cross_stream_waits")}
            if a.child != "mempool":
                out["peak_allocated_bytes"] = s["peak_allocated_bytes"]
        if a.ddp:
            torch.distributed.destroy_process_group()
    print(json.dumps(out))


def run(a, model, allocator, steps, warmup, ddp=False, tmp=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", allocator, "--model", model,
           "--batch", str(a.batch), "--steps", str(steps), "--warmup", str(warmup),
           "--lib", a.lib]
    if ddp:
        cmd += ["--ddp", "--ddp-file", os.path.join(tmp, f"ddp-{allocator}")]
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        return {"model": model, "allocator": allocator, "ddp": ddp,
                "error": f"exit {r.returncode}: {r.stderr[-2000:]}"}
    result = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"{model} {allocator}{' ddp' if ddp else ''}: {result['mean_ms']:.2f} ms/step",
          file=sys.stderr, flush=True)
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--models", nargs="+", default=["vgg19", "resnet50"])
    ap.add_argument("--allocators", nargs="+", default=["caching", "managed", "vmm", "mempool"])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--ddp-model", default="resnet50")
    ap.add_argument("--ddp-steps", type=int, default=4)
    ap.add_argument("--out")
    # one run (internal)
    ap.add_argument("--child")
    ap.add_argument("--model")
    ap.add_argument("--ddp", action="store_true")
    ap.add_argument("--ddp-file")
    a = ap.parse_args()
    if a.child:
        child(a)
        return 0
    import torch

    result = {"tool": "tools/bench/allocator_overhead.py", "command": " ".join(sys.argv),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "batch": a.batch, "steps": a.steps, "warmup": a.warmup, "rounds": a.rounds,
              "runs": [], "summary": {}, "ddp": []}
    for r in range(a.rounds):
        order = a.allocators[r % len(a.allocators):] + a.allocators[:r % len(a.allocators)]
        for model in a.models:
            for allocator in order:
                one = run(a, model, allocator, a.steps, a.warmup)
                one["round"] = r
                result["runs"].append(one)
    for model in a.models:
        runs = [x for x in result["runs"] if x["model"] == model and "error" not in x]
        by = {al: [x["mean_ms"] for x in runs if x["allocator"] == al] for al in a.allocators}
        base = statistics.median(by["caching"]) if by.get("caching") else None
        summary = {}
        for al, means in by.items():
            if not means:
                continue
            median = statistics.median(means)
            peaks = [x.get("peak_allocated_bytes") for x in runs if x["allocator"] == al]
            summary[al] = {"median_ms": round(median, 3), "means_ms": [round(m, 3) for m in means],
                           "ratio_to_caching": round(median / base, 4) if base else None,
                           "peak_allocated_bytes": max(p for p in peaks if p) if any(peaks) else None}
        result["summary"][model] = summary
    if a.ddp_steps > 0:
        with tempfile.TemporaryDirectory() as tmp:
            ddp = [run(a, a.ddp_model, al, a.ddp_steps, 1, ddp=True, tmp=tmp)
                   for al in a.allocators if al != "mempool"]
        base = next((x for x in ddp if x["allocator"] == "caching" and "error" not in x), None)
        for x in ddp:
            if "error" not in x and base:
                x["losses_identical_to_caching"] = x["losses"] == base["losses"]
        result["ddp"] = ddp
    text = json.dumps(result, indent=1)
    if a.out:
        tmp_path = a.out + ".tmp"
        with open(tmp_path, "w") as f:
            f.write(text + "\n")
        os.replace(tmp_path, a.out)
    print(text)
    for model, summary in result["summary"].items():
        print(model, {al: (s["median_ms"], s["ratio_to_caching"]) for al, s in summary.items()},
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
