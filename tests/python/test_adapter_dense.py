#!/usr/bin/python3
"""The PyTorch adapter (python/autovm) on dense prediction, on the CPU: a small 2-D U-Net
(convolution, batch norm, ReLU, max pooling, transposed convolution, skip connections by
concatenation, per-pixel cross-entropy against integer labels [N, H, W]) and a GroupNorm network
trained 3 steps under plans that evict (and that recompute), bit-identical to plain training
(losses, weights, batch norm statistics); a dict output {'out', 'aux'}; the mean squared error
and an external (Dice) loss; bf16 autocast on the CPU, bit-identical to autocast training
without a plan; and the errors: autocast other than the plan's, an op that CPU autocast runs in
another dtype than the plan's, plan tensors the adapter cannot find, bad arguments.

usage: test_adapter_dense.py AUTOVM_PLAN LIBAUTOVM
Prints one line per case and 'N passed, M failed'; exits 1 if any failed.
"""
import copy
import json
import os
import sys
import tempfile
import warnings

PLAN_EXE, LIB = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
os.environ["AUTOVM_PLAN"], os.environ["AUTOVM_LIB"] = PLAN_EXE, LIB
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "python")]

import torch  # noqa: E402
import torchvision  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import autovm  # noqa: E402
from cases import case, finish, raises  # noqa: E402
from adapter_models import (DenseOps, GroupNormNet, UNet, UNet3d, compare,  # noqa: E402
                            dice_loss, momentum, pixel_batch, pixel_cross_entropy, train_with, twins)

torch.set_num_threads(min(4, os.cpu_count() or 1))
warnings.filterwarnings("ignore", category=UserWarning)  # the exporter's and autocast's notes
tmp = tempfile.mkdtemp(prefix="autovm-adapter-dense-")
SMALL_WS = ("--workspace-limit", "4KB")  # tiny convolutions: activations dominate
BF16 = torch.bfloat16


# A device whose link is 5,000 times slower than the H200's: recomputing beats moving, so
# plans of these small models regenerate tensors.
SLOW_LINK = os.path.join(tmp, "slow-link.json")
with open(os.path.join(HERE, "..", "..", "profiles", "h200-pcie.json")) as f:
    _profile = json.load(f)
_profile["name"] = "slow-link-test"
for _m in _profile["mechanisms"]:
    for _d in ("to_device", "to_host"):
        _m[_d]["bandwidth_gbps"] = 0.01
with open(SLOW_LINK, "w") as f:
    json.dump(_profile, f)


def plan_evicting(model, x, fraction=0.3, **kw):
    """A plan under a budget that forces evictions and that a plan moving activations only
    meets: the smallest feasible planner budget plus `fraction` of the way to the graph's peak,
    plus PyTorch's modelled margin. Recomputing, on the slow link."""
    kw.setdefault("extra_args", SMALL_WS)
    if kw.get("recompute"):
        kw.setdefault("device", SLOW_LINK)
    opt = momentum(model)
    free = autovm.plan(model, x, opt, **kw)
    low = autovm.plan(model, x, opt, budget="min", **kw)
    budget = int(low.budget_bytes + fraction * (free.peak_bytes - low.budget_bytes))
    return autovm.plan(model, x, opt, budget=budget + free.modelled_margin_bytes, **kw)


