#!/usr/bin/env python3
"""What libautovm's vmm pool holds for plain training: a few steps of a torchvision model at
batch 256, 224x224, fp32, SGD with momentum, on autovm.allocator's vmm pool without a plan;
then the pool's peaks (resident: chunks mapped; in use: chunks live allocations overlap;
allocated: bytes asked for) and, after a trim, the device memory the live allocations
(parameters, gradients, momentum) still hold. One JSON line on stdout.

usage (on a CUDA GPU; --lib the libautovm to measure):
  python3 tools/bench/pool_held.py --model resnet50 --chunk-bytes 8388608 --lib LIBAUTOVM
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50", help="a torchvision classifier (resnet50)")
    ap.add_argument("--chunk-bytes", type=int, default=8 << 20, help="the pool's chunk")
    ap.add_argument("--capacity-bytes", type=int, default=40 * 10**9,
                    help="the pool's capacity (default 40e9: more than plain training needs)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--lib")
    args = ap.parse_args()
    import torch
    import torchvision

    from autovm import allocator

    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 77
    allocator.install("vmm", capacity_bytes=args.capacity_bytes, lib_path=args.lib,
                      chunk_bytes=args.chunk_bytes)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 3, 224, 224, generator=g).cuda()
    y = torch.randint(0, 1000, (256,), generator=g).cuda()
    losses = []
    with allocator.out_of_memory_errors():
        for _ in range(args.steps):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()).hex())
    torch.cuda.synchronize()
    peaks = allocator.stats()
    allocator.trim()
    after = allocator.stats()
    print(json.dumps({
        "model": args.model, "chunk_bytes": args.chunk_bytes, "steps": args.steps,
        "peak_allocated_bytes": peaks["peak_allocated_bytes"],
        "peak_resident_bytes": peaks["peak_resident_bytes"],
        "peak_in_use_bytes": peaks.get("peak_in_use_bytes"),
        "live_allocations": after["allocations"], "allocated_bytes": after["allocated_bytes"],
        "held_after_trim_bytes": after["resident_bytes"],
        "small_chunk_bytes": after.get("small_chunk_bytes"), "losses": losses,
        "device": torch.cuda.get_device_name()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
