#!/usr/bin/env python3
"""AutoVM's PyTorch adapter against PyTorch's own ways to save memory, under bf16 autocast, on
one CUDA GPU: classifiers and dense prediction.

Models (SGD momentum 0.9, the forward and the loss under torch.autocast("cuda", bfloat16)):
  vgg19      torchvision VGG-19, batch 256, 224x224, cross-entropy over 1000 classes
  resnet50   torchvision ResNet-50, batch 256, 224x224, cross-entropy over 1000 classes
  unet2d     dense_models.UNet: 2-D, base width 64, 4 levels down, 3 input channels, 21
             classes, 1024x1024, batch 16; per-pixel cross-entropy against int64 [N, H, W]
  unet3d     dense_models.UNet: 3-D, base width 32, 4 levels down, 1 input channel, 4 classes,
             128x128x128, batch 32; per-voxel cross-entropy
  deeplabv3  torchvision deeplabv3_resnet50(weights=None, weights_backbone=None,
             num_classes=21, aux_loss=False: one output, "out", no auxiliary head),
             1024x1024, batch 16; per-pixel cross-entropy
The U-Nets' batches are chosen so that plain PyTorch needs more than 50 GB and stays under
100 GB of the H200's 139 GiB, by autovm-plan's PyTorch memory model (bf16, SGD momentum:
autovm.plan() without a budget, plan.pytorch_memory["peak_allocated_bytes"]; saved tensors in
brackets):
  unet2d b16: 50.9 GB (46.7)   unet3d b32: 70.4 GB (61.4)   deeplabv3 b16: 37.4 GB (35.3)
(per sample 3.16, 2.19 and 2.32 GB: the next power of two would put the 2-D U-Net over
100 GB). They are powers of two because PyTorch's pinned host allocator rounds each block up
to one and these models' per-sample tensors are powers of two: a batch of 2**k keeps
save_on_cpu's pinned memory at the saved bytes, below 90 GB of the host's 128 GB. The 3-D
U-Net's 25 % of plain's peak is below what any plan can keep (one backward convolution of the
top decoder block holds 31 % of the peak at once): its rows plan at the least budget instead
and say so.

Configurations of each model:
  plain          plain PyTorch
  save_on_cpu    torch.autograd.graph.save_on_cpu(pin_memory=True); skipped (and said so) when
                 the pinned host memory it would need (plain's peak, times the allocator's
                 power-of-two rounding of the batch) exceeds --host-limit
  checkpoint     torch.utils.checkpoint (use_reentrant=False): VGG checkpoint_sequential over
                 features in 4 segments; ResNet-50 and DeepLabV3's backbone each layerN; the
                 U-Nets each encoder and decoder block (dense_models.UNet.run)
  autovm_B       autovm.attach under autovm.plan(..., budget=B), moving saved activations
  autovm_rc_B    the same with recompute=True (the adapter also regenerates tensors)
where B is a budget measured in this run: soc (save_on_cpu's peak), ckpt (checkpointing's
peak), half (50 % of plain's peak), quarter (25 % of plain's peak). VGG-19 and ResNet-50 run
soc, half, ckpt; the U-Nets half, quarter, ckpt, soc; DeepLabV3 half, soc, ckpt. --recompute
picks the variants (both, no, yes). Plans are made in the run, after the baselines of the model
have measured their peaks, on a copy of the model (its own optimizer, the real batch), so
whatever plan() runs leaves the trained model untouched.

Every configuration starts from the same weights (a deepcopy of one seeded model), trains on
the same seeded batch with torch.manual_seed(step) before each step (dropout draws the same
masks), with torch.backends.cudnn.deterministic = True and benchmark = False; its losses are
compared with plain's as float.hex, bit for bit. Per-pixel cross-entropy is computed as
F.cross_entropy(out, y, reduction="none").mean(): the reduction inside nll_loss2d adds with
atomics on CUDA, which would make even two plain runs differ in the last bits. DeepLabV3 runs
with torch.use_deterministic_algorithms(True, warn_only=True) (uninitialized memory not
filled): its bilinear upsampling's CUDA backward adds with atomics, and that mode gives
interpolate a deterministic backward.

Per configuration: the median step time of --steps steps after --warmup (torch.cuda.synchronize
around each), torch.cuda.max_memory_allocated() over them, every loss; for AutoVM the budget,
whether the peak is within it, the planner's prediction (plan.prediction), the adapter's stats
and the planning time. Each configuration is isolated (everything freed, the caching
allocators emptied, the peak reset) and a failure (out of memory, a planner error) is recorded
in its row, not fatal. On a GPU each configuration also runs in a Python process of its own
(--processes one: all in this one): cuDNN keeps each convolution's algorithm for the process,
so a configuration that ran under a memory cap (plan()'s calibration, falling back to the
estimated workspaces) would otherwise hand its slow choices to the next
(docs/conv-workspaces.md). --out writes one JSON after every configuration; --csv the table.

--smoke runs every model and configuration at tiny sizes on the CPU (Debian's torch 1.13) to
test this logic: there are no peaks there, so the budgets stand between the least budget
autovm-plan can plan and its modelled plain peak (SMOKE_POSITIONS); no pinned
memory; fp32 (torch 1.13's CPU autocast runs ConvTranspose in fp32 where CUDA's runs it in
bf16, so a bf16 plan would not fit it).

  python3 tools/bench/dense_training.py --exports tools/bench/data/dense/exports --out J --csv C
  python3 tools/bench/dense_training.py --render A.json B.json --csv dense.csv
  /usr/bin/python3 tools/bench/dense_training.py --export-only --exports DIR
  /usr/bin/python3 tools/bench/dense_training.py --smoke --out /tmp/dense-smoke.json
"""
import argparse
import contextlib
import copy
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)

