#!/usr/bin/env python3
"""PyTorch's own memory use for a training step (the PyTorch memory model), as in BENCHMARKS.md.

For each torchvision model and batch: build the model (weights=None, seed 0, model.train()),
an optimizer (SGD with momentum 0.9 by default), random fp32 input and integer targets, and run
3 training steps of plain PyTorch (no adapter, default cuDNN settings):

    opt.zero_grad(set_to_none=True); out = model(x); loss = cross_entropy(out, y);
    loss.backward(); opt.step()

Step 1 warms up (it creates the optimizer state and picks cuDNN algorithms). The peak memory
statistics are reset after it. Step 2 runs as above, unsplit; step 3 runs the same step split
into phases, with the peak statistics reset between phases, and with a saved-tensors hook that
counts what autograd saves. Recorded per configuration (bytes, CUDA figures only on CUDA):

    peak_allocated        torch.cuda.max_memory_allocated over steps 2 and 3 (the target)
    peak_step2            max_memory_allocated of step 2 alone (unsplit)
    peak_reserved         torch.cuda.max_memory_reserved over the whole run
    model_allocated       memory_allocated after the model is on the device (params + buffers)
    state_allocated       memory_allocated after step 1 and zero_grad (params, buffers,
                          optimizer state): what a steady step starts from, without x and y
    data_allocated        memory_allocated once x and y exist, before step 2
    end_forward_allocated memory_allocated after the loss of step 3 (saved tensors, logits, loss)
    peak_forward          max_memory_allocated during forward + loss of step 3
    peak_backward         max_memory_allocated during backward of step 3
    end_backward_allocated memory_allocated after backward (gradients present)
    peak_optimizer        max_memory_allocated during opt.step() of step 3
    saved_bytes           unique storages autograd saved in the forward of step 3 (all of them)
    saved_activation_bytes the same, without parameters and buffers

inception_v3 is built with aux_logits=False, init_weights=False at 299x299, as
tools/export_models.py exports models/inception_v3.onnx (--inception-aux builds the auxiliary
classifier and adds 0.4 x its loss, as torchvision's reference training does). Every other model
runs at 224x224.

With --trace (default: resnet18 at batch 32 on CUDA) one more instrumented step of that model
records every aten op in order (forward, loss, backward, optimizer) with the bytes allocated
before and after it and the peak during it, through a TorchDispatchMode, and the caching
allocator's own event list (torch.cuda.memory._record_memory_history) for that step
(--no-snapshot leaves the event list out).

usage (GPU machine):  python3 tools/bench/torch_memory.py [--out $OUT/torch_memory.json]
usage (CPU, logic only): /usr/bin/python3 tools/bench/torch_memory.py --device cpu \\
                            --models resnet18 --batches 2 --out /tmp/tm.json
"""
import argparse
import gc
import json
import os
import platform
import sys
import time

MODELS = ["vgg16", "vgg19", "resnet18", "resnet50", "resnet152", "densenet121",
          "mobilenet_v2", "inception_v3"]
BATCHES = [32, 128]
RESOLUTION = {"inception_v3": 299}
NUM_CLASSES = 1000


def mib(n):
    return "-" if n is None else f"{n / 2**20:9.1f}"


def build_model(name, device, inception_aux):
    import torch
    import torchvision.models as tvm

    kwargs = {}
    if name in ("inception_v3", "googlenet"):
        kwargs = {"aux_logits": inception_aux, "init_weights": False}
    torch.manual_seed(0)
    builder = getattr(tvm, name)
    # Build straight on the device where torch allows it (torch >= 2.0): much faster for VGG.
    if device.type == "cuda" and hasattr(torch.device, "__enter__"):
        with device:
            model = builder(weights=None, **kwargs)
    else:
        model = builder(weights=None, **kwargs)
    return model.to(device).train()


def make_optimizer(name, params):
    import torch

    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01)
    if name == "momentum":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3)
    raise ValueError(name)


def loss_of(out, y):
    import torch.nn.functional as F

    if hasattr(out, "logits"):  # InceptionOutputs / GoogLeNetOutputs in training
        loss = F.cross_entropy(out.logits, y)
        aux = getattr(out, "aux_logits", None)
        if aux is not None:
            loss = loss + 0.4 * F.cross_entropy(aux, y)
        return loss
    return F.cross_entropy(out, y)


class SavedCounter:
    """Counts the unique storages autograd saves (torch.autograd.graph.saved_tensors_hooks)."""

    def __init__(self, exclude_ptrs):
        self.exclude = exclude_ptrs
        self.storages = {}  # data_ptr -> (nbytes, is_param_or_buffer)
        self.count = 0

    def pack(self, t):
        self.count += 1
        try:
            st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
            ptr, nbytes = st.data_ptr(), st.nbytes()
        except Exception:  # sparse or otherwise storage-less tensors
            ptr, nbytes = id(t), t.numel() * t.element_size()
        self.storages[ptr] = (nbytes, ptr in self.exclude)
        return t

    @staticmethod
    def unpack(t):
        return t

    def totals(self):
        total = sum(n for n, _ in self.storages.values())
        act = sum(n for n, p in self.storages.values() if not p)
        return total, act


