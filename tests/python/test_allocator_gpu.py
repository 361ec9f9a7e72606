#!/usr/bin/env python3
"""autovm.allocator on a CUDA GPU: ResNet-18 (torchvision) trains 3 steps at batch 8 (64x64,
SGD with momentum, cuDNN deterministic) in a fresh process per allocator: PyTorch's caching
allocator, libautovm's pool on managed memory, on VMM memory (both as the global allocator),
and on managed memory behind a torch.cuda.MemPool; then DDP with one rank (NCCL) on the caching
allocator and on each pool. Every run's losses and final weights are bit-identical to the
caching allocator's. In the pool runs: the pool's peak covers the model, find() maps an address
inside a tensor to that tensor's range, and a request beyond the capacity raises
torch.cuda.OutOfMemoryError with the pool's figures, after which training goes on. On the global
pools that error comes unwrapped too (the allocator shim, autovm/torch_oom.py), and on the vmm
pool a convolution under a limit of its tensors plus 64 MiB runs: cuDNN falls back to an
algorithm with a smaller workspace.

usage: test_allocator_gpu.py --lib LIBAUTOVM   (exits 77, skipped, without a CUDA GPU)
       test_allocator_gpu.py --child ALLOCATOR [--ddp] --lib LIBAUTOVM   (one run, JSON out)
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

ALLOCATORS = ["caching", "managed", "vmm", "mempool"]
CAPACITY = 4 << 30


def child(allocator, ddp, lib):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    import torch
    from autovm import allocator as pool

    mempool = None
    if allocator in ("managed", "vmm"):
        pool.install(allocator, capacity_bytes=CAPACITY, lib_path=lib)
    elif allocator == "mempool":
        mempool = pool.install_mempool("managed", capacity_bytes=CAPACITY, lib_path=lib)
        torch.autograd.set_multithreading_enabled(False)
    import torchvision

    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(0)
    out = {"allocator": allocator, "ddp": ddp}
    def ctx():  # a fresh one each time: use_mem_pool's context manager is single-use
        return torch.cuda.use_mem_pool(mempool) if mempool is not None else _nothing()

    with ctx(), pool.out_of_memory_errors() if allocator != "caching" else _nothing():
        model = torchvision.models.resnet18(num_classes=10).cuda()
        if ddp:
            import torch.distributed as dist
            dist.init_process_group("nccl", init_method=f"file://{os.environ['AUTOVM_DDP_FILE']}",
                                    rank=0, world_size=1)
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        g = torch.Generator(device="cpu").manual_seed(1)
        x = torch.randn(8, 3, 64, 64, generator=g).cuda()
        y = torch.randint(0, 10, (8,), generator=g).cuda()
        losses = []
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        torch.cuda.synchronize()
        out["losses"] = [float.hex(v) for v in losses]
        digest = hashlib.sha256()
        for p in model.parameters():
            digest.update(p.detach().cpu().numpy().tobytes())
        for b in model.buffers():
            digest.update(b.detach().cpu().numpy().tobytes())
        out["weights"] = digest.hexdigest()
        if allocator != "caching":
            out["stats"] = pool.stats()
            t = next(model.parameters())
            out["find"] = pool.find(t.data_ptr() + 4) == (t.data_ptr(), t.numel() * 4) \
                if allocator != "mempool" else None
        if ddp:
            torch.distributed.destroy_process_group()
    if allocator != "caching":
        try:
            with ctx(), pool.out_of_memory_errors():
                torch.empty(CAPACITY + (1 << 30), dtype=torch.uint8, device="cuda")
            out["oom"] = "no error"
        except torch.cuda.OutOfMemoryError as e:
            out["oom"] = str(e)
        with ctx():
            out["after_oom"] = torch.ones(1000, device="cuda").sum().item()
    if allocator in ("managed", "vmm"):
        # Through the shim (autovm/torch_oom.py) a refusal is PyTorch's own error, unwrapped.
        out["errors"] = pool.out_of_memory_error()
        try:
            torch.empty(CAPACITY + (1 << 30), dtype=torch.uint8, device="cuda")
            out["raw_oom"] = "no error"
        except torch.cuda.OutOfMemoryError:
            out["raw_oom"] = "OutOfMemoryError"
        except RuntimeError:
            out["raw_oom"] = "RuntimeError"
    if allocator == "vmm":
        # cuDNN falls back to an algorithm with a smaller workspace when the pool refuses the
        # fast one's: a convolution under a limit of its tensors plus 64 MiB still runs.
        conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()
        xx = torch.randn(32, 64, 224, 224, device="cuda", requires_grad=True)
        torch.cuda.synchronize()
        held = pool.stats()["resident_bytes"]
        try:
            with pool.limit(held + 3 * xx.numel() * xx.element_size() + (64 << 20)):
                conv(xx).sum().backward()
                torch.cuda.synchronize()
            out["fallback"] = "ran"
        except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
            out["fallback"] = f"{type(e).__name__}: {str(e)[:300]}"
    print(json.dumps(out))


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def run_child(allocator, ddp, lib, tmp):
    env = dict(os.environ, AUTOVM_DDP_FILE=os.path.join(tmp, f"ddp-{allocator}"),
               NCCL_NVLS_ENABLE="0")
    cmd = [sys.executable, __file__, "--child", allocator, "--lib", lib] + (["--ddp"] if ddp else [])
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: {allocator}{' ddp' if ddp else ''} exited {r.returncode}:\n"
                         f"{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--child")
    ap.add_argument("--ddp", action="store_true")
    a = ap.parse_args()
    if a.child:
        child(a.child, a.ddp, a.lib)
        return 0
    try:
        import torch
        import torchvision  # noqa: F401
    except ImportError as e:
        print(f"torch or torchvision missing ({e}): skipped")
        return 77
    if not torch.cuda.is_available():
        print("no CUDA device: skipped")
        return 77
    import tempfile

    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for ddp in (False, True):
            allocators = ALLOCATORS if not ddp else ["caching", "managed", "vmm"]
            runs = {name: run_child(name, ddp, a.lib, tmp) for name in allocators}
            base = runs["caching"]
            for name, r in runs.items():
                label = f"{name}{' ddp' if ddp else ''}"
                same = r["losses"] == base["losses"] and r["weights"] == base["weights"]
                print(f"{label}: losses {r['losses']} {'identical' if same else 'DIFFER'}")
                if not same:
                    failures.append(f"{label}: training differs from the caching allocator's")
                if name == "caching":
                    continue
                s = r["stats"]
                print(f"  pool: peak allocated {s['peak_allocated_bytes']} B, peak resident "
                      f"{s['peak_resident_bytes']} B, {s['alloc_calls']} allocations")
                if not 0 < s["peak_allocated_bytes"] <= s["peak_resident_bytes"] <= CAPACITY:
                    failures.append(f"{label}: pool figures out of order: {s}")
                if r["find"] is False:
                    failures.append(f"{label}: find() did not map a parameter's address")
                if "capacity of 4.00 GiB" not in r["oom"] or "autovm pool:" not in r["oom"]:
                    failures.append(f"{label}: no OutOfMemoryError with the pool's figures: "
                                    f"{r['oom'][:300]}")
                if r["after_oom"] != 1000.0:
                    failures.append(f"{label}: no training after the out-of-memory error")
                if name in ("managed", "vmm") and (r.get("errors") != "torch.OutOfMemoryError"
                                                   or r.get("raw_oom") != "OutOfMemoryError"):
                    failures.append(f"{label}: a refusal is not PyTorch's own error (shim "
                                    f"{r.get('errors')}, raised {r.get('raw_oom')})")
                if name == "vmm" and r.get("fallback") != "ran":
                    failures.append(f"{label}: cuDNN did not fall back to a smaller workspace "
                                    f"under the pool's limit: {r.get('fallback')}")
    for f in failures:
        print("FAIL:", f)
    print("ok" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
