#!/usr/bin/env python3
"""plan()'s calibration on a CUDA GPU (python/autovm/calibrate.py): ResNet-18 at batch 64,
SGD with momentum, at 55 % of plain PyTorch's measured peak, planned by autovm.plan() alone.
Checks that torch.cuda.max_memory_allocated() over plan() and 3 training steps stays within the
budget, that the losses and weights are bit-identical to plain training from the same weights
(cuDNN deterministic) run after plan() (the calibration's cap may make PyTorch pick other cuDNN
algorithms, as a smaller GPU would, and PyTorch keeps them for the process), and that a budget no plan can hold raises PlannerError (exit_code 6)
before training, leaving the weights as they were.

usage: test_calibrate_gpu.py AUTOVM_PLAN LIBAUTOVM   (exits 77, skipped, without a CUDA GPU)
"""
import copy
import os
import sys

PLAN_EXE, LIB = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
os.environ["AUTOVM_PLAN"], os.environ["AUTOVM_LIB"] = PLAN_EXE, LIB
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "python")]

import torch  # noqa: E402

if not torch.cuda.is_available():
    print("no CUDA GPU: skipped")
    sys.exit(77)

import torchvision  # noqa: E402

import autovm  # noqa: E402
from adapter_models import compare, train  # noqa: E402
from cases import case, finish, raises  # noqa: E402

torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
torch.manual_seed(0)
BASE = torchvision.models.resnet18(weights=None).cuda().train()
g = torch.Generator(device="cuda").manual_seed(1)
X = torch.randn(64, 3, 224, 224, device="cuda", generator=g)
Y = torch.randint(0, 1000, (64,), device="cuda", generator=g)


def fresh():
    m = copy.deepcopy(BASE)
    return m, torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)


plain, plain_opt = fresh()
torch.cuda.reset_peak_memory_stats()
before = torch.cuda.memory_allocated()
plain_losses = train(plain, plain_opt, X, Y)
PLAIN_PEAK = torch.cuda.max_memory_allocated()
del plain_opt


@case("a calibrated plan at 55 % of plain's peak holds the budget and trains bit-identically")
def _():
    m, opt = fresh()
    budget = int(0.55 * PLAIN_PEAK) + before
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    plan = autovm.plan(m, (X, Y), opt, budget=budget)
    if plan.calibration is None:
        return "plan() did not calibrate"
    peak = torch.cuda.max_memory_allocated()
    reference, reference_opt = fresh()
    reference_losses = train(reference, reference_opt, X, Y)
    del reference_opt
    reference.cpu()  # compared on the host: the training below holds only what plan() saw
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    with autovm.attach(m, opt, plan) as run:
        losses = train(m, opt, X, Y)
    peak = max(peak, torch.cuda.max_memory_allocated())
    print(f"  budget {budget} B, peak {peak} B (plain {PLAIN_PEAK} B), plans "
          f"{plan.calibration['plans']}, margin {plan.calibration['margin_bytes']} B, "
          f"moved {run.stats.bytes_to_host} B")
    if peak > budget:
        return f"peak {peak} B over the budget {budget} B"
    if run.stats.bytes_to_host == 0:
        return "nothing moved: the budget did not bite"
    return compare(m, losses, reference, reference_losses)


@case("a budget no plan holds is refused before training, the weights untouched")
def _():
    m, opt = fresh()
    start = copy.deepcopy(m.state_dict())
    budget = 60 << 20  # below the parameters, gradients and momentum
    why = raises(autovm.PlannerError, lambda: autovm.plan(m, (X, Y), opt, budget=budget), "budget")
    if why:
        return why
    changed = [k for k, v in m.state_dict().items() if not torch.equal(v, start[k])]
    return f"{changed[:3]} changed" if changed else ""


sys.exit(finish())
