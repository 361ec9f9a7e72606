"""autovm.plan(): export a PyTorch model for training to ONNX and run autovm-plan on it."""
import contextlib
import copy
import inspect
import json
import os
import subprocess
import tempfile
import warnings

from . import _lib, locate
from . import calibrate as calibration
from . import conv_workspaces as measure_ws
from .errors import OptimizerMismatchError, PlannerError, ToolNotFoundError
from .planfile import Plan
from .planfile import pytorch_margin as pytorch_margin_of

# What moving frees in PyTorch, in autovm-plan's words: saved activations. The adapter can move
# the saved input too, but the training script holds the batch through the step (its loop
# variable), so its eviction frees nothing (a VGG-19 b256 run under a plan evicting it peaked
# 152 MB, the input's size, over the plan).
MOVABLE = ("activation",)
# What attach(..., executor="runtime") binds, so what libautovm can move (runtime_executor.py);
# workspaces and the label stay where PyTorch puts them.
RUNTIME_KINDS = ("activation", "input", "parameter", "buffer", "gradient", "optimizer_state")
# What it binds only when the step that reads it last is about to run (an activation gradient,
# when autograd hands it to its module's backward), so what may leave only to be read remotely
# there (autovm-plan --movable-at-last-use).
RUNTIME_LAST_USE_KINDS = ("activation_grad",)
# plan()'s default movable kinds for each executor of attach(), and those at their last use.
EXECUTOR_MOVABLE = {"copy": MOVABLE, "runtime": RUNTIME_KINDS}
EXECUTOR_LAST_USE = {"copy": (), "runtime": RUNTIME_LAST_USE_KINDS}
_BY_EXECUTOR = object()  # plan(movable=...) not given: the executor's kinds

# autovm-plan's exit codes (autovm-plan --help).
EXIT_CODES = {1: "internal error", 2: "bad usage", 3: "model file missing or unreadable",
              4: "not a valid ONNX model", 5: "unsupported ops",
              6: "no plan fits the budget", 7: "the plan could not be written"}


def planner_path(path=None):
    """autovm-plan's path: `path`, else the search of autovm/locate.py."""
    return locate.planner(path)[0]


def optimizer_kind(optimizer):
    """The plan's name for a torch optimizer: 'sgd', 'momentum' or 'adam'."""
    import torch

    if isinstance(optimizer, torch.optim.SGD):
        momenta = {float(g.get("momentum", 0) or 0) for g in optimizer.param_groups}
        if momenta == {0.0}:
            return "sgd"
        if 0.0 not in momenta:
            return "momentum"
        raise OptimizerMismatchError("SGD with momentum in some parameter groups and none in "
                                     "others: AutoVM plans one optimizer kind for all parameters")
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        return "adam"
    raise OptimizerMismatchError(
        f"{type(optimizer).__name__}: AutoVM plans SGD, SGD with momentum and Adam/AdamW only")


_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2.0 ** 10,
          "mib": 2.0 ** 20, "gib": 2.0 ** 30, "tib": 2.0 ** 40}


def parse_size(text):
    """Bytes of a size as autovm-plan reads it ('8GB' = 8e9, '7.5GiB' = 7.5 * 2^30, '512')."""
    import re

    m = re.fullmatch(r"\s*(\d+\.?\d*|\.\d+)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"budget: cannot read size '{text}': write a number with an optional "
                         "unit, e.g. 8GB, 7.5GiB, 512MiB or 1000000B")
    value = round(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"budget must be positive, not '{text}'")
    return int(value)


_help_cache = {}


def planner_flags(exe):
    """The options autovm-plan's --help lists (cached per executable)."""
    key = (exe, os.path.getmtime(exe))
    if key not in _help_cache:
        r = subprocess.run([exe, "--help"], capture_output=True, text=True)
        import re
        _help_cache[key] = set(re.findall(r"(?m)^\s+(--[a-z][a-z-]*)", r.stdout))
    return _help_cache[key]


