#!/usr/bin/env python3
"""What memory to spare buys a convolution: each distinct convolution of a model alone on a
CUDA GPU, forward and backward under bf16 autocast, cuDNN deterministic and without
benchmark mode, in the order: with memory to spare, then with only SLACK MiB free beyond its
tensors (torch.cuda.set_per_process_memory_fraction), then with memory to spare again. Prints
one JSON line per convolution (best time of the last three of four runs, and what each run
allocated beyond its tensors) and the sums. docs/conv-workspaces.md reads the figures.

usage: tools/bench/conv_algorithms.py [vgg19|unet2d|TORCHVISION_NAME] [BATCH] [SIDE] [SLACK_MIB]
  defaults: vgg19 256 224 64; unet2d is tools/bench/dense_models.UNet(3, 21, base=64).
Exit 77 without a CUDA GPU.
"""
import copy
import json
import os
import sys
import time

import torch
from torch import nn


def model_named(name):
    if name == "unet2d":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import dense_models
        return dense_models.UNet(3, 21, base=64, dims=2)
    import torchvision
    return getattr(torchvision.models, name)()


def distinct_convolutions(model, side):
    """{key: module} of the model's 2-D convolutions, by the shapes they see on a 1-sample
    CPU forward."""
    found = {}

    def hook(mod, inp, out):
        key = (type(mod).__name__, mod.in_channels, mod.out_channels, mod.kernel_size,
               mod.stride, mod.padding, mod.groups, tuple(inp[0].shape[1:]))
        found.setdefault(key, mod)

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d))]
    with torch.no_grad():
        model.eval()(torch.zeros(1, 3, side, side))
    for h in handles:
        h.remove()
    return found


def timed(conv, x, gy, reps=4):
    """(best ms of runs 2..reps, bytes allocated beyond what was allocated before)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    times = []
    for _ in range(reps):
        x.grad = conv.weight.grad = None
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = conv(x)
        y.backward(gy)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        del y
    return min(times[1:]) * 1e3, torch.cuda.max_memory_allocated() - base


def main():
    if not torch.cuda.is_available():
        print("conv_algorithms.py measures on a CUDA GPU; there is none here", file=sys.stderr)
        return 77
    name = sys.argv[1] if len(sys.argv) > 1 else "vgg19"
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    side = int(sys.argv[3]) if len(sys.argv) > 3 else 224
    slack = int(float(sys.argv[4]) * 2 ** 20) if len(sys.argv) > 4 else 64 << 20
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    total = torch.cuda.get_device_properties(0).total_memory
    sums = {"free_ms": 0.0, "capped_ms": 0.0, "again_ms": 0.0}
    for key, mod in distinct_convolutions(model_named(name), side).items():
        conv = copy.deepcopy(mod).cuda()
        x = torch.randn((batch,) + key[-1], device="cuda", dtype=torch.bfloat16,
                        requires_grad=True)
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            gy = torch.randn_like(conv(x))
        # y, the gradients of x and of the weight, and the weight's bf16 copy
        tensors = 2 * x.numel() + 2 * gy.numel() + 6 * conv.weight.numel()
        row = {"conv": f"{key[0]} {key[1]}->{key[2]} k{key[3]} s{key[4]} in{key[7]}"}
        try:
            row["free_ms"], free = timed(conv, x, gy)
            x.grad = conv.weight.grad = None
            torch.cuda.empty_cache()
            cap = torch.cuda.memory_reserved() + tensors + slack
            torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total))
            try:
                row["capped_ms"], capped = timed(conv, x, gy)
            finally:
                torch.cuda.set_per_process_memory_fraction(1.0)
            row["again_ms"], again = timed(conv, x, gy)
            row.update(free_extra_mib=round((free - tensors) / 2 ** 20),
                       capped_extra_mib=round((capped - tensors) / 2 ** 20),
                       again_extra_mib=round((again - tensors) / 2 ** 20))
            for k in sums:
                sums[k] += row[k]
        except torch.cuda.OutOfMemoryError as e:
            row["error"] = str(e).splitlines()[0][:200]
        print(json.dumps(row), flush=True)
        del conv, x, gy
        torch.cuda.empty_cache()
    print(json.dumps({"sums_over_distinct_convolutions": {k: round(v, 1) for k, v in sums.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
