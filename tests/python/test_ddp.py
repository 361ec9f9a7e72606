#!/usr/bin/python3
"""Data-parallel training under AutoVM plans, on the CPU: autovm-plan --data-parallel adds DDP's
gradient buckets exactly as torch's Reducer sizes them (ResNet-18, checked against
DistributedDataParallel's own logging), the PyTorch memory model counts them, and
tools/bench/ddp_train.py trains 2 gloo ranks for 2 steps under one plan per rank, bit-identical
to plain DDP with the plans' evictions made.

usage: test_ddp.py AUTOVM_PLAN LIBAUTOVM MODELS_DIR
"""
import json
import os
import subprocess
import sys
import tempfile
import traceback

PLAN_EXE, LIB, MODELS = (os.path.abspath(a) for a in sys.argv[1:4])
os.environ["AUTOVM_PLAN"], os.environ["AUTOVM_LIB"] = PLAN_EXE, LIB
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path[:0] = [os.path.join(ROOT, "python")]

import torch  # noqa: E402

import autovm  # noqa: E402

torch.set_num_threads(min(2, os.cpu_count() or 1))
tmp = tempfile.mkdtemp(prefix="autovm-ddp-test-")
results = []


def case(name):
    def run(fn):
        try:
            why = fn() or ""
        except Exception as e:
            why = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}"
        results.append(not why)
        print(f"{'PASS' if not why else 'FAIL'} {name}" + (f": {why}" if why else ""), flush=True)
        return fn
    return run


def plan_json(*extra, model="resnet18"):
    out = os.path.join(tmp, f"{model}-{len(os.listdir(tmp))}.json")
    subprocess.run([PLAN_EXE, os.path.join(MODELS, f"{model}.onnx"), "--batch", "2",
                    "--optimizer", "momentum", "--memory-model", "pytorch", "--quiet", "-o", out,
                    *extra], check=True)
    with open(out) as f:
        return json.load(f)


def buckets(doc):
    return [t["bytes"] for t in doc["tensors"] if t["name"].startswith("ddp_bucket.")]


