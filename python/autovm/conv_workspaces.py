"""Convolution workspaces measured on the GPU that trains (autovm-plan --conv-workspaces).

cuDNN chooses each convolution's algorithm the first time it runs, by the memory free then.
The fast algorithms take scratch memory of up to several times the convolution's output;
one whose workspace cannot be allocated is passed over for a slower one, and PyTorch keeps
that choice for the rest of the process (docs/conv-workspaces.md has the figures: VGG-19's
convolutions at batch 256 in bf16 ran 38 times slower with no room to spare). A plan that
gives each convolution the workspace cuDNN takes with memory to spare keeps it at full speed.

measure() finds the model's convolution modules and the shapes they see (one forward pass of
the first two samples without gradients, in the model's own training mode, or in eval mode
where that fails; its shapes scaled to the batch),
then runs each distinct convolution alone on the GPU at the full batch, forward and backward,
in the dtype it computes in, under the current cuDNN settings (deterministic, benchmark, TF32),
and records what it allocated beyond its outputs, as PyTorch's caching allocator counts it or,
under autovm.allocator's pool, as the pool does, and how long it ran (CUDA events on its
stream): forward, backward to the input and the weight, and backward to the weight alone (a
first convolution's, whose input needs no gradient), each the second run's, after cuDNN has
chosen. The planner takes these times over its roofline for the convolutions' steps; without
a bias (the bias's own addition and gradient are elementwise work the times leave out).
The entries are what
compiler/training/conv_workspaces.h reads. A convolution that runs out of memory alone, or one
with string padding ('same'), has no entry: the planner keeps its estimate for it.

Nothing the script can see changes: the parameters are not touched; the buffers (batch norm's
statistics), every module's training flag and the random number generators are restored. What stays behind is cuDNN's
choice for each convolution measured, the fast one.
"""
import contextlib

_KINDS = None


def _conv_kinds():
    global _KINDS
    if _KINDS is None:
        from torch import nn
        _KINDS = {nn.Conv1d: ("Conv", 1), nn.Conv2d: ("Conv", 2), nn.Conv3d: ("Conv", 3),
                  nn.ConvTranspose1d: ("ConvTranspose", 1),
                  nn.ConvTranspose2d: ("ConvTranspose", 2),
                  nn.ConvTranspose3d: ("ConvTranspose", 3)}
    return _KINDS


def _dtype_name(dtype):
    import torch
    return {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}.get(dtype)


def _autocast_dtype(autocast):
    import torch
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(autocast)


def convolutions(model, x, autocast=None):
    """The distinct convolutions `model` runs on input `x`: a list of entries (dicts) without
    the byte counts, shapes at x's batch, in the order they first run."""
    import torch

    batch = int(x.shape[0])
    low = _autocast_dtype(autocast)
    kinds = _conv_kinds()
    seen, found = set(), []

    def hook(module, inputs, output):
        op, dims = kinds[type(module)]
        if isinstance(module.padding, str) or not inputs or not torch.is_tensor(output):
            return
        inp = inputs[0]
        dtype = low if low is not None else inp.dtype
        entry = {"op": op, "dtype": _dtype_name(dtype),
                 "input": [batch] + list(inp.shape[1:]),
                 "weight": list(module.weight.shape),
                 "output": [batch] + list(output.shape[1:]),
                 "strides": list(module.stride), "pads": list(module.padding),
                 "dilations": list(module.dilation), "group": int(module.groups)}
        if entry["dtype"] is None:
            return
        if op == "ConvTranspose":
            entry["output_padding"] = list(module.output_padding)
        key = repr(entry)
        if key not in seen:
            seen.add(key)
            found.append(entry)

    handles = [m.register_forward_hook(hook) for m in model.modules() if type(m) in kinds]
    flags = [(m, m.training) for m in model.modules()]
    buffers = [(b, b.detach().clone()) for b in model.buffers() if b is not None]
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    mixed = (torch.autocast(x.device.type, dtype=low) if low is not None
             else contextlib.nullcontext())
    try:
        with torch.no_grad(), mixed:
            try:  # as the model trains (a training-only branch runs its convolutions too)
                model(x[: min(2, batch)])
            except (RuntimeError, ValueError):  # batch norm over one value per channel, say
                seen.clear()
                found.clear()
                model.eval()
                model(x[: min(2, batch)])
    finally:
        for h in handles:
            h.remove()
        for m, training in flags:
            m.training = training
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
    return found