def identical(model, x, target, loss_fn, plan, name, autocast=None, recomputing=False,
              missed_ok=False):
    """Trains twins of model 3 steps, plainly and under the plan; '' when losses, weights and
    buffers are bit-identical and the plan's evictions (and recomputes) really happened, each
    on a tensor PyTorch saved (unless missed_ok: GroupNorm's plan has the normalized tensor of
    its InstanceNormalization pattern, which PyTorch's one group-norm kernel does not save)."""
    a, oa, b, ob = twins(model, momentum)
    la = train_with(a, oa, x, target, loss_fn, autocast=autocast)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with autovm.attach(b, ob, plan) as run:
            lb = train_with(b, ob, x, target, loss_fn, autocast=autocast)
    st = run.stats
    diff = compare(a, la, b, lb)
    if diff:
        return f"{name}: not bit-identical: {diff}"
    if st.training_steps != 3:
        return f"{name}: {st.training_steps} training steps seen"
    if recomputing:
        if st.discards == 0 or st.recomputes == 0:
            return f"{name}: the plan's recomputation did not happen: {st}"
    elif st.evictions == 0 or st.bytes_to_host == 0:
        return f"{name}: the plan's evictions did not happen: {st}"
    # Batch norm's saved statistics beside a recomputed output stay on the GPU (run.kept,
    # listed as unrealized discards); anything else unrealized here is
    # a plan tensor the adapter could not find.
    kept = {plan.tensors[t]["name"] for t in run.kept}
    lost = [u for u in run.unrealized if u[2] not in kept]
    if (st.missed_evictions or st.missed_discards or lost) and not missed_ok:
        return f"{name}: planned actions found no saved tensor: {st}, {lost}"
    if st.bytes_to_device != st.bytes_to_host or st.late_prefetches:
        return f"{name}: every eviction should come back ahead of its use: {st}"
    print(f"  {name}: losses {[v.item() for v in la]}, {st}")
    return ""


torch.manual_seed(0)
unet = UNet().train()
x16, y16 = pixel_batch(2, 16, 3)
unet_plan = plan_evicting(unet, x16)


@case("plan(): a U-Net with per-pixel labels [N, H, W], ConvTranspose and concatenation")
def _():
    p = unet_plan
    ops = {s["op"] for s in p.steps}
    labels = [t for t in p.tensors if t["kind"] == "label"]
    if not {"ConvTranspose", "Concat", "MaxPool"} <= ops:
        return f"ops {sorted(ops)}"
    if len(labels) != 1 or p.shapes.get(labels[0]["id"]) != (2, 16, 16):
        return f"labels {labels}"
    if not any(a["kind"] == "evict" for a in p.actions):
        return f"the budget should force evictions: {p.action_counts()}"
    return ""


@case("attach(): U-Net, per-pixel cross-entropy, 3 steps bit-identical, evictions made")
def _():
    return identical(unet, x16, y16, F.cross_entropy, unet_plan, "unet")


@case("attach(): U-Net recomputing (recompute=True), bit-identical, recomputes made")
def _():
    p = plan_evicting(unet, x16, 0.1, recompute=True)
    if not any(a["kind"] == "recompute" for a in p.actions):
        return f"the plan recomputes nothing: {p.action_counts()}"
    return identical(unet, x16, y16, F.cross_entropy, p, "unet recomputing", recomputing=True)


@case("attach(): 3-D U-Net (Conv3d, BatchNorm3d, MaxPool3d, ConvTranspose3d), per-voxel labels, "
      "evicting and recomputing, bit-identical")
def _():
    torch.manual_seed(0)
    model = UNet3d().train()
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(2, 1, 8, 8, 8, generator=g), torch.randint(0, 2, (2, 8, 8, 8), generator=g)
    p = plan_evicting(model, x)
    labels = [t for t in p.tensors if t["kind"] == "label"]
    if len(labels) != 1 or p.shapes.get(labels[0]["id"]) != (2, 8, 8, 8):
        return f"labels {labels}"
    why = identical(model, x, y, F.cross_entropy, p, "unet3d")
    if why:
        return why
    p = plan_evicting(model, x, 0.0, recompute=True)
    ops = sorted({p.steps[a["source_step"]]["op"] for a in p.actions if a["kind"] == "recompute"})
    print(f"  unet3d recomputes with {ops}")
    if "MaxPool" not in ops:
        return f"the plan should replay the 3-D max pooling: {ops}"
    return identical(model, x, y, F.cross_entropy, p, "unet3d recomputing", recomputing=True)


