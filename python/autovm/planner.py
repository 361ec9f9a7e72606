"""autovm.plan(): export a PyTorch model for training to ONNX and run autovm-plan on it."""
import contextlib
import copy
import inspect
import os
import subprocess
import tempfile
import warnings

from . import _lib
from .errors import OptimizerMismatchError, PlannerError, ToolNotFoundError
from .planfile import Plan

# autovm-plan's exit codes (autovm-plan --help).
EXIT_CODES = {1: "internal error", 2: "bad usage", 3: "model file missing or unreadable",
              4: "not a valid ONNX model", 5: "unsupported ops",
              6: "no plan fits the budget", 7: "the plan could not be written"}


def planner_path(path=None):
    """Where autovm-plan is: `path`, else $AUTOVM_PLAN, else <repo>/build/compiler/driver/."""
    where = "the path given"
    if not path:
        path, where = os.environ.get("AUTOVM_PLAN"), "$AUTOVM_PLAN"
    if not path:
        path = os.path.join(_lib.repo_root(), "build", "compiler", "driver", "autovm-plan")
        where = "the repository's build"
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ToolNotFoundError(
            f"autovm-plan not found at {path} ({where}). Build it (meson setup build && ninja -C "
            "build) or set $AUTOVM_PLAN. On a machine without it, make the plan elsewhere and "
            "use autovm.load_plan(FILE)")
    return path


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


def export_onnx(model, example_batch, path, opset=17, export_batch=2):
    """Exports `model` for training the way the planner expects (TorchScript exporter,
    TrainingMode.TRAINING, no constant folding, symbolic batch). Works on a CPU copy with a
    batch of `export_batch`, inside torch.random.fork_rng: the model, its buffers (batch norm
    running statistics) and the random state are left exactly as they were."""
    import torch

    x = example_input(example_batch)
    x = x[:max(1, min(export_batch, x.shape[0]))].detach().to("cpu").clone()
    clone = copy.deepcopy(model).to("cpu").train()
    kwargs = dict(training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                  opset_version=opset, input_names=["input"], output_names=["logits"],
                  dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False  # torch >= 2.5 defaults to the dynamo exporter (no module paths)
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(clone, x, path, **kwargs)
        except Exception as e:
            raise PlannerError(f"torch.onnx.export failed: {type(e).__name__}: "
                               f"{str(e).strip()[:600]}") from e
    _strip_weights(path)
    return path


def plan(model, example_batch, optimizer, budget=None, *, out=None, device=None,
         planner=None, lib=None, opset=17, extra_args=(), keep_onnx=None):
    """Exports `model`, plans its training step with autovm-plan and loads the plan.

    budget: '8GB', '7.5GiB', a number of bytes, 'min', or None (no limit).
    out: where the plan JSON goes (default: a temporary file kept for the Plan's life).
    device: an autovm-plan device profile (default: the planner's, h200-pcie).
    The batch size is example_batch's first dimension; the optimizer kind comes from
    `optimizer`. Recomputation is never planned (--no-recompute): the PyTorch adapter moves
    tensors only, so results stay bit-identical to plain PyTorch.
    """
    exe = planner_path(planner)
    _lib.Library.get(lib)  # fail before the slow export when libautovm is missing
    kind = optimizer_kind(optimizer)
    x = example_input(example_batch)
    if x.dim() < 1:
        raise ValueError("example_batch: the input needs a batch dimension")
    batch = int(x.shape[0])
    tmp = tempfile.mkdtemp(prefix="autovm-")
    onnx_path = keep_onnx or os.path.join(tmp, "model.onnx")
    export_onnx(model, x, onnx_path, opset=opset)
    out = os.path.abspath(out) if out else os.path.join(tmp, "plan.json")
    args = [exe, onnx_path, "--batch", str(batch), "--optimizer", kind, "--no-recompute",
            "-o", out, "--quiet"]
    b = format_budget(budget)
    if b is not None:
        args += ["--budget", b]
    if device:
        args += ["--device", device]
    args += list(extra_args)
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        what = EXIT_CODES.get(r.returncode, "failed")
        raise PlannerError(f"autovm-plan exited {r.returncode} ({what}): "
                           f"{r.stderr.strip()[-1500:]}\n  command: {' '.join(args)}",
                           exit_code=r.returncode)
    with contextlib.suppress(OSError):
        if not keep_onnx:
            os.remove(onnx_path)
    return Plan(out, lib=lib)