def format_budget(budget):
    if budget is None:
        return None
    if isinstance(budget, bool):
        raise ValueError("budget: a size like '8GB' or a number of bytes, not a bool")
    if isinstance(budget, (int, float)):
        if budget <= 0:
            raise ValueError(f"budget must be positive, not {budget}")
        return f"{int(budget)}B"
    return str(budget)


def example_input(example_batch):
    """The model input of an example batch: the tensor itself, or the first of (input, label)."""
    import torch

    x = example_batch
    if isinstance(x, (tuple, list)):
        if not x:
            raise ValueError("example_batch is empty")
        x = x[0]
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"example_batch: a tensor or (input, label), not {type(x).__name__}")
    return x


def _strip_weights(path):
    """Drops floating-point initializer data (names, dims and types stay): the planner needs
    sizes only. Skipped when the onnx package is missing."""
    try:
        import onnx
        from onnx import TensorProto as T
    except ImportError:
        return
    floats = {T.FLOAT, T.DOUBLE, T.FLOAT16, T.BFLOAT16}
    proto = onnx.load(path)
    for t in proto.graph.initializer:
        if t.data_type in floats:
            for field in ("raw_data", "float_data", "double_data", "int32_data",
                          "external_data", "data_location"):
                t.ClearField(field)
    onnx.save(proto, path)


def output_names(output):
    """The ONNX output names for what the model's forward returns: 'logits' for one tensor,
    'output0', 'output1'... for a tuple or list of tensors, the keys for a dict of tensors
    (torchvision segmentation's {'out', 'aux'}; the exporter writes a dict's values in order).
    PlannerError for anything else (nested containers, non-tensor values)."""
    import torch

    if isinstance(output, torch.Tensor):
        return ["logits"]
    if isinstance(output, dict):
        keys = list(output)
        bad = [k for k in keys if not isinstance(k, str) or not isinstance(output[k], torch.Tensor)]
        if not keys or bad:
            what = f"entries {bad} that are not tensors under str keys" if bad else "no entries"
            raise PlannerError(f"the model returns a dict with {what}: AutoVM plans models whose "
                               "forward returns a tensor, a tuple of tensors or a dict of str to "
                               "tensors")
        return keys
    if isinstance(output, (tuple, list)):
        bad = [i for i, v in enumerate(output) if not isinstance(v, torch.Tensor)]
        if not output or bad:
            raise PlannerError(f"the model returns a {type(output).__name__} whose entries "
                               f"{bad} are not tensors: AutoVM plans models whose forward returns "
                               "a tensor, a tuple of tensors or a dict of str to tensors")
        return [f"output{i}" for i in range(len(output))]
    raise PlannerError(f"the model returns {type(output).__name__}: AutoVM plans models whose "
                       "forward returns a tensor, a tuple of tensors or a dict of str to tensors")


def export_onnx(model, example_batch, path, opset=17, export_batch=2):
    """Exports `model` for training the way the planner expects (TorchScript exporter,
    TrainingMode.TRAINING, no constant folding, symbolic batch, autocast off: the planner models
    autocast itself from the fp32 graph). Works on a CPU copy with a batch of `export_batch`,
    inside torch.random.fork_rng: the model, its buffers (batch norm running statistics) and the
    random state are left exactly as they were. Several outputs (a tuple, or a dict such as
    torchvision segmentation's {'out', 'aux'}) are named by output_names(), each with a
    symbolic batch."""
    import torch

    x = example_input(example_batch)
    x = x[:max(1, min(export_batch, x.shape[0]))].detach().to("cpu").clone()
    clone = copy.deepcopy(model).to("cpu").train()
    with torch.random.fork_rng(devices=[]), _no_autocast(torch), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():  # the structure of the outputs names them (the clone's buffer
            names = output_names(clone(x))  # values change, which the planner never reads)
        axes = {"input": {0: "batch"}}
        axes.update({n: {0: "batch"} for n in names})
        kwargs = dict(training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      opset_version=opset, input_names=["input"], output_names=names,
                      dynamic_axes=axes)
        if "dynamo" in inspect.signature(torch.onnx.export).parameters:
            kwargs["dynamo"] = False  # torch >= 2.5 defaults to dynamo (no module paths)
        try:
            torch.onnx.export(clone, x, path, **kwargs)
        except Exception as e:
            raise PlannerError(f"torch.onnx.export failed: {type(e).__name__}: "
                               f"{str(e).strip()[:600]}") from e
    _strip_weights(path)
    return path