import pytorch_compare  # noqa: E402  (VGG/ResNet models, optimizer, checkpointed forwards)

BASELINES = ("plain", "save_on_cpu", "checkpoint")
BUDGET_LABELS = {"soc": "save_on_cpu's peak", "ckpt": "checkpointing's peak",
                 "half": "50 % of plain's peak", "quarter": "25 % of plain's peak"}
# Smoke mode's budgets, as positions between the least plannable budget (0) and the modelled
# plain peak (1): at tiny sizes the planner's convolution workspaces, not activations, set the
# least budget, so fractions of the peak would fit no plan.
SMOKE_POSITIONS = {"quarter": 0.25, "half": 0.5, "soc": 0.6, "ckpt": 0.8}


class Spec:
    """One model of the benchmark: how to build it, its input, labels and budgets."""

    def __init__(self, title, build, sample, classes, batch, budgets, dense, smoke_sample,
                 smoke_batch=2, deterministic_algorithms=False):
        self.name = None  # its key in SPECS
        self.title, self.build, self.sample, self.classes = title, build, sample, classes
        self.batch, self.budgets, self.dense = batch, budgets, dense
        self.smoke_sample, self.smoke_batch = smoke_sample, smoke_batch
        self.deterministic_algorithms = deterministic_algorithms


def _torchvision(name):
    def build(smoke):
        return pytorch_compare.build(name)
    return build


def _unet(dims, in_channels, classes, base):
    def build(smoke):
        import torch

        from dense_models import UNet
        torch.manual_seed(0)
        return UNet(in_channels, classes, base=4 if smoke else base, dims=dims).train()
    return build


def _deeplab(smoke):
    import torch
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.segmentation.deeplabv3_resnet50(
        weights=None, weights_backbone=None, num_classes=21, aux_loss=False).train()


SPECS = {
    # VGG's adaptive average pooling to 7x7 exports only from a multiple of 7: 224 in smoke too.
    "vgg19": Spec("VGG-19", _torchvision("vgg19"), (3, 224, 224), 1000, 256,
                  ("soc", "half", "ckpt"), False, (3, 224, 224)),
    "resnet50": Spec("ResNet-50", _torchvision("resnet50"), (3, 224, 224), 1000, 256,
                     ("soc", "half", "ckpt"), False, (3, 32, 32)),
    "unet2d": Spec("U-Net 2-D", _unet(2, 3, 21, 64), (3, 1024, 1024), 21, 16,
                   ("half", "quarter", "ckpt", "soc"), True, (3, 64, 64)),
    "unet3d": Spec("U-Net 3-D", _unet(3, 1, 4, 32), (1, 128, 128, 128), 4, 32,
                   ("half", "quarter", "ckpt", "soc"), True, (1, 32, 32, 32)),
    "deeplabv3": Spec("DeepLabV3-ResNet50", _deeplab, (3, 1024, 1024), 21, 16,
                      ("half", "soc", "ckpt"), True, (3, 32, 32),
                      deterministic_algorithms=True),
}


for _name, _spec in SPECS.items():
    _spec.name = _name


def config_names(spec, recompute):
    """The configurations of a model, baselines first, in the order they run."""
    names = list(BASELINES)
    for b in spec.budgets:
        if recompute in ("both", "no"):
            names.append(f"autovm_{b}")
        if recompute in ("both", "yes"):
            names.append(f"autovm_rc_{b}")
    return names