def storage_ptrs(model):
    ptrs = set()
    for t in list(model.parameters()) + list(model.buffers()):
        st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        ptrs.add(st.data_ptr())
    return ptrs


def make_trace_mode(cuda):
    """A TorchDispatchMode that logs each aten op with allocated bytes around it."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Trace(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            before = torch.cuda.memory_allocated() if cuda else None
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            out = func(*args, **kwargs)
            rec = {"op": str(func.overloadpacket.__name__) if hasattr(func, "overloadpacket")
                   else str(func)}
            rec["name"] = str(func)
            outs = out if isinstance(out, (tuple, list)) else [out]
            shapes = []
            for o in outs:
                if isinstance(o, torch.Tensor):
                    shapes.append([list(o.shape), str(o.dtype).replace("torch.", ""),
                                   o.numel() * o.element_size()])
            rec["outputs"] = shapes
            if cuda:
                rec["before"] = before
                rec["after"] = torch.cuda.memory_allocated()
                rec["peak"] = torch.cuda.max_memory_allocated()
            self.ops.append(rec)
            return out

    return Trace()


def sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def run_config(name, batch, args, device, trace=False):
    import torch

    cuda = device.type == "cuda"
    res = args.resolution or RESOLUTION.get(name, 224)
    rec = {"model": name, "batch": batch, "resolution": res, "optimizer": args.optimizer,
           "inception_aux": bool(args.inception_aux and name == "inception_v3")}
    t0 = time.perf_counter()
    if cuda:
        from autocast_peak import release_library_workspaces
        release_library_workspaces()  # as in a fresh process: an earlier model's are released
        torch.cuda.reset_peak_memory_stats()
        rec["allocated_at_start"] = torch.cuda.memory_allocated()
    base = torch.cuda.memory_allocated() if cuda else 0

    def alloc():
        return torch.cuda.memory_allocated() - base if cuda else None

    def peak():
        return torch.cuda.max_memory_allocated() - base if cuda else None

    model = build_model(name, device, args.inception_aux)
    params = list(model.parameters())
    rec["parameter_bytes"] = sum(p.numel() * p.element_size() for p in params)
    rec["buffer_bytes"] = sum(b.numel() * b.element_size() for b in model.buffers())
    rec["parameter_tensors"] = len(params)
    sync(device)
    rec["model_allocated"] = alloc()
    opt = make_optimizer(args.optimizer, params)

    torch.manual_seed(1)
    x = torch.randn(batch, 3, res, res, device=device)
    y = torch.randint(0, NUM_CLASSES, (batch,), device=device)
    rec["input_bytes"] = x.numel() * x.element_size() + y.numel() * y.element_size()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model(x), y)
        loss.backward()
        opt.step()
        return loss

    # Step 1: warm-up (optimizer state, cuDNN algorithm choice).
    step()
    opt.zero_grad(set_to_none=True)
    sync(device)
    rec["data_allocated"] = alloc()
    rec["state_allocated"] = rec["data_allocated"] - rec["input_bytes"] if cuda else None
    rec["optimizer_state_bytes"] = sum(
        v.numel() * v.element_size() for s in opt.state.values() for v in s.values()
        if isinstance(v, torch.Tensor))
    if cuda:
        torch.cuda.reset_peak_memory_stats()

    # Step 2: unsplit.
    step()
    sync(device)
    rec["peak_step2"] = peak()

    # Step 3: split into phases, counting saved tensors.
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    opt.zero_grad(set_to_none=True)
    rec["start_step3_allocated"] = alloc()
    counter = SavedCounter(storage_ptrs(model))
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
        out = model(x)
        loss = loss_of(out, y)
    sync(device)
    rec["end_forward_allocated"] = alloc()
    rec["peak_forward"] = peak()
    rec["saved_tensor_count"] = counter.count
    rec["saved_bytes"], rec["saved_activation_bytes"] = counter.totals()
    del out
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    loss.backward()
    sync(device)
    rec["peak_backward"] = peak()
    rec["end_backward_allocated"] = alloc()
    rec["gradient_bytes"] = sum(p.grad.numel() * p.grad.element_size() for p in params
                                if p.grad is not None)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    opt.step()
    sync(device)
    rec["peak_optimizer"] = peak()
    rec["end_step_allocated"] = alloc()
    rec["loss"] = float(loss.detach().cpu())
    del loss
    if cuda:
        rec["peak_allocated"] = max(rec["peak_step2"], rec["peak_forward"],
                                    rec["peak_backward"], rec["peak_optimizer"])
        rec["peak_reserved"] = torch.cuda.max_memory_reserved()

    trace_rec = None
    if trace:
        try:  # the trace is a guide only: never lose the configuration's figures for it
            trace_rec = trace_step(model, opt, x, y, device, args.snapshot, base)
        except Exception as e:
            trace_rec = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    rec["seconds"] = round(time.perf_counter() - t0, 3)

    del model, opt, x, y, params
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return rec, trace_rec


def trace_step(model, opt, x, y, device, snapshot, base):
    import torch

    cuda = device.type == "cuda"
    opt.zero_grad(set_to_none=True)
    sync(device)
    mode = make_trace_mode(cuda)
    snap = None
    if cuda and snapshot:
        try:
            torch.cuda.memory._record_memory_history(max_entries=200000, stacks="python")
        except TypeError:  # older signature
            torch.cuda.memory._record_memory_history(True)
    marks = {}
    with mode:
        loss = loss_of(model(x), y)
        marks["forward_end"] = len(mode.ops)
        loss.backward()
        marks["backward_end"] = len(mode.ops)
        opt.step()
    sync(device)
    if cuda and snapshot:
        raw = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        snap = summarize_snapshot(raw)
    if cuda:
        for r in mode.ops:
            for k in ("before", "after", "peak"):
                r[k] -= base
    return {"base_allocated": base, "marks": marks, "ops": mode.ops, "allocator_events": snap}


def summarize_snapshot(raw):
    """The allocator's events for the traced step: action, size, and the innermost torch frame."""
    events = []
    for trace in raw.get("device_traces", []):
        for e in trace:
            frames = e.get("frames") or []
            where = None
            for f in frames:
                fn = f.get("filename", "")
                if "torch" in fn or "torchvision" in fn:
                    where = f"{os.path.basename(fn)}:{f.get('line')}:{f.get('name')}"
                    break
            events.append({"action": e.get("action"), "size": e.get("size"),
                           "addr": e.get("addr"), "where": where})
    return events


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--batches", nargs="+", type=int, default=BATCHES)
    ap.add_argument("--optimizer", choices=["sgd", "momentum", "adam"], default="momentum")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--resolution", type=int, help="override 224 (299 for inception_v3)")
    ap.add_argument("--inception-aux", action="store_true",
                    help="build inception_v3 with its auxiliary classifier (the shipped ONNX has none)")
    ap.add_argument("--trace", default="resnet18:32",
                    help="MODEL:BATCH to trace op by op ('none' to skip; default resnet18:32)")
    ap.add_argument("--no-snapshot", dest="snapshot", action="store_false",
                    help="with --trace, skip the caching allocator's event list (kept by default)")
    default_out = os.path.join(os.environ["OUT"], "torch_memory.json") if os.environ.get("OUT") else None
    ap.add_argument("--out", default=default_out, help="JSON output (default $OUT/torch_memory.json)")
    args = ap.parse_args()

    import torch
    import torchvision

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("no CUDA device (use --device cpu for a logic check)")
    trace_cfg = None
    if args.trace and args.trace != "none":
        m, _, b = args.trace.partition(":")
        trace_cfg = (m, int(b or 32))

    meta = {"torch": torch.__version__, "torchvision": torchvision.__version__,
            "python": platform.python_version(), "device": str(device),
            "optimizer": args.optimizer,
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
            "command": " ".join(sys.argv)}
    if cuda:
        meta["gpu"] = torch.cuda.get_device_name()
        meta["cudnn"] = torch.backends.cudnn.version()
        meta["cuda"] = torch.version.cuda
        meta["allocator_settings"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")

    results, trace = [], None
    t_all = time.perf_counter()
    for name in args.models:
        for batch in args.batches:
            want_trace = trace_cfg == (name, batch)
            try:
                rec, tr = run_config(name, batch, args, device, trace=want_trace)
                if tr is not None:
                    trace = dict(tr, model=name, batch=batch)
            except torch.cuda.OutOfMemoryError if hasattr(torch.cuda, "OutOfMemoryError") else RuntimeError as e:
                rec = {"model": name, "batch": batch, "error": str(e).splitlines()[0][:300]}
                gc.collect()
                if cuda:
                    torch.cuda.empty_cache()
            results.append(rec)
            print(f"{name:<14} {batch:>4}  peak {mib(rec.get('peak_allocated'))} MiB  "
                  f"fwd {mib(rec.get('peak_forward'))}  bwd {mib(rec.get('peak_backward'))}  "
                  f"opt {mib(rec.get('peak_optimizer'))}  state {mib(rec.get('state_allocated'))}  "
                  f"saved {mib(rec.get('saved_activation_bytes'))}  "
                  f"reserved {mib(rec.get('peak_reserved'))}  {rec.get('seconds', 0):.1f} s"
                  + (f"  ERROR {rec['error']}" if "error" in rec else ""), flush=True)
    if trace_cfg and trace is None:  # the traced configuration was not among the runs
        m, b = trace_cfg
        try:
            _, tr = run_config(m, b, args, device, trace=True)
            trace = dict(tr, model=m, batch=b)
        except Exception as e:  # the trace is a guide only: never lose the table for it
            trace = {"model": m, "batch": b, "error": str(e).splitlines()[0][:300]}
    meta["seconds"] = round(time.perf_counter() - t_all, 1)
    doc = {"meta": meta, "results": results, "trace": trace}
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(f"wrote {args.out} ({meta['seconds']} s)")
    else:
        print(f"done in {meta['seconds']} s (no --out and no $OUT: nothing written)")


if __name__ == "__main__":
    main()
