"""plan()'s calibration: the first training steps run under the budget, and the model is planned
again until PyTorch's peak holds (python/autovm/README.md, "The budget holds").

A plan keeps its graph's tensors within the budget less a margin, PyTorch's memory beyond them
(planfile.pytorch_margin models it). Two things no model of the graph knows are measured here:
  - cuDNN chooses each convolution's algorithm by the memory that is free, and takes its
    workspace on top of everything else;
  - a tensor the Python code still references (a residual block's input, until the block
    returns) stays allocated when the plan evicts it.

fit() runs `steps` training steps under the plan, through the adapter as attach() runs them,
with the caching allocator capped (torch.cuda.set_per_process_memory_fraction, which bounds
what the allocator reserves). Under the cap cuDNN takes only algorithms whose workspace fits,
and PyTorch keeps each convolution's choice for the rest of the process, so training
afterwards, without the cap, allocates as the calibration did. The budget bounds what PyTorch
allocates (torch.cuda.max_memory_allocated); reserved memory also holds the free parts of
segments in use, so the cap is the budget, plus what was reserved beyond the allocated when
the steps start, plus an allowance for fragmentation (FRAGMENTATION of the budget at first).
When plan() gives the plan the convolutions' measured workspaces (conv_workspaces.py), the
steps run without the cap: the fast algorithms' workspaces are in the plan, and a cap would
only make cuDNN pass them over for slow ones, for the rest of the process, the moment
fragmentation leaves one short (docs/conv-workspaces.md).
A try ends one of three ways:
  - the steps run and their allocated peak is within the budget: the plan holds;
  - the peak passes the budget, or an allocation fails with what was allocated plus the
    request beyond the budget: the plan is short. The margin grows by the shortfall plus
    SLACK_FRACTION of the budget, and the model is planned again;
  - an allocation fails with what was allocated plus the request within the budget: the
    allocator's fragmentation, not the plan, ran out. The allowance grows by what was
    reserved beyond the allocated, and the same plan runs again.
After `attempts` tries, or when no plan fits the margin, PlannerError (exit_code 6) says so,
with each try, before training starts.

The steps change nothing the script can see: the parameters, buffers, gradients, optimizer
state, the random number generators and the model's training flag are restored afterwards.
The loss is the one plan() was told of: cross-entropy against the example batch's labels (or
random ones of the outputs' shape), mean squared error against zeros, or, for "external",
backward from gradients of ones (the script's own loss is not known here: its memory is what
the plan's external-loss reserve stands for).
"""
import contextlib
import copy
import gc
import re

from .errors import PlannerError