def parse_config(config):
    """(budget label, recompute) of an AutoVM configuration name; None for a baseline."""
    if not config.startswith("autovm_"):
        return None
    rest = config[len("autovm_"):]
    recompute = rest.startswith("rc_")
    label = rest[3:] if recompute else rest
    if label not in BUDGET_LABELS:
        raise ValueError(f"configuration {config}: no budget '{label}' (known: "
                         f"{', '.join(BUDGET_LABELS)})")
    return label, recompute


def budget_for(label, peaks, plain_peak):
    """Bytes of a budget label from the measured peaks; None with the reason when the peak it
    rests on is missing."""
    if label == "half":
        return (int(plain_peak * 0.5), None) if plain_peak else (None, "no plain peak")
    if label == "quarter":
        return (int(plain_peak * 0.25), None) if plain_peak else (None, "no plain peak")
    source = {"soc": "save_on_cpu", "ckpt": "checkpoint"}[label]
    if peaks.get(source):
        return int(peaks[source]), None
    return None, f"no measured {source} peak"


def pow2_ceil(n):
    return 1 << (int(n) - 1).bit_length()


def pixel_cross_entropy(out, y):
    """Per-pixel (per-voxel) cross-entropy, reduced by a mean outside nll_loss (whose own
    reduction adds with atomics on CUDA); a dict output is scored on its "out"."""
    import torch.nn.functional as F

    if isinstance(out, dict):
        out = out["out"]
    return F.cross_entropy(out, y, reduction="none").mean()


def class_cross_entropy(out, y):
    import torch.nn.functional as F

    return F.cross_entropy(out, y)


def _checkpoint(block, *inputs):
    from torch.utils import checkpoint as ckpt

    return ckpt.checkpoint(block, *inputs, use_reentrant=False)


def _has_use_reentrant():
    import inspect

    from torch.utils import checkpoint as ckpt

    return "use_reentrant" in inspect.signature(ckpt.checkpoint_sequential).parameters


def _vgg_segments(model, segments=4):
    """VGG's checkpointed forward where checkpoint_sequential has no use_reentrant (torch 1.13:
    its reentrant form leaves the first segment's weights without gradients when the input
    needs none): the same segments as checkpoint_sequential(features, 4), the last one not
    checkpointed, each through the non-reentrant checkpoint."""
    import torch

    layers = list(model.features)
    size = len(layers) // segments
    cuts = list(range(0, size * (segments - 1), size))

    def fwd(x):
        for start in cuts:
            x = _checkpoint(torch.nn.Sequential(*layers[start:start + size]), x)
        x = torch.nn.Sequential(*layers[cuts[-1] + size:])(x)
        return model.classifier(torch.flatten(model.avgpool(x), 1))
    return fwd


def forward_fn(name, model, config):
    """The forward pass of `config`: checkpointing changes how the model is called."""
    import torch.nn.functional as F

    if config != "checkpoint":
        return model
    if name == "vgg19" and not _has_use_reentrant():
        return _vgg_segments(model)
    if name in ("vgg19", "resnet50"):
        return pytorch_compare.forward_fn(name, model, config)
    if name in ("unet2d", "unet3d"):
        return lambda x: model.run(x, _checkpoint)
    # torchvision's _SimpleSegmentationModel.forward, the backbone's layers checkpointed.
    bb = model.backbone

    def fwd(x):
        size = x.shape[-2:]
        h = bb.maxpool(bb.relu(bb.bn1(bb.conv1(x))))
        for layer in (bb.layer1, bb.layer2, bb.layer3, bb.layer4):
            h = _checkpoint(layer, h)
        out = model.classifier(h)
        return {"out": F.interpolate(out, size=size, mode="bilinear", align_corners=False)}
    return fwd


def make_batch(spec, batch, sample):
    """The seeded batch (CPU): inputs [batch, *sample] and int64 labels ([batch] for
    classifiers, [batch, *sides] for dense models)."""
    import torch

    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, *sample, generator=g)
    shape = (batch, *sample[1:]) if spec.dense else (batch,)
    return x, torch.randint(0, spec.classes, shape, generator=g)


@contextlib.contextmanager
def exports_reused(ctx, tmp):
    """plan() exports the model on every call; the export of one model at one input shape is
    the same file each time (its weights stripped: the planner reads sizes only), so within
    this context each is made once and copied. With --exports DIR, DIR/MODEL.onnx is used
    when it is there (made by --export-only, on any machine), else made and written there."""
    from autovm import planner

    original = getattr(planner, "export_onnx", None)
    if original is None:
        yield
        return
    made = {}

    def export_once(model, example_batch, path, **kw):
        x = planner.example_input(example_batch)
        key = (ctx.exporting, tuple(x.shape[1:]), tuple(sorted(kw.items())))
        if key not in made:
            keep = ctx.args.exports and os.path.join(ctx.args.exports, f"{ctx.exporting}.onnx")
            if keep and os.path.exists(keep):
                made[key] = keep
            else:
                made[key] = original(model, example_batch,
                                     os.path.join(tmp, f"{len(made)}.onnx"), **kw)
                if keep:
                    os.makedirs(ctx.args.exports, exist_ok=True)
                    shutil.copyfile(made[key], keep + ".tmp")
                    os.replace(keep + ".tmp", keep)
        shutil.copyfile(made[key], path)
        return path

    planner.export_onnx = export_once
    try:
        yield
    finally:
        planner.export_onnx = original