def _no_autocast(torch):
    """A context with torch.autocast off on the CPU (the export runs there)."""
    try:
        return torch.autocast("cpu", enabled=False)
    except (AttributeError, RuntimeError):
        return contextlib.nullcontext()


AUTOCAST = ("bf16", "fp16")
LOSSES = ("cross-entropy", "mse", "external")


def active_autocast():
    """'bf16' or 'fp16' when called inside an enabled torch.autocast (CUDA first, then the
    CPU), None otherwise."""
    import torch

    from .state import _autocast_state

    names = {torch.bfloat16: "bf16", torch.float16: "fp16"}
    for device_type in ("cuda", "cpu"):
        on, dtype = _autocast_state(torch, device_type)
        if on:
            return names.get(dtype)
    return None


def _autocast_mode(autocast):
    """plan(autocast=...) resolved: None (the autocast plan() is called in, if any), False
    (fp32: None), 'bf16' or 'fp16' (other values are left for _autocast_args to refuse)."""
    if autocast is None:
        autocast = active_autocast()
    return autocast or None


def _autocast_args(autocast, flags):
    """autovm-plan's --autocast for a resolved plan(autocast=...) (_autocast_mode): None
    (fp32), 'bf16' or 'fp16'."""
    if autocast is None:
        return []
    if autocast not in AUTOCAST:
        raise ValueError(f"autocast: None, False, 'bf16' or 'fp16' (torch.autocast's "
                         f"torch.bfloat16 or torch.float16), not {autocast!r}")
    if "--autocast" not in flags:
        raise ToolNotFoundError("this autovm-plan has no --autocast option: rebuild it")
    return ["--autocast", autocast]


def _loss_args(loss, flags):
    if loss not in LOSSES:
        raise ValueError(f"loss: one of {', '.join(LOSSES)} (cross-entropy over axis 1 against "
                         "int64 labels, mean squared error against a target of each output's "
                         "shape, or external: the script's own loss, backward from the outputs' "
                         f"gradients), not {loss!r}")
    if loss == "cross-entropy":
        return []
    if "--loss" not in flags:
        raise ToolNotFoundError("this autovm-plan has no --loss option: rebuild it")
    return ["--loss", loss]


