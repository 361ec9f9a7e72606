#!/usr/bin/env python3
"""How long the host keeps the GPU waiting at the start of a training step, plainly and under an
AutoVM plan (ResNet-50 at batch 256, 224x224, SGD with momentum, as pytorch_compare.py trains it).

Per configuration, 11 steps, the first 3 left out, each between two torch.cuda.synchronize():
  start_ms  CUDA events at the step's start and in a forward pre hook of model.conv1 (the first
            module, registered after the adapter's hooks): the host's time before the step's
            first kernel is launched, as the GPU is idle until then
  gpu_ms    CUDA events at the step's start and after optimizer.step()
  wall_ms   the host's time for the step (what pytorch_compare.py reports)
Medians to stdout and, with every step, as JSON to --out.

  python3 tools/bench/step_start.py --plan PLAN --lib libautovm.so.1 [--adapter DIR] --out F
--adapter: a checkout whose python/autovm is imported (default: this one), to compare adapters.
Needs a CUDA GPU with about 25 GB free.
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", required=True, help="a ResNet-50 b256 plan (pytorch_compare.py "
                                                   "--make-plans)")
    ap.add_argument("--lib", required=True, help="libautovm.so.1")
    ap.add_argument("--adapter", default=os.path.join(HERE, "..", ".."), metavar="DIR",
                    help="the checkout whose python/autovm is used (default: this one)")
    ap.add_argument("--steps", type=int, default=8, help="steps measured after 3 warm-up ones")
    ap.add_argument("--out", help="JSON with every step")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(os.path.abspath(a.adapter), "python"))
    import torch
    import torch.nn.functional as F
    import torchvision

    import autovm

    if not torch.cuda.is_available():
        sys.exit("step_start.py: no CUDA GPU")
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = torchvision.models.resnet50(weights=None).train().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(256, 3, 224, 224, generator=g).to(dev)
    y = torch.randint(0, 1000, (256,), generator=g).to(dev)
    out = {"adapter": os.path.abspath(a.adapter), "plan": os.path.abspath(a.plan)}
    for cfg in ("plain", "autovm"):
        ctx = contextlib.nullcontext()
        if cfg == "autovm":
            ctx = autovm.attach(model, opt, autovm.load_plan(a.plan, lib=a.lib),
                                unrealized="ignore")
        rows, marks = [], {}
        with ctx:
            hook = model.conv1.register_forward_pre_hook(lambda m, args: marks["e1"].record())
            for i in range(3 + a.steps):
                torch.cuda.synchronize()
                e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
                marks["e1"] = e1
                t0 = time.perf_counter()
                e0.record()
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(model(x), y).backward()
                opt.step()
                e2.record()
                torch.cuda.synchronize()
                wall = (time.perf_counter() - t0) * 1e3
                if i >= 3:
                    rows.append({"start_ms": e0.elapsed_time(e1), "gpu_ms": e0.elapsed_time(e2),
                                 "wall_ms": wall})
            hook.remove()
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        out[cfg] = dict(med, steps=rows)
        print(cfg, " ".join(f"{k} {v:.3f}" for k, v in med.items()))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