class _Meter:
    """What one convolution allocates, read from the allocator that serves PyTorch: the caching
    allocator's statistics, or under autovm.allocator's global pool (where PyTorch's raise)
    the pool's. The caching allocator counts a tensor in blocks of 512 bytes, the pool at the
    size asked for."""

    def __init__(self, device):
        from . import allocator

        self.device = device
        self.pool = allocator if allocator.installed() == "global" else None

    def reset(self):
        """Synchronises the device and starts a peak; returns the bytes allocated now."""
        import torch

        torch.cuda.synchronize(self.device)
        if self.pool is None:
            torch.cuda.reset_peak_memory_stats(self.device)
            return torch.cuda.memory_allocated(self.device)
        self.pool.reset_peaks()
        return self.pool.stats()["allocated_bytes"]

    def peak(self):
        """The most bytes allocated since reset(), once the device has finished."""
        import torch

        torch.cuda.synchronize(self.device)
        if self.pool is None:
            return torch.cuda.max_memory_allocated(self.device)
        return self.pool.stats()["peak_allocated_bytes"]

    def bytes_of(self, t):
        n = t.numel() * t.element_size()
        return n if self.pool is not None else (n + 511) // 512 * 512

    def out_of_memory(self, e):
        """Whether exception e is the allocator refusing an allocation."""
        import torch

        from .allocator import OOM_MARK

        return isinstance(e, torch.cuda.OutOfMemoryError) or (
            self.pool is not None and isinstance(e, RuntimeError) and OOM_MARK in str(e))

    def give_back(self):
        import torch

        if self.pool is None:
            torch.cuda.empty_cache()


def _convolution(entry, device):
    """(fn, x, w, kwargs) that run one entry's convolution: zeros of its shapes and dtype."""
    import torch
    import torch.nn.functional as F

    dims = len(entry["input"]) - 2
    dtype = {"float32": torch.float32, "float16": torch.float16,
             "bfloat16": torch.bfloat16}[entry["dtype"]]
    x = torch.zeros(entry["input"], device=device, dtype=dtype, requires_grad=True)
    w = torch.zeros(entry["weight"], device=device, dtype=dtype, requires_grad=True)
    kw = dict(stride=entry["strides"], padding=entry["pads"], dilation=entry["dilations"],
              groups=entry["group"])
    if entry["op"] == "ConvTranspose":
        fn = getattr(F, f"conv_transpose{dims}d")
        kw["output_padding"] = entry.get("output_padding", [0] * dims)
    else:
        fn = getattr(F, f"conv{dims}d")
    return fn, x, w, kw


class _Timer:
    """Microseconds of the work enqueued between start() and stop() on the current stream,
    by CUDA events (read once the device has finished it)."""

    def __init__(self):
        import torch

        self.begin = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def start(self):
        self.begin.record()

    def stop(self):
        self.end.record()
        self.end.synchronize()
        return self.begin.elapsed_time(self.end) * 1e3


def _run_one(entry, meter):
    """{forward_bytes, backward_bytes, forward_us, backward_us, backward_weight_us} for one
    entry: bytes beyond the outputs and times, from its second run (the first may search for
    the algorithm)."""
    import torch

    fn, x, w, kw = _convolution(entry, meter.device)
    timer = _Timer()
    result = {}
    for _ in range(2):
        base = meter.reset()
        timer.start()
        y = fn(x, w, None, **kw)
        forward_us = timer.stop()
        forward = meter.peak() - base - meter.bytes_of(y)
        gy = torch.zeros_like(y)
        base = meter.reset()
        timer.start()
        gx, gw = torch.autograd.grad(y, (x, w), gy, retain_graph=True)
        backward_us = timer.stop()
        backward = meter.peak() - base - meter.bytes_of(gx) - meter.bytes_of(gw)
        del gx, gw
        meter.reset()
        timer.start()
        (gw,) = torch.autograd.grad(y, (w,), gy)
        weight_us = timer.stop()
        result = {"forward_bytes": int(max(0, forward)), "backward_bytes": int(max(0, backward)),
                  "forward_us": round(forward_us, 1), "backward_us": round(backward_us, 1),
                  "backward_weight_us": round(weight_us, 1)}
        del y, gy, gw
    return result


def measure(model, example_input, autocast=None):
    """{"convolutions": [entry, ...]} for `model` on `example_input` (on a CUDA GPU; on
    another device there is nothing to measure and the list is empty), each entry with
    forward_bytes, backward_bytes, forward_us, backward_us and backward_weight_us; "skipped":
    the convolutions that ran out of memory."""
    x = example_input
    out = {"convolutions": [], "skipped": []}
    if x.device.type != "cuda":
        return out
    meter = _Meter(x.device)
    for entry in convolutions(model, x, autocast):
        try:
            measured = _run_one(entry, meter)
        except RuntimeError as e:  # torch.cuda.OutOfMemoryError is one
            if not meter.out_of_memory(e):
                raise
            out["skipped"].append(entry)
            continue
        finally:
            meter.give_back()
        entry = dict(entry)
        entry.pop("output_padding", None)
        entry.update(measured)
        out["convolutions"].append(entry)
    meter.reset()
    return out