class Context:
    """What every configuration of a run shares: the device, the options, the output."""

    def __init__(self, args):
        import torch

        self.args, self.smoke = args, args.smoke
        self.device = torch.device("cpu" if args.smoke else "cuda")
        self.cuda = self.device.type == "cuda"
        self.autocast = None if args.smoke else torch.bfloat16
        self.results = []
        self.smoke_budgets = {}
        self.exporting = None  # the model whose plans are being made (exports_reused)


def isolate(ctx):
    """Frees what the last configuration left: Python garbage, the caching allocators (device
    and pinned host), the peak statistics."""
    import torch

    gc.collect()
    if ctx.cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        host_empty = getattr(torch._C, "_host_emptyCache", None)
        if host_empty is not None:
            host_empty()
        torch.cuda.reset_peak_memory_stats()


@contextlib.contextmanager
def determinism(spec):
    """cuDNN deterministic, no benchmark; for specs that need it, deterministic algorithms
    (warn only: some backward kernels have none and stay as they are) without filling
    uninitialized memory."""
    import torch

    saved = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    algorithms = spec.deterministic_algorithms and hasattr(torch, "use_deterministic_algorithms")
    det = fill = None
    if algorithms:
        try:  # torch >= 2.1; older versions fill nothing
            import torch.utils.deterministic as det
            fill = det.fill_uninitialized_memory
            det.fill_uninitialized_memory = False
        except (ImportError, AttributeError):
            det = None
        torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved
        if algorithms:
            torch.use_deterministic_algorithms(False)
            if det is not None:
                det.fill_uninitialized_memory = fill


def train_steps(ctx, model, opt, fwd, loss_fn, x, y, wrapper):
    """--warmup + --steps training steps inside `wrapper`; (step times in s of the timed steps,
    every loss as float.hex, the peak over all steps or None on the CPU)."""
    import torch

    args = ctx.args
    amp = (torch.autocast("cuda", dtype=ctx.autocast) if ctx.autocast is not None
           else contextlib.nullcontext())
    times, losses = [], []
    if ctx.cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    with wrapper:
        for i in range(args.warmup + args.steps):
            if ctx.cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            torch.manual_seed(1000 + i)
            opt.zero_grad(set_to_none=True)
            with amp:
                loss = loss_fn(fwd(x), y)
            loss.backward()
            opt.step()
            if ctx.cuda:
                torch.cuda.synchronize()
            if i >= args.warmup:
                times.append(time.perf_counter() - t0)
            losses.append(float(loss.item()).hex())
    peak = torch.cuda.max_memory_allocated() if ctx.cuda else None
    return times, losses, peak


def make_plan(ctx, spec, master, x, y, budget, recompute):
    """autovm.plan() on a copy of the model with its own optimizer and the real batch."""
    import autovm

    args = ctx.args
    ctx.exporting = spec.name + ("-smoke" if ctx.smoke else "")
    model = copy.deepcopy(master).to(ctx.device)
    opt = pytorch_compare.make_optimizer(model)
    kw = dict(planner=args.planner, lib=args.lib, recompute=recompute, loss="cross-entropy",
              autocast="bf16" if ctx.autocast is not None else False,
              calibrate={"auto": "auto", "off": False}[args.calibrate])
    try:
        return autovm.plan(model, (x, y), opt, budget=budget, **kw)
    finally:
        del model, opt


