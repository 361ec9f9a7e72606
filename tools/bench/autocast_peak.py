#!/usr/bin/env python3
"""Plain PyTorch's peak memory of a training step, fp32 and under torch.autocast, to compare
with autovm-plan --memory-model pytorch [--autocast bf16|fp16] at the same batch.

Each step: forward under autocast (when asked), softmax cross-entropy, backward, torch.optim.SGD
(no momentum, foreach), zero_grad(set_to_none=True); fp16 goes through torch.cuda.amp.GradScaler.
Prints one JSON line per (model, mode): torch.cuda.max_memory_allocated of step 3 (counted from
the start of the step, after reset_peak_memory_stats), which is what the planner predicts.

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
    peaks = []
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
    return peaks


if __name__ == "__main__":
    names, batch = sys.argv[1].split(","), int(sys.argv[2])
    modes = sys.argv[3].split(",") if len(sys.argv) > 3 else ["fp32", "bf16", "fp16"]
    for name in names:
        for mode in modes:
            row = {"model": name, "batch": batch, "mode": mode}
            try:
                p = peak(name, batch, mode)
                row.update(peak_bytes=p[-1], steps=p)
            except Exception as e:  # one model's failure does not end the run
                row["error"] = str(e).splitlines()[0]
            row.update(torch=torch.__version__, device=torch.cuda.get_device_name())
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