torch.manual_seed(0)
gnet = GroupNormNet().train()
x8, y8 = pixel_batch(2, 8, 3)


@case("attach(): GroupNorm network, 3 steps bit-identical, evictions made")
def _():
    p = plan_evicting(gnet, x8)
    if "InstanceNormalization" not in {s["op"] for s in p.steps}:
        return "GroupNorm should export as the InstanceNormalization pattern"
    return identical(gnet, x8, y8, F.cross_entropy, p, "groupnorm", missed_ok=True)


@case("attach(): GroupNorm network recomputing, bit-identical, recomputes made")
def _():
    p = plan_evicting(gnet, x8, 0.0, recompute=True)
    return identical(gnet, x8, y8, F.cross_entropy, p, "groupnorm recomputing", recomputing=True,
                     missed_ok=True)


@case("attach(): GroupNorm, InstanceNorm, dilated and grouped convolutions, LeakyReLU, ELU, "
      "Tanh, bilinear upsampling, dropout: bit-identical, evictions made")
def _():
    torch.manual_seed(0)
    model = DenseOps().train()
    p = plan_evicting(model, x16, extra_args=("--workspace-limit", "16KiB"))
    ops = {s["op"] for s in p.steps}
    want = {"ConvTranspose", "InstanceNormalization", "LeakyRelu", "Elu", "Tanh", "Resize",
            "Dropout"}
    if not want <= ops:
        return f"ops missing from the plan: {sorted(want - ops)}"
    return identical(model, x16, y16, F.cross_entropy, p, "dense ops", missed_ok=True)


@case("plan()/attach(): a dict {'out', 'aux'}: two outputs, two loss terms, bit-identical")
def _():
    torch.manual_seed(0)
    model = UNet(aux=True).train()
    p = plan_evicting(model, x16)
    losses = [s for s in p.steps if s["phase"] == "loss"]
    outs = {p.tensors[t]["name"] for s in losses for t in s["inputs"]}
    if len(losses) != 2 or not {"out", "aux"} <= outs:
        return f"loss steps {[(s['op'], sorted(outs)) for s in losses]}"
    return identical(model, x16, y16, pixel_cross_entropy, p, "unet out/aux")


@case("attach(): torchvision lraspp_mobilenet_v3_large (a dict {'out'}), bit-identical")
def _():
    import torchvision.models.segmentation as seg

    torch.manual_seed(0)
    model = seg.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None,
                                          num_classes=3).train()
    x, y = pixel_batch(2, 64, 3)
    p = plan_evicting(model, x, extra_args=())
    # The stem's batch norm output is overwritten by an in-place Hardswish, whose backward
    # reads the result: the plan's eviction of the batch norm output finds no tensor saved
    # under that identity (missed_ok), which changes memory, never numerics.
    return identical(model, x, y, pixel_cross_entropy, p, "lraspp", missed_ok=True)


@case("attach(): loss='mse', bit-identical, evictions made")
def _():
    p = plan_evicting(unet, x16, loss="mse")
    if p.options.get("loss") != "mse" or not any(s["op"] == "MeanSquaredErrorLoss"
                                                  for s in p.steps):
        return f"options {p.options}"
    target = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(3))
    return identical(unet, x16, target, F.mse_loss, p, "unet mse")


@case("attach(): loss='external' (a Dice loss computed by the script), bit-identical")
def _():
    p = plan_evicting(unet, x16, loss="external")
    if p.options.get("loss") != "external" or any(t["kind"] == "label" for t in p.tensors):
        return f"options {p.options}"
    return identical(unet, x16, y16, dice_loss, p, "unet dice")


torch.manual_seed(0)
unet_near = UNet(up="nearest").train()


