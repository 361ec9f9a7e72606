#!/usr/bin/env python3
"""Dense-prediction models exported for training, planned end to end: Debian torchvision's
segmentation models (fcn_resnet50, deeplabv3_resnet50, lraspp_mobilenet_v3_large, their dict
of out and aux exported as two outputs) and two small U-Nets written here, 2-D and 3-D, that
use the ops of dense prediction (ConvTranspose, 3-D conv, pooling and batch norm, GroupNorm,
InstanceNorm, dilated and grouped convolutions, bilinear and trilinear upsampling, LeakyReLU,
ELU, Tanh, Dropout). Each is planned with per-pixel cross-entropy at half its unconstrained
peak, and the U-Net also with --loss mse and --loss external, and under --autocast.

usage: test_dense_exports.py AUTOVM_PLAN
"""
import json
import os
import subprocess
import sys
import tempfile

PLAN = sys.argv[1]
results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print(f"{'PASS' if ok else 'FAIL'} {name}" + ("" if ok else f" {detail}"))


try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torchvision  # noqa: F401
except ImportError:
    print("python3-torch or python3-torchvision missing: skipped")
    sys.exit(77)


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from adapter_models import DenseOps as UNet2d  # noqa: E402  (the 2-D U-Net of the adapter test)
from adapter_models import conv_block as block  # noqa: E402


class UNet3d(nn.Module):
    """One level down and up in 3-D: Conv3d, BatchNorm3d, MaxPool3d, ConvTranspose3d, GroupNorm,
    trilinear upsampling."""

    def __init__(self, c=4, classes=2):
        super().__init__()
        self.enc = nn.Sequential(block(nn.Conv3d, nn.BatchNorm3d, nn.ReLU, 1, c),
                                 block(nn.Conv3d, nn.BatchNorm3d, nn.ReLU, c, c))
        self.mid = block(nn.Conv3d, lambda n: nn.GroupNorm(2, n), nn.LeakyReLU, c, 2 * c)
        self.up = nn.ConvTranspose3d(2 * c, c, 2, stride=2)
        self.dec = nn.Sequential(block(nn.Conv3d, nn.BatchNorm3d, nn.ReLU, 2 * c, c),
                                 block(nn.Conv3d, nn.BatchNorm3d, nn.ReLU, c, c))
        self.head = nn.Conv3d(c, classes, 1)
        self.aux = nn.Conv3d(2 * c, classes, 1)

    def forward(self, x):
        e = self.enc(x)
        m = self.mid(F.max_pool3d(e, 2))
        d = self.dec(torch.cat([self.up(m), e], 1))
        aux = F.interpolate(self.aux(m), scale_factor=2, mode="trilinear", align_corners=False)
        return self.head(d), aux