def ddp_bucket_sizes(bucket_mb):
    """DDP's rebuilt bucket sizes for torchvision's resnet18 (one gloo rank, two steps)."""
    code = f"""
import os, torch, torchvision, torch.distributed as dist, torch.nn.functional as F
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str({29500 + os.getpid() % 2000}))
dist.init_process_group("gloo", rank=0, world_size=1)
m = torchvision.models.resnet18()
d = torch.nn.parallel.DistributedDataParallel(m, bucket_cap_mb={bucket_mb})
opt = torch.optim.SGD(d.parameters(), lr=0.01, momentum=0.9)
x, y = torch.randn(2, 3, 64, 64), torch.randint(0, 1000, (2,))
for _ in range(2):
    opt.zero_grad(); F.cross_entropy(d(x), y).backward(); opt.step()
print(",".join(str(b.buffer().numel() * 4) for b in d.reducer._get_zeros_like_grad_buckets()))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [int(v) for v in r.stdout.strip().splitlines()[-1].replace(" ", "").split(",")]


@case("--data-parallel: the plan's buckets are DDP's, for 25 MiB and 5 MiB caps")
def _():
    plain = plan_json()
    for mb in (25, 5):
        doc = plan_json("--data-parallel", "--bucket-mb", str(mb))
        want = ddp_bucket_sizes(mb)
        got = buckets(doc)
        if got != want:
            return f"bucket_mb {mb}: plan {got}, DDP {want}"
        dp = doc["options"].get("data_parallel")
        if not dp or dp["buckets"] != len(want) or dp["bucket_bytes"] != sum(want) \
                or dp["bucket_cap_bytes"] != mb << 20:
            return f"options.data_parallel {dp}"
        grads = sum(t["bytes"] for t in doc["tensors"] if t["kind"] == "parameter")
        if sum(got) != grads:
            return f"buckets {sum(got)} B, parameters {grads} B"
        # persistent the whole step: every plan's peak, and PyTorch's, grows by them
        extra = doc["statistics"]["peak_bytes"] - plain["statistics"]["peak_bytes"]
        if extra != sum(got):
            return f"the graph's peak grew by {extra} B, not the buckets' {sum(got)} B"
        pt = doc["pytorch_memory"]["persistent_bytes"] - plain["pytorch_memory"]["persistent_bytes"]
        if not sum(got) <= pt <= sum(got) + len(got) * (2 << 20):
            return f"PyTorch's persistent bytes grew by {pt} B for {sum(got)} B of buckets"
    if "data_parallel" in plain["options"] or buckets(plain):
        return "a plan without --data-parallel has buckets"
    return ""


@case("--bucket-mb without --data-parallel, or not a positive number: exit 2")
def _():
    for extra in (["--bucket-mb", "25"], ["--data-parallel", "--bucket-mb", "0"],
                  ["--data-parallel", "--bucket-mb", "x"]):
        r = subprocess.run([PLAN_EXE, os.path.join(MODELS, "resnet18.onnx"), "--batch", "2",
                            "-o", os.devnull, *extra], capture_output=True, text=True)
        if r.returncode != 2 or "--bucket-mb" not in r.stderr:
            return f"{extra}: exit {r.returncode}: {r.stderr.strip()}"
    return ""


@case("attach(): a DDP-wrapped model needs a data-parallel plan, and takes one")
def _():
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(31000 + os.getpid() % 2000))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 14 * 14, 3))
        x = torch.randn(2, 3, 16, 16)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        wrapped = DDP(m)
        single = autovm.plan(m, x, opt, out=os.path.join(tmp, "single.json"))
        try:
            autovm.attach(wrapped, opt, single)
            return "a plan without data_parallel was accepted for a DDP model"
        except autovm.PlanFitError as e:
            if "data_parallel=True" not in str(e):
                return f"message: {e}"
        dp = autovm.plan(wrapped, x, opt, data_parallel=True, out=os.path.join(tmp, "dp.json"))
        if not dp.data_parallel or dp.data_parallel["buckets"] != 1:
            return f"data_parallel {dp.data_parallel}"
        with autovm.attach(wrapped, opt, dp) as run:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(wrapped(x), torch.tensor([0, 1])).backward()
            opt.step()
        if run.stats.training_steps != 1:
            return f"the hooks on the wrapped module did not run: {run.stats}"
        return ""
    finally:
        dist.destroy_process_group()


@case("ddp_train.py: 2 gloo ranks, 2 steps, one plan each, bit-identical to plain DDP")
def _():
    out = os.path.join(tmp, "ddp.json")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench", "ddp_train.py"),
                        "--device", "cpu", "--model", "tiny", "--batch", "4", "--resolution",
                        "32", "--steps", "2", "--budget-fraction", "0.8",
                        "--plan-arg=--workspace-limit", "--plan-arg=4KB", "--out", out],
                       capture_output=True, text=True, timeout=300)
    print("  " + "\n  ".join(r.stdout.strip().splitlines()[-3:]))
    if r.returncode != 0:
        return f"exit {r.returncode}: {r.stdout[-1500:]} {r.stderr[-1500:]}"
    doc = json.load(open(out))
    if doc["world"] != 2 or doc["backend"] != "gloo" or not doc["all_identical"]:
        return f"world {doc['world']}, backend {doc['backend']}, identical {doc['all_identical']}"
    plans = set()
    for rank in doc["ranks"]:
        st = rank["autovm"]["adapter_stats"]
        if st["training_steps"] != 2 or st["evictions"] == 0 or st["late_prefetches"]:
            return f"rank {rank['rank']}: {st}"
        if rank["autovm"]["ddp_bucket_sizes"] != rank["plan_bucket_sizes"]:
            return f"rank {rank['rank']}: DDP's buckets {rank['autovm']['ddp_bucket_sizes']}, " \
                   f"the plan's {rank['plan_bucket_sizes']}"
        if rank["autovm"]["losses"] == doc["ranks"][0]["autovm"]["losses"] and rank["rank"]:
            return "the ranks trained on the same data"
        plans.add(rank["plan"])
    if len(plans) != 2:
        return f"one plan per rank expected: {plans}"
    return ""


failed = results.count(False)
print(f"{len(results) - failed} passed, {failed} failed")
sys.exit(1 if failed or not results else 0)