# What each failed plan's margin grows by beyond the shortfall, as a fraction of the budget:
# the shortfall is that of the first allocation that failed, and later ones in the same step
# may be short by a little more.
SLACK_FRACTION = 0.01
# What the first try's cap allows beyond the budget for segments the steps leave partly free.
FRAGMENTATION = 0.1
_SIZE = re.compile(r"Tried to allocate ([0-9.]+) (B|KiB|MiB|GiB|TiB)")
_UNIT = {"B": 1, "KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30, "TiB": 2 ** 40}


def wanted(model, example_batch, budget, executor, data_parallel):
    """Whether plan(calibrate="auto") calibrates: a budget in bytes, one process, the model and
    its input on a CUDA GPU, and for executor "runtime" libautovm's pool installed as
    PyTorch's allocator (attach() needs it)."""
    from . import allocator
    from .planner import example_input

    if budget is None or data_parallel:
        return False
    if executor == "runtime" and allocator.installed() != "global":
        return False
    p = next(iter(model.parameters()), None)
    return p is not None and p.is_cuda and example_input(example_batch).is_cuda


def requested_bytes(message):
    """The request of a PyTorch out-of-memory message ("Tried to allocate 2.00 GiB"), or 0."""
    m = _SIZE.search(message)
    return int(float(m.group(1)) * _UNIT[m.group(2)]) if m else 0


def fit(replan, margin, model, example_batch, optimizer, budget, *, autocast=None,
        loss="cross-entropy", executor="copy", steps=2, attempts=6, capped=True):
    """The first plan of replan(m) whose `steps` training steps run within `budget` bytes, m
    growing from `margin` (PyTorch's modelled extra memory over the graph; for runtime plans
    on a vmm pool, plus the memory beside the pool). replan(m) plans under budget - m. capped=False: the
    copy path's steps run without the cap (the plan has the convolutions' measured
    workspaces, so cuDNN's choice need not be bounded). The plan returned has .calibration:
    {"plans", "peak_bytes", "margin_bytes", "tries": [...]}, and for runtime plans
    "outside_pool_bytes" (device memory beside a vmm pool, in the budget) and
    "pool_limit_bytes" (the budget less it: what attach() limits a vmm pool to)."""
    import torch

    from .planner import _pool_cuts_workspaces, example_input

    # The steps run on a batch that holds its bytes, as the training script's batches do: an
    # example made by expand() (a shape to export) holds one sample, and the steps would
    # measure the batch's memory short by the rest of it.
    x = _holding_its_bytes(example_input(example_batch))
    device = x.device
    total = torch.cuda.get_device_properties(device).total_memory
    if budget > total:
        raise PlannerError(f"the budget {budget} B is more than the GPU's {total} B", exit_code=6)
    labels = _labels(example_batch)
    allowance = int(FRAGMENTATION * budget)
    tries = []
    # Runtime plans on a vmm pool: a plan whose steps' need was within the budget runs them
    # again with the pool limited to it, as attach() will, before it is returned. Where the
    # pool's refusals reach cuDNN as PyTorch's own error (planner._pool_cuts_workspaces), the
    # first need over the budget is run again at the limit before the plan is changed:
    # unlimited, cuDNN takes its fastest algorithm's workspace whatever the budget; at the
    # limit it takes a smaller one, as it will in training. Should that run fail too, the plan
    # grows by the need measured unlimited, as without the shim.
    check_at_limit = executor == "runtime" and _pool_cuts_workspaces()
    unlimited_need = None  # (peak, oom) of the try the check at the limit repeats
    # On a vmm pool the budget also holds what the process has on the device beside the pool
    # (allocator.outside_bytes: the CUDA context, the libraries' handles), so that
    # cudaMemGetInfo stays within it too: the pool gets the rest. It is measured before the
    # first try and after each, whose steps may create more handles, and the most seen is
    # kept. The plan's graph must then fit what the pool gets: the margin is never less than
    # the modelled one plus that memory. Growing it only by what a try was short would not
    # do where the plan was made for far more than the pool gets: such a plan holds less than
    # its budget, and one a little lower holds the same.
    base_margin = margin
    outside = 0
    verify = False
    allowed = attempts + int(check_at_limit)
    saved = _Snapshot(model, optimizer)
    try:
        if executor == "runtime":
            outside = _outside_pool()
            _check_outside(outside, budget)
        margin = base_margin + outside
        plan = replan(margin) if outside == 0 else _replanned(replan, margin, budget, tries)
        for n in range(1, allowed + 1):
            if n > 1:
                saved.restore()
            if executor == "runtime":
                peak, oom, start = _measure_runtime(plan, model, optimizer, x, labels,
                                                    budget - outside, device,
                                                    autocast=autocast, loss=loss,
                                                    steps=steps, limited=verify)
                outside = max(outside, _outside_pool())
                _check_outside(outside, budget)
            else:
                peak, oom, start = _measure(plan, model, optimizer, x, labels, budget,
                                            allowance if capped else None, total, device,
                                            autocast=autocast, loss=loss, steps=steps)
            held = budget - outside  # what the counted peak must stay within
            tries.append({"margin_bytes": margin, "planned_budget_bytes": plan.budget_bytes,
                          "peak_bytes": peak, "out_of_memory": oom, "outside_pool_bytes":
                          outside, **start})
            if oom is None and peak <= held and executor == "runtime" and not verify \
                    and _limited_pool():
                verify = True
                continue
            if oom is None and peak <= held:
                plan.calibration = {"plans": len({t["margin_bytes"] for t in tries}),
                                    "tries": tries, "peak_bytes": peak, "margin_bytes": margin,
                                    "outside_pool_bytes": outside, "pool_limit_bytes": held}
                return plan
            if check_at_limit and not verify:  # over the budget unlimited: run it at the limit
                check_at_limit, unlimited_need, verify = False, (peak, oom), True
                continue
            if unlimited_need is not None:  # the check at the limit failed
                (peak, oom), unlimited_need = unlimited_need, None
            if oom is None:
                short = peak - held
            else:
                short = oom["allocated_bytes"] + oom["requested_bytes"] - held
                if short <= 0 and executor == "runtime":  # the pool's fragmentation
                    short = oom["requested_bytes"]
                elif short <= 0:  # fragmentation: the same plan, with more room to reserve
                    allowance += oom["reserved_bytes"] - oom["allocated_bytes"]
                    continue
            verify = False
            margin = max(margin + short + int(SLACK_FRACTION * budget), base_margin + outside)
            if n == allowed or margin >= budget:
                break
            plan = _replanned(replan, margin, budget, tries)
        raise PlannerError(f"the budget {budget} B cannot be promised: PyTorch ran out of it "
                           f"in {len(tries)} tries ({_tries(tries)}). Give a larger budget",
                           exit_code=6)
    finally:
        saved.restore()
        del saved
        gc.collect()
        if executor != "runtime":
            torch.cuda.empty_cache()


def _check_outside(outside, budget):
    if outside >= budget:
        raise PlannerError(
            f"the budget {budget} B cannot be promised: this process already holds "
            f"{outside} B of device memory outside autovm's pool (the CUDA "
            f"context, cuDNN's and cuBLAS's handles, and other processes on this "
            f"GPU). Give a larger budget", exit_code=6)


def _replanned(replan, margin, budget, tries):
    """replan(margin), its refusal said as the calibration's."""
    try:
        return replan(margin)
    except PlannerError as e:
        seen = f" ({_tries(tries)})" if tries else ""
        raise PlannerError(
            f"the budget {budget} B cannot be promised: no plan keeps the graph within "
            f"it less {margin} B, what PyTorch holds beyond the graph and the process beside "
            f"the pool{seen}: {e}", exit_code=6) from e


def _tries(tries):
    """The tries of fit() in a line: each plan's budget and where PyTorch ran out."""
    out = []
    for t in tries:
        o = t["out_of_memory"]
        if o is None:
            what = f"peak {t['peak_bytes']} B"
        elif "pool" in o:
            p = o["pool"]
            what = (f"out of memory after plan step {o['after_step']} asking "
                    f"{o['requested_bytes']} B with {p['allocated_bytes']} B allocated, "
                    f"{p['resident_bytes']} B held by the pool ({p['small_chunk_bytes']} B in "
                    f"chunks of small allocations, {p['unused_chunk_bytes']} B unused)")
        else:
            what = (f"out of memory after plan step {o['after_step']} asking "
                    f"{o['requested_bytes']} B with {o['allocated_bytes']} B allocated, "
                    f"{o['reserved_bytes']} B reserved")
        out.append(f"planned for {t['planned_budget_bytes']} B, from "
                   f"{t['allocated_before_bytes']} B allocated: {what}")
    return "; ".join(out)


def _measure(plan, model, optimizer, x, labels, budget, allowance, total, device, *,
             autocast, loss, steps):
    """Peak bytes of `steps` training steps under `plan` with the allocator capped (the
    module's docstring says at what; allowance None: not capped); None, or the out-of-memory
    figures of the allocation that failed; and the allocator's figures at the start, with
    the cap."""
    import torch

    from .adapter import attach

    getter = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    before = getter(device) if getter else 1.0
    torch.cuda.synchronize(device)
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    allocated = torch.cuda.memory_allocated(device)
    held = torch.cuda.memory_reserved(device) - allocated
    cap = total if allowance is None else min(total, budget + held + allowance)
    start = {"allocated_before_bytes": allocated, "reserved_before_bytes": allocated + held,
             "cap_bytes": cap}
    oom = None
    if allowance is not None:
        torch.cuda.set_per_process_memory_fraction(cap / total, device)
    try:
        with attach(model, optimizer, plan, unrealized="ignore") as run:
            run.memory_trace = []  # where a step ran out; it resets the peak at each boundary
            try:
                _steps(model, optimizer, x, labels, autocast, loss, steps, device)
            except torch.cuda.OutOfMemoryError as e:  # the step's tensors are still held
                trace = run.memory_trace
                oom = {"allocated_bytes": torch.cuda.memory_allocated(device),
                       "reserved_bytes": torch.cuda.memory_reserved(device),
                       "requested_bytes": requested_bytes(str(e)),
                       "after_step": trace[-1]["pos"] if trace else None,
                       "message": str(e).splitlines()[0][:400]}
                run.abandon_step()  # its saved tensors go now, not with a backward
            peaks = [e["peak"] for e in run.memory_trace]
            run.memory_trace = None
        optimizer.zero_grad(set_to_none=True)
        return max(peaks + [torch.cuda.max_memory_allocated(device)]), oom, start
    finally:
        if allowance is not None:
            torch.cuda.set_per_process_memory_fraction(before, device)


def _outside_pool():
    """allocator.outside_bytes() on a vmm pool; 0 elsewhere (the copy path's budget is
    PyTorch's allocated memory; a managed pool's budget is the runtime's count)."""
    from . import allocator

    return allocator.outside_bytes() if allocator.memory() == "vmm" else 0


def _limited_pool():
    """Whether attach() limits autovm.allocator's pool to a calibrated plan's budget (vmm)."""
    from . import allocator

    return allocator.memory() == "vmm"


def _measure_runtime(plan, model, optimizer, x, labels, budget, device, *, autocast, loss,
                     steps, limited=False):
    """Peak bytes of `steps` training steps under attach(..., executor="runtime"); None, or the
    out-of-memory figures of the allocation the pool refused; and the pool's figures at the
    start. The peak is what holds the budget on each pool:
      vmm      the most device memory the live allocations' chunks held at once (the pool's
               peak_in_use_bytes): the plan's tensors, and beside them cuDNN's workspaces,
               tensors the plan does not name, and the chunks' rounding. It is what the pool
               cannot give back, so it is what attach() needs when it limits the pool to the
               budget for a calibrated plan (unused chunks then go back before the budget is
               passed). Without the limit (limited=False) one run measures the whole
               excess, where a run at the limit stops at its first refusal. limited=True
               runs them at the limit, as attach() will: fit() does so once a plan's need is
               within the budget, since the pool's placement and the copies' timing may
               differ there, and, where cuDNN falls back to a smaller workspace on a
               refusal, once a need over the budget was measured unlimited;
      managed  the runtime's count of the tensors bound to the plan: the pool's pages stay on
               the device (the budget there is the runtime's accounting).
    A vmm pool whose capacity is below the budget is refused: the steps would run out of
    memory that the budget promises."""
    import torch

    from . import allocator
    from .adapter import attach

    torch.cuda.synchronize(device)
    gc.collect()
    vmm = allocator.memory() == "vmm"
    before = allocator.stats()
    if vmm and before["capacity_bytes"] < budget:
        raise PlannerError(f"the budget {budget} B is more than the autovm pool's capacity "
                           f"{before['capacity_bytes']} B: install the allocator with "
                           f"capacity_bytes={budget} (or more)", exit_code=6)
    if vmm:
        allocator.trim()
    allocator.reset_peaks()
    limited = limited and vmm
    start = {"allocated_before_bytes": before["allocated_bytes"],
             "reserved_before_bytes": allocator.stats()["resident_bytes"],
             "cap_bytes": budget if limited else None}
    oom = None
    limit = allocator.limit(budget) if limited else contextlib.nullcontext()
    with limit, attach(model, optimizer, plan, unrealized="ignore", executor="runtime") as run:
        try:
            _steps(model, optimizer, x, labels, autocast, loss, steps, device)
        except RuntimeError as e:  # the pool's refusal; torch.cuda.OutOfMemoryError is one
            if allocator.OOM_MARK not in str(e) and not isinstance(e, torch.cuda.OutOfMemoryError):
                raise
            s = allocator.stats()
            # On a vmm pool what counts against the budget is the memory held, allocated or
            # not (its small allocations' chunks, its rounding).
            oom = {"allocated_bytes": s["resident_bytes"] if vmm else s["allocated_bytes"],
                   "reserved_bytes": s["resident_bytes"],
                   "pool": {k: s[k] for k in ("allocated_bytes", "resident_bytes",
                                              "small_chunk_bytes", "unused_chunk_bytes")},
                   "requested_bytes": s["last_failed_bytes"],
                   "after_step": run.runtime.next - 1,
                   "message": str(e).splitlines()[0][:400]}
            run.abandon_step()  # its saved tensors go now, not with a backward
        counted = run.runtime.stats()["peak_resident_bytes"]
    optimizer.zero_grad(set_to_none=True)
    return (allocator.stats()["peak_in_use_bytes"] if vmm else counted), oom, start


def _steps(model, optimizer, x, labels, autocast, loss, steps, device):
    """`steps` training steps in training mode, finished on the device."""
    import torch

    model.train()
    for _ in range(steps):
        _step(model, optimizer, x, labels, autocast, loss)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _step(model, optimizer, x, labels, autocast, loss):
    import torch
    import torch.nn.functional as F

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(autocast)
    optimizer.zero_grad(set_to_none=True)
    mixed = torch.autocast(x.device.type, dtype=dtype) if dtype else contextlib.nullcontext()
    with mixed:
        outs = _outputs(model(x))
        if loss == "cross-entropy":
            value = sum(F.cross_entropy(o, _labels_for(o, labels)) for o in outs)
        elif loss == "mse":
            value = sum(F.mse_loss(o.float(), torch.zeros(o.shape, device=o.device))
                        for o in outs)
        else:
            value = None
    if value is None:
        torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
    else:
        value.backward()
    optimizer.step()


def _outputs(out):
    if isinstance(out, dict):
        return list(out.values())
    if isinstance(out, (tuple, list)):
        return list(out)
    return [out]


def _holding_its_bytes(x):
    """x, or a contiguous copy of it when its storage is smaller than its elements (a view
    made by expand(), with strides of 0)."""
    storage = x.untyped_storage().nbytes() if hasattr(x, "untyped_storage") else \
        x.storage().nbytes()
    return x if storage >= x.numel() * x.element_size() else x.contiguous()


def _labels(example_batch):
    import torch

    if isinstance(example_batch, (tuple, list)) and len(example_batch) > 1:
        y = example_batch[1]
        if isinstance(y, torch.Tensor) and not y.is_floating_point():
            return y
    return None


def _labels_for(out, labels):
    """The example's labels when they fit this output ([N] for [N, C], [N, ...] for
    [N, C, ...]), else class indices in [0, C) from a generator of its own (the global random
    state is not drawn from)."""
    import torch

    shape = (out.shape[0],) + tuple(out.shape[2:])
    if labels is not None and tuple(labels.shape) == shape:
        return labels.to(out.device)
    gen = torch.Generator(device=out.device)
    gen.manual_seed(0)
    return torch.randint(0, out.shape[1], shape, device=out.device, generator=gen)


class _Snapshot:
    """The model's parameters and buffers (host copies), its gradients and training flag, the
    optimizer's state (host copies) and the random number generators, restored in place."""

    def __init__(self, model, optimizer):
        import torch

        self.torch, self.model, self.optimizer = torch, model, optimizer
        self.training = model.training
        tensors = list(model.parameters()) + [b for b in model.buffers() if b is not None]
        self.values = [(t, t.detach().to("cpu", copy=True)) for t in tensors]
        self.grads = [(p, p.grad) for p in model.parameters()]
        sd = optimizer.state_dict()
        self.optimizer_state = {
            "state": {k: {n: (v.detach().to("cpu", copy=True) if torch.is_tensor(v)
                              else copy.deepcopy(v)) for n, v in s.items()}
                      for k, s in sd["state"].items()},
            "param_groups": copy.deepcopy(sd["param_groups"])}
        self.cpu_rng = torch.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None

    def restore(self):
        torch = self.torch
        with torch.no_grad():
            for t, v in self.values:
                t.copy_(v)
        for p, g in self.grads:
            p.grad = g
        self.optimizer.load_state_dict(self.optimizer_state)
        torch.set_rng_state(self.cpu_rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        self.model.train(self.training)