def run_config(ctx, name, spec, config, master, data, peaks, plain, row):
    """One configuration, filling in its result row (which stays with what it has when the
    configuration fails)."""
    import torch

    import autovm

    args = ctx.args
    batch = row["batch"]
    parsed = parse_config(config)
    if config == "save_on_cpu" and ctx.cuda:
        need = peaks.get("plain", 0) * pow2_ceil(batch) / batch
        if need > args.host_limit:
            row["skipped"] = (f"save_on_cpu would pin about {need / 1e9:.1f} GB of host memory "
                              f"(plain's peak times the pinned allocator's power-of-two "
                              f"rounding of batch {batch}), over --host-limit "
                              f"{args.host_limit / 1e9:.0f} GB")
            return
    x, y = (t.to(ctx.device) for t in data)
    plan = None
    if parsed is not None:
        label, recompute = parsed
        if ctx.smoke:
            budget, why = ctx.smoke_budgets[name][label], None
        else:
            budget, why = budget_for(label, peaks, peaks.get("plain"))
        row.update(budget_label=BUDGET_LABELS[label], recompute=recompute)
        if budget is None:
            row["skipped"] = f"budget {BUDGET_LABELS[label]}: {why}"
            return
        if label in ("soc", "ckpt") and not ctx.smoke and budget >= peaks.get("plain", budget + 1):
            row["skipped"] = (f"budget {BUDGET_LABELS[label]} ({budget / 1e9:.2f} GB) is not "
                              f"below plain's peak")
            return
        if ctx.smoke:
            row["budget_source"] = ("smoke: between the least plannable budget and the "
                                    "modelled plain peak")
        row["budget_bytes"] = budget
        t0 = time.monotonic()
        try:
            plan = make_plan(ctx, spec, master, x, y, budget, recompute)
        except autovm.PlannerError as e:
            if e.exit_code != 6:
                raise
            # No activations-only plan keeps PyTorch within it (one step's working set is
            # larger, say): plan at the least budget that can, and say so.
            low = make_plan(ctx, spec, master, x, y, "min", recompute)
            least = low.budget_bytes + (low.modelled_margin_bytes or 0)
            row.update(asked_budget_bytes=budget, budget_bytes=least,
                       budget_note=(f"{budget / 1e9:.2f} GB fits no plan "
                                    f"({str(e)[:300]}); planned at the least budget, "
                                    f"{least / 1e9:.2f} GB"))
            del low
            plan = make_plan(ctx, spec, master, x, y, least, recompute)
        row.update(planning_s=time.monotonic() - t0, budget_bytes=plan.requested_budget_bytes,
                   planner_budget_bytes=plan.budget_bytes,
                   pytorch_margin_bytes=plan.pytorch_margin_bytes,
                   prediction=plan.prediction,
                   predicted_step_ms=plan.prediction.get("step_time_us", 0) / 1e3 or None,
                   planned_actions={f"{k[0]} {k[1]}": v
                                    for k, v in sorted(plan.action_counts().items())},
                   conv_workspaces_measured=len((getattr(plan, "conv_workspaces", None)
                                                 or {}).get("convolutions", [])),
                   calibration=plan.calibration)
        isolate(ctx)
    model = copy.deepcopy(master).to(ctx.device)
    opt = pytorch_compare.make_optimizer(model)
    fwd = forward_fn(name, model, config)
    loss_fn = pixel_cross_entropy if spec.dense else class_cross_entropy
    if config == "save_on_cpu":
        wrapper = torch.autograd.graph.save_on_cpu(pin_memory=ctx.cuda)
        if not ctx.cuda:
            row["note"] = "smoke: pin_memory=False (no CUDA)"
    elif plan is not None:
        wrapper = autovm.attach(model, opt, plan, unrealized="ignore")
    else:
        wrapper = contextlib.nullcontext()
    times, losses, peak = train_steps(ctx, model, opt, fwd, loss_fn, x, y, wrapper)
    row.update(step_ms=statistics.median(times) * 1e3, step_ms_all=[t * 1e3 for t in times],
               peak_bytes=peak, losses=losses,
               losses_float=[float.fromhex(v) for v in losses])
    if plan is not None:
        row["stats"] = wrapper.stats.as_dict()
        row["within_budget"] = None if peak is None else peak <= row["budget_bytes"]
    if plain is not None and "losses" in plain:
        row["bit_identical_to_plain"] = losses == plain["losses"]
    del model, opt, fwd, wrapper, plan, x, y


def smoke_budgets(ctx, spec, master, data):
    """Smoke mode's stand-ins for the budgets it cannot measure: between the least budget an
    activations-only plan can keep PyTorch within (autovm-plan's least budget plus the
    modelled margin) and the modelled plain peak, at SMOKE_POSITIONS of the way."""
    x, y = data
    free = make_plan(ctx, spec, master, x, y, None, False)
    low = make_plan(ctx, spec, master, x, y, "min", False)
    top = free.pytorch_memory["peak_allocated_bytes"]
    least = low.budget_bytes + (low.modelled_margin_bytes or 0)
    return {label: int(least + f * max(0, top - least)) for label, f in SMOKE_POSITIONS.items()}