@case("attach(): bf16 CPU autocast, bit-identical to autocast training, evictions made")
def _():
    p = plan_evicting(unet_near, x16, autocast="bf16")
    if p.options.get("autocast") != "bf16":
        return f"options {p.options}"
    casts = [t for t in p.tensors if t["name"].endswith("/autocast_bf16")]
    if not casts or not any(p.tensors[a["tensor"]]["dtype"] == "bfloat16"
                            for a in p.actions if a["kind"] == "evict"):
        return "the plan should hold cast copies and evict bf16 activations"
    return identical(unet_near, x16, y16, F.cross_entropy, p, "unet bf16", autocast=BF16)


@case("attach(): bf16 CPU autocast recomputing, bit-identical, recomputes made")
def _():
    # bf16 batch norm outputs, ReLU outputs and max pooling (output and indices) replayed.
    p = plan_evicting(unet_near, x16, 0.0, autocast="bf16", recompute=True)
    ops = {p.steps[a["source_step"]]["op"] for a in p.actions if a["kind"] == "recompute"}
    if not {"BatchNormalization", "MaxPool"} <= ops:
        return f"the plan should replay batch norm and max pooling: {sorted(ops)}"
    return identical(unet_near, x16, y16, F.cross_entropy, p, "unet bf16 recomputing",
                     autocast=BF16, recomputing=True)


@case("attach(): bf16 CPU autocast recomputing convolutions from the weights' cast copies")
def _():
    # A replayed convolution reads its weight's bf16 cast copy in the plan; the replay casts the
    # module's weight again under the plan's autocast. ResNet-18's least budget regenerates
    # convolutions.
    torch.manual_seed(3)
    r18 = torchvision.models.resnet18(num_classes=5).train()
    xr = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(4))
    yr = torch.randint(0, 5, (2,), generator=torch.Generator().manual_seed(5))
    p = plan_evicting(r18, xr, 0.0, autocast="bf16", recompute=["Conv"])
    casts = {t["id"] for t in p.tensors if t["name"].endswith("/autocast_bf16")}
    reads = [a for a in p.actions if a["kind"] == "recompute"
             and casts & set(p.steps[a["source_step"]]["inputs"])]
    if not reads:
        return "no recomputed convolution reads a weight's cast copy: the case tests nothing"
    return identical(r18, xr, yr, F.cross_entropy, p, "resnet18 bf16 recomputing convs",
                     autocast=BF16, recomputing=True)


@case("plan(autocast=None) inside torch.autocast plans for its dtype")
def _():
    with torch.autocast("cpu", dtype=BF16):
        p = autovm.plan(unet_near, x16, momentum(unet_near), extra_args=SMALL_WS)
    return "" if p.options.get("autocast") == "bf16" else f"options {p.options}"


@case("attach(): a forward under another autocast than the plan's is refused")
def _():
    m = copy.deepcopy(unet_near)
    bf16_plan = autovm.plan(m, x16, momentum(m), autocast="bf16", extra_args=SMALL_WS)
    fp32_plan = autovm.plan(m, x16, momentum(m), extra_args=SMALL_WS)
    opt = momentum(m)

    def run(plan, dtype):
        with autovm.attach(m, opt, plan):
            train_with(m, opt, x16, y16, F.cross_entropy, steps=1, autocast=dtype)
    return (raises(autovm.PlanFitError, lambda: run(bf16_plan, None), "without torch.autocast",
                   "autocast bf16")
            or raises(autovm.PlanFitError, lambda: run(fp32_plan, BF16), "torch.autocast('cpu'",
                      "fp32 training", "autocast='bf16'"))


@case("attach(): an op autocast runs in another dtype than the plan's is a clear PlanFitError")
def _():
    # torch 1.13's CPU autocast runs ConvTranspose in float32; the plan has CUDA's lists (bf16).
    m = copy.deepcopy(unet)
    p = autovm.plan(m, x16, momentum(m), autocast="bf16", extra_args=SMALL_WS)
    opt = momentum(m)

    def run():
        with autovm.attach(m, opt, p):
            train_with(m, opt, x16, y16, F.cross_entropy, steps=1, autocast=BF16)
    return raises(autovm.PlanFitError, run, "module 'up'", "float32", "bfloat16",
                  "CUDA autocast's op lists")


