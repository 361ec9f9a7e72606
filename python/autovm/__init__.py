"""AutoVM for PyTorch training scripts (python/autovm/README.md).

    import autovm
    plan = autovm.plan(model, example_batch, optimizer, budget="8GB")  # or autovm.load_plan(FILE)
    with autovm.attach(model, optimizer, plan) as run:
        ...train as usual...
    print(run.stats)

The budget is what PyTorch may hold: plan() plans under it less PyTorch's modelled extra memory
over AutoVM's graph, moving activations only. Data-parallel: autovm.plan(ddp_model, ...,
data_parallel=True) and autovm.attach(ddp_model, ...), one plan per rank (README.md).
libautovm as the executor: autovm.allocator.install("vmm") (or "managed") first, then
autovm.plan(..., executor="runtime") (every kind movable: autovm.RUNTIME_KINDS) and
autovm.attach(..., executor="runtime") (README.md).

Install with `pip install ./python` (README.md, "Install"); autovm-plan and libautovm are found
through the argument, $AUTOVM_PLAN / $AUTOVM_LIB, the configuration file, PATH and the loader,
in the order autovm/locate.py documents.
"""
from . import allocator
from .adapter import RUNTIME_KINDS, Attachment, Stats, attach, onnx_scope
from .errors import (AutoVMError, BatchMismatchError, HookOrderError, LibraryError,
                     ModelMismatchError, OptimizerMismatchError, PlanFitError, PlannerError,
                     ToolNotFoundError)
from .planfile import Plan, load_plan, resident_bytes, step_reserve, step_times
from .planner import export_onnx, optimizer_kind, plan

__all__ = ["plan", "load_plan", "attach", "allocator", "Plan", "Attachment", "Stats", "RUNTIME_KINDS",
           "export_onnx",
           "optimizer_kind", "onnx_scope", "AutoVMError", "BatchMismatchError",
           "HookOrderError", "LibraryError", "ModelMismatchError", "OptimizerMismatchError",
           "PlanFitError", "PlannerError", "ToolNotFoundError"]