def export_only(ctx, names):
    """--export-only: each model's export (full size, or smoke size with --smoke) into
    --exports, on the CPU."""
    import torch

    from autovm import planner

    for name in names:
        spec = SPECS[name]
        sample = spec.smoke_sample if ctx.smoke else spec.sample
        path = os.path.join(ctx.args.exports, name + ("-smoke" if ctx.smoke else "") + ".onnx")
        os.makedirs(ctx.args.exports, exist_ok=True)
        t0 = time.monotonic()
        with determinism(spec):
            planner.export_onnx(spec.build(ctx.smoke), torch.randn(2, *sample), path + ".tmp")
        os.replace(path + ".tmp", path)
        print(f"{name}: {path} ({time.monotonic() - t0:.0f} s)", flush=True)
    return 0


def run_model(ctx, name, configs):
    import torch

    spec = SPECS[name]
    args = ctx.args
    batch = spec.smoke_batch if ctx.smoke else args.batch.get(name, spec.batch)
    sample = spec.smoke_sample if ctx.smoke else spec.sample
    master = spec.build(ctx.smoke)
    data = make_batch(spec, batch, sample)
    peaks, plain = {}, None
    for r in args.baseline_rows:
        if r.get("model") == name and r.get("config") in BASELINES:
            if r.get("peak_bytes"):
                peaks[r["config"]] = r["peak_bytes"]
            if r["config"] == "plain" and "losses" in r:
                plain = r
    with determinism(spec):
        if ctx.smoke:
            ctx.smoke_budgets[name] = smoke_budgets(ctx, spec, master, data)
        for config in configs:
            isolate(ctx)
            t0 = time.monotonic()
            row = {"model": name, "title": spec.title, "config": config, "batch": batch,
                   "sample": list(sample)}
            try:
                run_config(ctx, name, spec, config, master, data, peaks, plain, row)
            except Exception as e:  # one configuration failing (OOM, planner) keeps the rest
                row["error"] = f"{type(e).__name__}: {str(e)[:2000]}"
                row["out_of_memory"] = isinstance(e, torch.cuda.OutOfMemoryError)
            row["wall_s"] = time.monotonic() - t0
            if config in BASELINES and row.get("peak_bytes") and not ctx.smoke:
                peaks[config] = row["peak_bytes"]
            if config == "plain" and "losses" in row:
                plain = row
            ctx.results.append(row)
            print(summary(row), flush=True)
            write_json(ctx)
    isolate(ctx)


def run_in_own_process(ctx, name, config, tmp):
    """One configuration in a fresh Python process running this script, its baselines the
    --baseline rows and this run's so far; its row joins ctx.results."""
    args = ctx.args
    baseline = os.path.join(tmp, "baseline.json")
    out = os.path.join(tmp, "one.json")
    with open(baseline, "w") as f:
        json.dump({"results": args.baseline_rows + ctx.results}, f)
    cmd = [sys.executable, os.path.abspath(__file__), "--models", name, "--configs", config,
           "--recompute", "both", "--processes", "one", "--baseline", baseline, "--out", out,
           "--warmup", str(args.warmup), "--steps", str(args.steps),
           "--host-limit", repr(args.host_limit), "--calibrate", args.calibrate]
    cmd += ["--batch", ",".join(f"{k}={v}" for k, v in args.batch.items())] if args.batch else []
    cmd += ["--smoke"] if args.smoke else []
    for flag, value in (("--planner", args.planner), ("--lib", args.lib),
                        ("--exports", args.exports)):
        if value:
            cmd += [flag, value]
    with contextlib.suppress(FileNotFoundError):
        os.remove(out)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rows = []
    if os.path.exists(out):
        with open(out) as f:
            rows = json.load(f)["results"]
    if not rows:
        rows = [{"model": name, "title": SPECS[name].title, "config": config,
                 "error": f"its process exited {r.returncode}: {r.stdout[-1500:]}"}]
    for row in rows:
        ctx.results.append(row)
        print(summary(row), flush=True)
    write_json(ctx)


def meta(ctx):
    import torch

    m = {"script": "tools/bench/dense_training.py",
         "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
         "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "host": platform.node(),
         "python": platform.python_version(), "torch": torch.__version__,
         "warmup": ctx.args.warmup, "steps": ctx.args.steps, "smoke": ctx.smoke,
         "autocast": "bf16" if ctx.autocast is not None else None,
         "cudnn_deterministic": True, "cudnn_benchmark": False,
         "calibrate": ctx.args.calibrate,
         "planner": ctx.args.planner, "lib": ctx.args.lib}
    if ctx.cuda:
        m["device"] = torch.cuda.get_device_name(0)
        m["device_memory_bytes"] = torch.cuda.get_device_properties(0).total_memory
        m["cuda"] = torch.version.cuda
    return m


def write_json(ctx):
    if not ctx.args.out:
        return
    tmp = ctx.args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"meta": meta(ctx), "results": ctx.results}, f, indent=1)
        f.write("\n")
    os.replace(tmp, ctx.args.out)