@case("attach(): plan tensors the adapter cannot find: unrealized='error' names them")
def _():
    p = autovm.load_plan(unet_plan.path)
    log_prob = next(t for t in p.tensors if t["name"] == "loss/log_prob")
    last_fwd = max(s["id"] for s in p.steps if s["phase"] == "forward")
    p.actions = list(p.actions) + [{"kind": "evict", "tensor": log_prob["id"],
                                    "after_step": last_fwd + 1, "ready_before_step": last_fwd + 3,
                                    "bytes": log_prob["bytes"]}]
    m = copy.deepcopy(unet)
    why = raises(autovm.PlanFitError, lambda: autovm.attach(m, momentum(m), p, unrealized="error"),
                 "cannot find among the tensors PyTorch saves", "loss/log_prob")
    if why:
        return why
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        att = autovm.attach(m, momentum(m), p)
    if not any("loss/log_prob" in str(w.message) for w in got):
        return f"no warning naming loss/log_prob: {[str(w.message) for w in got]}"
    if ("evict", "activation", "loss/log_prob", log_prob["bytes"]) not in att.unrealized:
        return f"unrealized {att.unrealized}"
    return ""


@case("plan(): bad autocast, loss and output structures are refused before planning")
def _():
    class Nested(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 2, 1)

        def forward(self, x):
            return {"out": [self.conv(x)]}
    opt = momentum(unet)
    return (raises(ValueError, lambda: autovm.plan(unet, x16, opt, autocast="fp8"), "autocast")
            or raises(ValueError, lambda: autovm.plan(unet, x16, opt, loss="dice"), "external")
            or raises(autovm.PlannerError, lambda: autovm.plan(Nested(), x16, momentum(Nested())),
                      "dict of str to tensors"))


class Stem(torch.nn.ModuleDict):
    """A ModuleDict with a forward of its own (as torchvision's IntermediateLayerGetter): called,
    so it has a scope."""

    def forward(self, x):
        for m in self.values():
            x = m(x)
        return x


class Branches(torch.nn.Module):
    """Parallel branches in a ModuleList and a ModuleDict, as DeepLabV3's ASPP holds them:
    containers that are never called themselves, so the exporter opens no scope for them."""

    def __init__(self, width=4, classes=3):
        super().__init__()
        self.stem = Stem({"conv": torch.nn.Conv2d(3, width, 3, padding=1),
                          "relu": torch.nn.ReLU()})
        self.convs = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Conv2d(width, width, 3, padding=d, dilation=d),
                                torch.nn.BatchNorm2d(width), torch.nn.ReLU())
            for d in (1, 2))
        self.heads = torch.nn.ModuleDict({"out": torch.nn.Conv2d(2 * width, classes, 1)})

    def forward(self, x):
        x = self.stem(x)
        return self.heads["out"](torch.cat([c(x) for c in self.convs], 1))


@case("onnx_scope(): containers never called (ModuleList, ModuleDict) open no scope")
def _():
    got = (autovm.onnx_scope("convs.0.0", {"convs"}), autovm.onnx_scope("layer1.0.conv1"),
           autovm.onnx_scope("classifier.0.convs.1", {"classifier.0.convs"}))
    want = ("/convs.0/convs.0.0", "/layer1/layer1.0/conv1", "/classifier/classifier.0/convs.1")
    return "" if got == want else f"{got}, expected {want}"


@case("attach(): branches in a ModuleList and a ModuleDict after a called ModuleDict, "
       "bit-identical, evictions made")
def _():
    torch.manual_seed(0)
    m = Branches().train()
    return identical(m, x16, y16, F.cross_entropy, plan_evicting(m, x16), "branches")


sys.exit(finish())