class OutAux(nn.Module):
    """torchvision segmentation's dict {'out', 'aux'} as two outputs."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        d = self.model(x)
        return (d["out"], d["aux"]) if "aux" in d else d["out"]


def export(model, shape, path, outputs):
    torch.manual_seed(0)
    x = torch.randn(*shape)
    axes = {"input": {0: "batch"}}
    axes.update({o: {0: "batch"} for o in outputs})
    torch.onnx.export(model.train(), x, path, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, opset_version=17, input_names=["input"],
                      output_names=outputs, dynamic_axes=axes)


def plan(path, *extra):
    out = path + ".plan.json"
    r = subprocess.run([PLAN, path, "--batch", "2", "-o", out, "--quiet", *extra], capture_output=True, text=True)
    return r, (json.load(open(out)) if r.returncode == 0 else None)


def check_planned(name, path, outputs, *extra):
    """Plans unconstrained, then at half the peak; checks the loss terms and the budget."""
    r, free = plan(path, *extra)
    check(f"{name} plans", r.returncode == 0, r.stderr[-400:])
    if not free:
        return None
    peak = free["statistics"]["peak_bytes"]
    r, half = plan(path, "--budget", f"{peak // 2}B", *extra)
    check(f"{name} plans at half its peak ({peak // 2} B)", r.returncode == 0, r.stderr[-400:])
    if half:
        pred = half["statistics"]["prediction"]
        check(f"{name}: the half-peak plan fits: its resident peak is within the budget",
              half["statistics"]["fits_budget"] and pred["resident_peak_bytes"] <= peak // 2
              and pred["bytes_to_host"] > 0, json.dumps(pred)[:300])
    losses = [s for s in free["steps"] if s["phase"] == "loss"]
    check(f"{name}: {outputs} loss terms", len(losses) == outputs, [s["op"] for s in losses])
    return free


with tempfile.TemporaryDirectory() as tmp:
    import torchvision.models.segmentation as seg

    for builder, kwargs in ((seg.fcn_resnet50, {"aux_loss": True}), (seg.deeplabv3_resnet50, {"aux_loss": True}),
                            (seg.lraspp_mobilenet_v3_large, {})):
        name = builder.__name__
        torch.manual_seed(0)
        model = OutAux(builder(weights=None, weights_backbone=None, num_classes=5, **kwargs))
        path = os.path.join(tmp, name + ".onnx")
        outputs = ["out", "aux"] if kwargs else ["out"]
        export(model, (2, 3, 64, 64), path, outputs)
        p = check_planned(name, path, len(outputs))
        if p:
            labels = [t for t in p["tensors"] if t["kind"] == "label"]
            check(f"{name}: per-pixel labels [2, 64, 64]", len(labels) == 1 and labels[0]["shape"] == [2, 64, 64],
                  labels)
        r, _ = plan(path, "--memory-model", "pytorch")
        check(f"{name}: the PyTorch memory model runs", r.returncode == 0, r.stderr[-300:])

    path = os.path.join(tmp, "unet2d.onnx")
    export(UNet2d(), (2, 3, 32, 32), path, ["scores"])
    # At this toy size one convolution's assumed workspace would be most of the peak.
    small_ws = ("--workspace-limit", "16KiB")
    p = check_planned("unet2d", path, 1, *small_ws)
    if p:
        ops = {s["op"] for s in p["steps"]}
        for op in ("ConvTranspose", "InstanceNormalization", "LeakyRelu", "Elu", "Tanh", "Resize", "Dropout"):
            check(f"unet2d runs {op}", op in ops, sorted(ops))
    for loss, op in (("mse", "MeanSquaredErrorLoss"), ("external", "ExternalLoss")):
        r, q = plan(path, "--loss", loss)
        check(f"unet2d --loss {loss}", r.returncode == 0 and q["options"].get("loss") == loss
              and any(s["op"] == op for s in q["steps"]), r.stderr[-300:])

    for dtype, name in (("bf16", "bfloat16"), ("fp16", "float16")):
        r, q = plan(path, "--autocast", dtype, "--budget", f"{p['statistics']['peak_bytes'] // 3}B" if p else "1GB",
                    *small_ws)
        ok = r.returncode == 0 and q["options"].get("autocast") == dtype
        if ok:
            tensors = {t["id"]: t for t in q["tensors"]}
            up = next(s for s in q["steps"] if s["op"] == "ConvTranspose")
            ok = all(tensors[t]["dtype"] == name for t in up["inputs"] + up["outputs"]) and \
                any(s["op"] == "Cast" for s in q["steps"]) and \
                (dtype == "bf16" or any(s["op"] == "GradScalerUnscale" for s in q["steps"]))
        check(f"unet2d --autocast {dtype} at a third of the fp32 peak: the up-convolution runs in {name}", ok,
              r.stderr[-300:])

    path = os.path.join(tmp, "unet3d.onnx")
    export(UNet3d(), (2, 1, 8, 8, 8), path, ["out", "aux"])
    p = check_planned("unet3d", path, 2, *small_ws)
    if p:
        labels = [t for t in p["tensors"] if t["kind"] == "label"]
        check("unet3d: per-voxel labels [2, 8, 8, 8]", len(labels) == 1 and labels[0]["shape"] == [2, 8, 8, 8], labels)
        check("unet3d runs ConvTranspose in 3-D", any(s["op"] == "ConvTranspose" for s in p["steps"]))
    r, _ = plan(path, "--memory-model", "pytorch", "--loss", "external")
    check("unet3d: the PyTorch memory model with an external loss", r.returncode == 0, r.stderr[-300:])

failed = results.count(False)
print(f"{len(results) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