def summary(r):
    head = f"{r['model']:9} {r['config']:16}"
    if "error" in r:
        return f"{head} ERROR {r['error'][:400]}"
    if "skipped" in r:
        return f"{head} skipped: {r['skipped']}"
    text = f"{head} {r['step_ms']:9.1f} ms"
    if "asked_budget_bytes" in r:
        text += f"  (asked {r['asked_budget_bytes'] / 1e9:.2f} GB: fits no plan)"
    if r.get("peak_bytes") is not None:
        text += f"  peak {r['peak_bytes'] / 1e9:6.2f} GB"
    if "budget_bytes" in r:
        text += f"  budget {r['budget_bytes'] / 1e9:6.2f} GB"
        if r.get("within_budget") is not None:
            text += " (within)" if r["within_budget"] else " (OVER)"
        if r.get("predicted_step_ms"):
            text += f"  predicted {r['predicted_step_ms']:.1f} ms"
        text += f"  planned in {r['planning_s']:.0f} s"
    if "bit_identical_to_plain" in r:
        text += "  losses " + ("bit-identical" if r["bit_identical_to_plain"] else "DIFFER")
    return text


CONFIG_TITLES = {"plain": "plain PyTorch", "save_on_cpu": "save_on_cpu(pin_memory=True)",
                 "checkpoint": "checkpointing"}


def config_title(row):
    parsed = parse_config(row["config"])
    if parsed is None:
        return CONFIG_TITLES[row["config"]]
    label, recompute = parsed
    how = f"AutoVM {'recomputing' if recompute else 'moving'}"
    if "asked_budget_bytes" in row:
        return (f"{how}, at the least budget it can plan ({BUDGET_LABELS[label]}, "
                f"{row['asked_budget_bytes'] / 1e9:.2f} GB, fits no plan)")
    return f"{how}, at {BUDGET_LABELS[label]}"


def csv_rows(results):
    """The table for BENCHMARKS.md: one row per result, speed-ups as the baseline's step time
    over this one's."""
    header = ["model", "config", "budget GB", "step ms", "peak GB", "peak within budget",
              "speed-up vs save_on_cpu", "speed-up vs checkpointing",
              "losses bit-identical to plain"]
    base = {(r["model"], r["config"]): r.get("step_ms") for r in results
            if r["config"] in BASELINES}
    rows = [header]
    for r in results:
        model = f"{r['title']} b{r['batch']} " + "x".join(map(str, r.get("sample", [])[1:]))
        row = [model, config_title(r)]
        budget = f"{r['budget_bytes'] / 1e9:.2f}" if r.get("budget_bytes") else "-"
        if "error" in r or "skipped" in r:
            error = r.get("error", "")
            what = ("refused before training: the budget cannot be promised"
                    if error.startswith("PlannerError") and "cannot be promised" in error else
                    "out of memory" if r.get("out_of_memory") else
                    f"failed: {error[:120]}" if error else f"skipped: {r['skipped']}")
            rows.append(row + [budget, what, "-", "-", "-", "-", "-"])
            continue

        def speedup(config):
            b = base.get((r["model"], config))
            return f"{b / r['step_ms']:.2f}x" if b and r["config"] != config else "-"

        within = r.get("within_budget")
        same = r.get("bit_identical_to_plain")
        rows.append(row + [budget, f"{r['step_ms']:.1f}",
                           f"{r['peak_bytes'] / 1e9:.2f}" if r.get("peak_bytes") else "-",
                           "-" if within is None else ("yes" if within else "NO"),
                           speedup("save_on_cpu"), speedup("checkpoint"),
                           "-" if same is None else ("yes" if same else "NO")])
    return rows


def write_csv(path, results):
    import csv

    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        csv.writer(f).writerows(csv_rows(results))
    os.replace(tmp, path)