def _run(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        what = EXIT_CODES.get(r.returncode, "failed")
        raise PlannerError(f"autovm-plan exited {r.returncode} ({what}): "
                           f"{r.stderr.strip()[-1500:]}\n  command: {' '.join(args)}",
                           exit_code=r.returncode)


def plan(model, example_batch, optimizer, budget=None, *, out=None, device=None,
         planner=None, lib=None, opset=17, extra_args=(), keep_onnx=None, movable=_BY_EXECUTOR,
         pytorch_margin=True, data_parallel=False, bucket_mb=None, reserve=None,
         recompute=False, step_times=None, autocast=None, loss="cross-entropy",
         executor="copy", calibrate="auto", conv_workspaces="auto"):
    """Exports `model`, plans its training step with autovm-plan and loads the plan.

    budget: '8GB', '7.5GiB', a number of bytes, 'min', or None (no limit): what PyTorch may
    hold (torch.cuda.max_memory_allocated) while training under the plan.
    out: where the plan JSON goes (default: a temporary file kept for the Plan's life).
    device: an autovm-plan device profile (default: the planner's, h200-pcie).
    executor: the attach() executor the plan is for, "copy" (default) or "runtime"; it sets
    movable's default.
    movable: the tensor kinds the plan may take off the GPU (autovm-plan --movable): by
    default what the executor can move, saved activations for "copy" (planner.MOVABLE), every
    kind libautovm binds for "runtime" (RUNTIME_KINDS), with activation gradients there at
    their last use only (RUNTIME_LAST_USE_KINDS, --movable-at-last-use); None: every kind.
    pytorch_margin: plan under the budget less PyTorch's extra memory over AutoVM's training
    graph, as autovm-plan's PyTorch memory model predicts it (README.md, "The budget is
    PyTorch's"); False: hand the budget to autovm-plan as it is.
    reserve: memory PyTorch holds beyond the plan at each step, measured (a dict
    {"step_bytes": [...]} from autovm.step_reserve of memory traces, or a JSON file's path):
    planned as part of each step's workspace (autovm-plan --reserve), in place of the
    modelled margin (pytorch_margin is then not used).
    data_parallel: the model trains under DistributedDataParallel (one plan per rank): DDP's
    gradient buckets (bucket_mb, default 25, as DDP's bucket_cap_mb) are planned as persistent.
    The batch size is example_batch's first dimension (the batch of one rank); the optimizer
    kind comes from `optimizer`.
    recompute: False (default): the plan only moves tensors (--no-recompute). True: it may also
    regenerate tensors by replaying the ops the adapter can run again from what autograd saved
    (adapter.REPLAYABLE_OPS: convolution, batch norm, ReLU, max pooling, addition;
    --recompute-ops), or a list of some of them. Either way training stays bit-identical to plain PyTorch.
    step_times: each step's compute time measured by a profile run (a dict {"step_us": [...]}
    from Attachment.measured_step_times() under a plan of this model, batch and optimizer
    without a budget, or a JSON file's path): they replace the cost model's estimates
    (autovm-plan --step-times), so the plan's prediction, and its bound, are in this GPU's and
    this PyTorch's time.
    autocast: the training step runs under torch.autocast with this dtype: 'bf16'
    (torch.bfloat16) or 'fp16' (torch.float16, with GradScaler); False: fp32; None (default):
    the autocast plan() is called in, if any (autovm-plan --autocast). The model is exported in
    fp32 either way; the planner applies autocast's op lists (CUDA's) to it.
    loss: what the script computes from the model's outputs: 'cross-entropy' (default; class
    logits [N, C] with labels [N], or per pixel/voxel [N, C, ...] with int64 labels [N, ...]),
    'mse' (against a float target of each output's shape) or 'external' (any loss the script
    computes, Dice or focal: backward starts from the outputs' gradients; autovm-plan --loss).
    One loss term per output; a model may return a tensor, a tuple of tensors or a dict of them.

    calibrate: "auto" (default): with a budget in bytes, no data_parallel and the model and
    example batch on a CUDA GPU, run two training steps under the plan (executor "copy": with
    PyTorch's allocator capped; "runtime": on libautovm's pool, which must be installed
    (autovm.allocator), counted by the runtime on a managed pool and, on a vmm pool, as the
    device memory its live allocations held, which attach() then holds the pool to) and plan
    again with a larger margin until their peak is within the budget
    (autovm/calibrate.py; the model, optimizer and random state are restored, and
    PlannerError, exit_code 6, says so when no plan holds); True: the same, and ValueError
    where it cannot run; False: never. The example batch's labels are used when it is
    (input, labels).

    conv_workspaces: "auto" (default): when the calibration runs, measure
    each convolution's cuDNN workspace on this GPU first (autovm/conv_workspaces.py) and plan
    it (autovm-plan --conv-workspaces), so that cuDNN keeps its fast algorithms; the
    calibration then runs without a cap. Should no plan hold with them, the model is planned again with the
    estimate (and a RuntimeWarning says convolutions may run slower algorithms). With
    autovm.allocator's pool as PyTorch's allocator the measured workspaces are planned whole
    (autovm-plan --workspaces-as-measured), and a budget that cannot hold them is refused
    (PlannerError, exit_code 6): cuDNN falls back to a smaller workspace only on PyTorch's own
    out-of-memory exception, so it would take the whole one whatever the plan said; except on
    the vmm pool with its allocator shim (torch_oom.py), whose refusals past the budget are
    that exception: there the workspaces are cut as on a real GPU of that size. A dict
    ({"convolutions": [...]}) or a JSON file's path: use it as it is; None: the estimate.

    The Plan returned has requested_budget_bytes (the budget asked for) and
    pytorch_margin_bytes (what was taken off it); budget_bytes is what autovm-plan planned for;
    calibration: what the calibration measured ({"plans", "peak_bytes", "margin_bytes",
    "tries"}), or None when it did not run; conv_workspaces: the measured workspaces the plan
    was made with ({"convolutions": [...], ...}), or None for the estimate.
    """
    if executor not in EXECUTOR_MOVABLE:
        raise ValueError(f"executor must be one of {', '.join(map(repr, EXECUTOR_MOVABLE))}, "
                         f"not {executor!r}")
    last_use = ()
    if movable is _BY_EXECUTOR:
        movable, last_use = EXECUTOR_MOVABLE[executor], EXECUTOR_LAST_USE[executor]
    exe = planner_path(planner)
    _lib.Library.get(lib)  # fail before the slow export when libautovm is missing
    model = getattr(model, "module", model) if _is_ddp(model) else model
    kind = optimizer_kind(optimizer)
    x = example_input(example_batch)
    if x.dim() < 1:
        raise ValueError("example_batch: the input needs a batch dimension")
    batch = int(x.shape[0])
    flags = planner_flags(exe)
    # Checked before the slow export.
    mode = _autocast_mode(autocast)
    chosen = _recompute_args(recompute, flags) + _autocast_args(mode, flags)
    chosen += _loss_args(loss, flags)
    b = format_budget(budget)
    requested = None
    if b is not None and b != "min":
        requested = parse_size(b)
    if calibrate not in ("auto", True, False):
        raise ValueError(f"calibrate: 'auto', True or False, not {calibrate!r}")
    can_calibrate = calibration.wanted(model, x, requested, executor, data_parallel)
    if calibrate is True and not can_calibrate:
        raise ValueError("calibrate=True needs a budget in bytes, no data_parallel, the model "
                         "and example batch on a CUDA GPU, and for executor='runtime' "
                         "autovm.allocator installed")
    calibrating = can_calibrate and calibrate is not False
    workspaces = _conv_workspaces(conv_workspaces, calibrating, model, x, mode)
    if workspaces is not None and "--conv-workspaces" not in flags:
        raise ToolNotFoundError(f"{exe} has no --conv-workspaces option: rebuild autovm-plan")
    # Removed when the Plan that keeps it goes, or at once when planning fails.
    folder = tempfile.TemporaryDirectory(prefix="autovm-")
    tmp = folder.name
    onnx_path = keep_onnx or os.path.join(tmp, "model.onnx")
    export_onnx(model, x, onnx_path, opset=opset)
    out = os.path.abspath(out) if out else os.path.join(tmp, "plan.json")
    args = [exe, onnx_path, "--batch", str(batch), "--optimizer", kind] + chosen
    args += ["--memory-model", "pytorch", "--quiet"]
    if "--pool-indices" in flags:  # max pooling's indices are a saved tensor the adapter moves
        args += ["--pool-indices"]
    else:
        warnings.warn(f"{exe} has no --pool-indices option: max pooling's indices stay on the "
                      "GPU, which the plan does not count; rebuild autovm-plan",
                      RuntimeWarning, stacklevel=2)
    args += _remote_read_args(executor, flags)
    if movable is not None:
        kinds = ",".join(movable)
        if "--movable" in flags:
            args += ["--movable", kinds]
        else:
            warnings.warn(f"{exe} has no --movable option: the plan may also evict tensors the "
                          f"adapter does not move (only {kinds} move); rebuild autovm-plan",
                          RuntimeWarning, stacklevel=2)
        if last_use and "--movable-at-last-use" in flags:
            args += ["--movable-at-last-use", ",".join(last_use)]
    if data_parallel or bucket_mb is not None:
        if not data_parallel:
            raise ValueError("bucket_mb is for data_parallel=True")
        if "--data-parallel" not in flags:
            raise ToolNotFoundError(f"{exe} has no --data-parallel option: rebuild autovm-plan")
        args += ["--data-parallel"]
        if bucket_mb is not None:
            args += ["--bucket-mb", repr(float(bucket_mb))]
    if device:
        args += ["--device", device]
    if reserve is not None:
        if "--reserve" not in flags:
            raise ToolNotFoundError(f"{exe} has no --reserve option: rebuild autovm-plan")
        args += ["--reserve", _json_file(reserve, tmp, "reserve.json")]
        pytorch_margin = False
    if step_times is not None:
        args += ["--step-times", _json_file(step_times, tmp, "step-times.json")]
    args += list(extra_args)

    def solve(base, measured):
        """The plan of `base` (the arguments so far), calibrated when it is to be; measured:
        base plans the measured workspaces."""
        margin = 0
        if requested is not None and pytorch_margin:
            # The modelled extra does not depend on the budget: one plan without one has it.
            free = os.path.join(tmp, "no-budget.json")
            _run(base + ["-o", free])
            with open(free, "rb") as f:
                margin = pytorch_margin_of(json.load(f)) or 0
            os.remove(free)

        def planned(margin):
            if requested is not None and requested - margin <= 0:
                raise PlannerError(
                    f"the budget {requested} B is below PyTorch's modelled extra memory over "
                    f"the plan's training graph ({margin} B): no plan can keep PyTorch within "
                    f"it", exit_code=6)
            under = f"{requested - margin}B" if requested is not None else b
            _run(base + (["--budget", under] if under is not None else []) + ["-o", out])
            p = Plan(out, lib=lib)
            p.requested_budget_bytes = requested if requested is not None else p.budget_bytes
            p.pytorch_margin_bytes = margin
            return p

        if not calibrating:
            return planned(margin)
        # With measured workspaces planned, cuDNN's fast algorithms fit, and no cap is needed
        # to keep it to ones that do (calibrate.py).
        return calibration.fit(planned, margin, model, example_batch, optimizer, requested,
                               autocast=mode, loss=loss, executor=executor,
                               capped=not measured)

    try:
        if workspaces is None:
            p = solve(args, False)
        else:
            try:
                measured = ["--conv-workspaces",
                            _json_file(workspaces, tmp, "conv-workspaces.json")]
                if _pool_is_torchs() and not _pool_cuts_workspaces():
                    # cuDNN falls back to an algorithm with a smaller workspace only on
                    # PyTorch's own out-of-memory exception, and only when the allocation past
                    # the budget is refused: a workspace cut to the budget would otherwise be
                    # taken whole all the same.
                    if "--workspaces-as-measured" not in flags:
                        raise ToolNotFoundError(f"{exe} has no --workspaces-as-measured "
                                                f"option: rebuild autovm-plan")
                    measured.append("--workspaces-as-measured")
                p = solve(args + measured, True)
                p.conv_workspaces = workspaces
                _warn_cut_workspaces(p)
            except PlannerError as e:
                if e.exit_code != 6:
                    raise
                if _pool_cuts_workspaces():
                    raise  # cut to what each step can hold, and still no plan: too small
                if executor == "runtime" or _pool_is_torchs():
                    # On libautovm's pool, cuDNN cannot fall back to a smaller workspace: it
                    # does so only on PyTorch's own out-of-memory exception (calibrate.py).
                    raise PlannerError(
                        f"the budget {requested} B cannot be promised: no plan holds it with "
                        f"the convolutions' measured workspaces, which cuDNN takes on "
                        f"autovm's pool whatever the plan says ({str(e)[:1500]}). Give a "
                        f"larger budget", exit_code=6) from e
                warnings.warn(f"no plan holds the budget with the convolutions' measured "
                              f"workspaces ({str(e)[:1500]}); planned with the estimate, so "
                              f"cuDNN may run slower convolution algorithms", RuntimeWarning,
                              stacklevel=2)
                p = solve(args, False)
    finally:
        with contextlib.suppress(OSError):
            if not keep_onnx:
                os.remove(onnx_path)
    p._folder = folder  # holds the plan file when `out` is not given
    return p


def _warn_cut_workspaces(p):
    """Warns when the plan cut measured convolution workspaces to fit the budget: cuDNN runs
    slower algorithms there than the ones measured, so the step takes longer than predicted."""
    cut = p.options.get("conv_workspaces_cut") or []
    if not cut:
        return
    planned = sum(c["bytes"] for c in cut)
    measured = sum(c["measured_bytes"] for c in cut)
    warnings.warn(f"{len(cut)} convolution workspace(s) cut to fit the budget ({planned} of the "
                  f"{measured} B measured): cuDNN runs slower algorithms there, which the "
                  f"predicted step time does not count (docs/conv-workspaces.md); a larger "
                  f"budget keeps them whole", RuntimeWarning, stacklevel=3)


def _pool_is_torchs():
    """Whether autovm.allocator's pool is PyTorch's allocator in this process."""
    from . import allocator

    return allocator.installed() == "global"


def _pool_cuts_workspaces():
    """Whether cuDNN meets the budget on autovm.allocator's pool as a GPU of that size would:
    the pool is PyTorch's allocator on vmm memory, whose limit (the budget, for a calibrated
    plan: runtime_executor.make_runtime) refuses what passes it, and the refusal is PyTorch's
    own out-of-memory error (the shim, torch_oom.py), on which cuDNN takes an algorithm with a
    smaller workspace. Then measured workspaces are planned cut to what each step can hold
    (autovm-plan's workspace fit), as on a real GPU of that size."""
    from . import allocator

    return (_pool_is_torchs() and allocator.memory() == "vmm"
            and allocator.out_of_memory_error() == "torch.OutOfMemoryError")


def _conv_workspaces(value, calibrating, model, x, autocast):
    """plan()'s conv_workspaces: the table to plan with, or None for the estimate."""

    if value is None or value is False:
        return None
    if isinstance(value, (str, os.PathLike)) and value != "auto":
        if not os.path.isfile(value):
            raise ValueError(f"conv_workspaces: 'auto', None, a dict or a JSON file's path; "
                             f"{os.fspath(value)!r} is no file")
        with open(value) as f:
            value = json.load(f)
    if isinstance(value, dict):
        if not isinstance(value.get("convolutions"), list):
            raise ValueError('conv_workspaces: a dict {"convolutions": [...]} (as '
                             'autovm.conv_workspaces.measure returns it)')
        return value
    if value != "auto":
        raise ValueError(f"conv_workspaces: 'auto', None, a dict or a JSON file's path, "
                         f"not {value!r}")
    if not calibrating:
        return None
    table = measure_ws.measure(model, x, autocast)
    return table if table["convolutions"] else None


def _json_file(value, tmp, name):
    """A path given as it is, or a dict written to tmp/name as JSON: the file's path."""
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        json.dump(value, f)
    return path


# The executors of attach() whose trainer memory lets a kernel read an evicted tensor where its
# host copy lies (docs/execution-model.md, "Remote reads"): libautovm maps it at the tensor's
# own address (runtime/README.md). The copy executor cannot: its host copies are PyTorch
# tensors at other addresses.
REMOTE_READ_EXECUTORS = ("runtime",)


def _remote_read_args(executor, flags):
    """autovm-plan's arguments that keep remote reads out of a plan for `executor` when it
    cannot run them: every step then keeps its working set resident."""
    if executor in REMOTE_READ_EXECUTORS or "--no-remote-reads" not in flags:
        return []
    return ["--no-remote-reads"]


def _recompute_args(recompute, flags):
    from .adapter import REPLAYABLE_OPS

    if recompute is False or recompute is None:
        return ["--no-recompute"]
    if isinstance(recompute, str):
        recompute = recompute.split(",")
    ops = list(REPLAYABLE_OPS) if recompute is True else list(recompute)
    other = sorted(set(ops) - set(REPLAYABLE_OPS))
    if other or not ops:
        raise ValueError(f"recompute: True, False or some of {', '.join(REPLAYABLE_OPS)} (the "
                         f"ops the adapter can replay), not {other or ops}")
    if "--recompute-ops" not in flags:
        raise ToolNotFoundError("this autovm-plan has no --recompute-ops option: rebuild it")
    return ["--recompute-ops", ",".join(sorted(set(ops)))]


def _is_ddp(model):
    try:
        from torch.nn.parallel import DistributedDataParallel
    except ImportError:
        return False
    return isinstance(model, DistributedDataParallel)

