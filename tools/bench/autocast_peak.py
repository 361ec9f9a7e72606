#!/usr/bin/env python3
"""Plain PyTorch's peak memory of a training step, fp32 and under torch.autocast, to compare
with autovm-plan --memory-model pytorch [--autocast bf16|fp16] at the same batch.

Each step: forward under autocast (when asked), softmax cross-entropy, backward, torch.optim.SGD
(no momentum, foreach), zero_grad(set_to_none=True); fp16 goes through torch.cuda.amp.GradScaler.
Prints one JSON line per (model, mode): torch.cuda.max_memory_allocated of step 3 (counted from
the start of the step, after reset_peak_memory_stats), which is what the planner predicts.
Each model starts from an empty allocator, as in a fresh process: the cuBLAS workspaces an
earlier model's matrix products left behind (PyTorch keeps them for the process's life) are
released first, so a model holds them only if it runs matrix products itself. Also printed:
"library_bytes", what the allocator holds after the first step beyond parameters, buffers,
optimizer state and the batch (cuBLAS workspaces; 0 for a model without matrix products).

usage: autocast_peak.py MODEL[,MODEL...] BATCH [fp32,bf16,fp16]
"""
import json
import sys

import torch
import torch.nn.functional as F
import torchvision


def peak(name, batch, mode):
    torch.manual_seed(0)
    # GoogLeNet and Inception-v3 without their auxiliary classifiers, as models/ exports them.
    extra = {"aux_logits": False, "init_weights": True} if name in ("googlenet", "inception_v3") else {}
    model = getattr(torchvision.models, name)(weights=None, **extra).cuda().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.cuda.amp.GradScaler(enabled=mode == "fp16")
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mode)
    peaks, library = [], None
    for _ in range(3):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        with torch.autocast("cuda", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        del loss
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated())
        if library is None:
            held = sum(t.numel() * t.element_size() for t in _state_tensors(model, opt))
            library = torch.cuda.memory_allocated() - held - x.nbytes - y.nbytes
    return peaks, library


def release_library_workspaces():
    """Frees the cuBLAS workspaces PyTorch keeps (torch._C._cuda_clearCublasWorkspaces) and
    the allocator's cache, so that memory_allocated() starts at 0."""
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    torch.cuda.empty_cache()


def _state_tensors(model, opt):
    """Parameters, buffers and optimizer state, each storage once."""
    seen, out = set(), []
    tensors = list(model.parameters()) + list(model.buffers())
    for state in opt.state.values():
        tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    for t in tensors:
        if t.is_cuda and t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            out.append(t)
    return out


if __name__ == "__main__":
    names, batch = sys.argv[1].split(","), int(sys.argv[2])
    modes = sys.argv[3].split(",") if len(sys.argv) > 3 else ["fp32", "bf16", "fp16"]
    for name in names:
        for mode in modes:
            row = {"model": name, "batch": batch, "mode": mode}
            try:
                release_library_workspaces()
                start = torch.cuda.memory_allocated()
                p, library = peak(name, batch, mode)
                row.update(peak_bytes=p[-1], steps=p, library_bytes=library)
                if start:
                    row["allocated_before"] = start
            except Exception as e:  # one model's failure does not end the run
                row["error"] = str(e).splitlines()[0]
            row.update(torch=torch.__version__, device=torch.cuda.get_device_name())
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