def parse_batches(text):
    out = {}
    for item in filter(None, (text or "").split(",")):
        name, _, n = item.partition("=")
        if name not in SPECS or not n.isdigit() or int(n) < 1:
            raise ValueError(f"--batch: MODEL=N with MODEL one of {', '.join(SPECS)}, not "
                             f"'{item}'")
        out[name] = int(n)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__[__doc__.index("  python3 tools"):])
    ap.add_argument("--out", metavar="JSON", help="the results (written after every config)")
    ap.add_argument("--csv", metavar="CSV", help="the table for BENCHMARKS.md")
    ap.add_argument("--models", default=",".join(SPECS))
    ap.add_argument("--configs", help="configurations to run (default: all of each model); "
                    "the AutoVM ones need their budgets' baselines in this run or --baseline")
    ap.add_argument("--recompute", choices=("both", "no", "yes"), default="both",
                    help="AutoVM variants: moving only (no), recomputing (yes) or both")
    ap.add_argument("--processes", choices=("each", "one"),
                    help="each: every configuration in a Python process of its own (the "
                         "default on a GPU: cuDNN's algorithm choices then do not carry "
                         "over); one: all in this process (the default with --smoke)")
    ap.add_argument("--calibrate", choices=("auto", "off"), default="auto",
                    help="autovm.plan()'s calibration: its default (auto), or off (the "
                         "modelled margin alone)")
    ap.add_argument("--baseline", metavar="JSON", help="an earlier --out of this script: its "
                    "plain, save_on_cpu and checkpoint rows give the peaks and losses")
    ap.add_argument("--batch", default="", metavar="MODEL=N,...", help="override batches")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--host-limit", type=float, default=90e9, metavar="BYTES",
                    help="most pinned host memory save_on_cpu may need (default 90e9)")
    ap.add_argument("--planner", default=os.environ.get("AUTOVM_PLAN"),
                    help="autovm-plan (default: $AUTOVM_PLAN, else autovm's search)")
    ap.add_argument("--lib", default=os.environ.get("AUTOVM_LIB"),
                    help="libautovm (default: $AUTOVM_LIB, else autovm's search)")
    ap.add_argument("--render", nargs="+", metavar="JSON",
                    help="write --csv (and print the table) from earlier --out files, in order, "
                         "and exit")
    ap.add_argument("--exports", metavar="DIR",
                    help="reuse the models' exports in DIR (MODEL.onnx), writing those missing")
    ap.add_argument("--export-only", action="store_true",
                    help="export each model into --exports (CPU, no GPU needed) and exit")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny sizes on the CPU, to test the logic (no peaks, fp32)")
    args = ap.parse_args()
    try:
        args.batch = parse_batches(args.batch)
    except ValueError as e:
        ap.error(str(e))
    if args.render:
        results = []
        for path in args.render:
            with open(path) as f:
                results += json.load(f)["results"]
        if args.csv:
            write_csv(args.csv, results)
        for row in csv_rows(results):
            print(" | ".join(row))
        return 0
    names = [n for n in args.models.split(",") if n]
    for n in names:
        if n not in SPECS:
            ap.error(f"--models: {n} is not a model of this benchmark ({', '.join(SPECS)})")
    wanted = [c for c in (args.configs or "").split(",") if c]
    for c in wanted:
        if c not in BASELINES:
            try:
                parse_config(c)
            except ValueError as e:
                ap.error(f"--configs: {e}")
            if not c.startswith("autovm_"):
                ap.error(f"--configs: {c} is not a configuration")
    args.baseline_rows = []
    if args.baseline:
        with open(args.baseline) as f:
            args.baseline_rows = json.load(f)["results"]
    import torch

    if args.export_only and not args.exports:
        ap.error("--export-only needs --exports DIR")
    if args.smoke:
        args.warmup, args.steps = 1, 2
    elif not torch.cuda.is_available() and not args.export_only:
        print("dense_training.py measures on a CUDA GPU; there is none here (--smoke runs "
              "the logic on the CPU)", file=sys.stderr)
        return 77
    ctx = Context(args)
    if args.export_only:
        return export_only(ctx, names)
    with tempfile.TemporaryDirectory(prefix="dense-") as tmp, exports_reused(ctx, tmp):
        for name in names:
            configs = config_names(SPECS[name], args.recompute)
            if wanted:
                configs = [c for c in configs if c in wanted]
            if (args.processes or ("one" if args.smoke else "each")) == "one" or len(configs) < 2:
                run_model(ctx, name, configs)
            else:
                for config in configs:
                    run_in_own_process(ctx, name, config, tmp)
    write_json(ctx)
    if args.csv:
        write_csv(args.csv, ctx.results)
    for row in csv_rows(ctx.results):
        print(" | ".join(row))
    failed = [r for r in ctx.results
              if "error" in r or r.get("bit_identical_to_plain") is False
              or r.get("within_budget") is False]
    if args.smoke:  # a logic test: the plans must have made the adapter move or recompute
        acted = [r for r in ctx.results
                 if r.get("stats", {}).get("evictions") or r.get("stats", {}).get("recomputes")]
        if any(r["config"].startswith("autovm_") for r in ctx.results) and not acted:
            print("smoke: no AutoVM configuration evicted or recomputed anything",
                  file=sys.stderr)
            return 1
        unchecked = [r["config"] for r in ctx.results if r["config"] != "plain"
                     and "skipped" not in r and "bit_identical_to_plain" not in r]
        if any(r["config"] == "plain" for r in ctx.results) and unchecked:
            print(f"smoke: not compared with plain: {', '.join(unchecked)}", file=sys.stderr)
            return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
