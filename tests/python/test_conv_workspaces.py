#!/usr/bin/python3
"""Measured convolution workspaces (python/autovm/conv_workspaces.py, autovm-plan
--conv-workspaces) on the CPU: the convolutions a model runs, found with the shapes written
out by hand; that finding them changes nothing the script sees (training flags, batch norm
statistics, random state); plan() with a table plans each convolution's forward and backward
workspace as given, through the real export; and the errors. The measurement itself needs
cuDNN: tests/python/test_calibrate_gpu.py runs it.

usage: test_conv_workspaces.py AUTOVM_PLAN LIBAUTOVM
Prints one line per case and 'N passed, M failed'; exits 1 if any failed.
"""
import copy
import json
import os
import sys
import warnings

PLAN_EXE, LIB = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
os.environ["AUTOVM_PLAN"], os.environ["AUTOVM_LIB"] = PLAN_EXE, LIB
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "python")]

import torch  # noqa: E402

import autovm  # noqa: E402
from autovm import conv_workspaces  # noqa: E402
from cases import case, finish, raises  # noqa: E402
from adapter_models import UNet, momentum  # noqa: E402

torch.set_num_threads(min(4, os.cpu_count() or 1))
warnings.filterwarnings("ignore", category=UserWarning)  # the exporter's notes

torch.manual_seed(0)
MODEL = UNet(width=4, classes=3)
X = torch.randn(4, 3, 16, 16)
Y = torch.randint(0, 3, (4, 16, 16))


def conv(op, inp, weight, out, strides, pads):
    return {"op": op, "dtype": "float32", "input": inp, "weight": weight, "output": out,
            "strides": strides, "pads": pads, "dilations": [1, 1], "group": 1}


# UNet(width=4): conv1 3x3 pad 1 on the batch; max pooling; conv2 3x3 pad 1 to 8 channels;
# the transposed convolution 2x2 stride 2 back to 16x16; conv3 on the concatenation (8
# channels); the 1x1 head to 3 classes.
EXPECTED = [
    conv("Conv", [4, 3, 16, 16], [4, 3, 3, 3], [4, 4, 16, 16], [1, 1], [1, 1]),
    conv("Conv", [4, 4, 8, 8], [8, 4, 3, 3], [4, 8, 8, 8], [1, 1], [1, 1]),
    dict(conv("ConvTranspose", [4, 8, 8, 8], [8, 4, 2, 2], [4, 4, 16, 16], [2, 2], [0, 0]),
         output_padding=[0, 0]),
    conv("Conv", [4, 8, 16, 16], [4, 8, 3, 3], [4, 4, 16, 16], [1, 1], [1, 1]),
    conv("Conv", [4, 4, 16, 16], [3, 4, 1, 1], [4, 3, 16, 16], [1, 1], [0, 0]),
]


@case("the convolutions a U-Net runs, at the batch's size, in the order they run")
def _():
    found = conv_workspaces.convolutions(MODEL, X)
    if found != EXPECTED:
        return f"found {json.dumps(found)}"
    bf16 = conv_workspaces.convolutions(MODEL, X, autocast="bf16")
    if {e["dtype"] for e in bf16} != {"bfloat16"} or len(bf16) != len(EXPECTED):
        return f"under bf16 autocast: {json.dumps(bf16)}"
    return ""


@case("finding them changes no training flag, batch norm statistic or random state")
def _():
    m = copy.deepcopy(MODEL).train()
    m.bn2.eval()  # a frozen batch norm stays frozen
    stats = {k: v.clone() for k, v in m.state_dict().items()}
    rng = torch.get_rng_state()
    conv_workspaces.convolutions(m, X)
    flags = {n: mod.training for n, mod in m.named_modules()}
    if not m.training or m.bn2.training or not m.bn1.training:
        return f"training flags now {flags}"
    changed = [k for k, v in m.state_dict().items() if not torch.equal(v, stats[k])]
    if changed:
        return f"changed {changed}"
    if not torch.equal(rng, torch.get_rng_state()):
        return "the CPU random state was drawn from"
    return ""


class AuxHead(torch.nn.Module):
    """A convolution only training runs (an auxiliary head, as Inception's), beside a dropout
    that draws random numbers."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.drop = torch.nn.Dropout(0.5)
        self.aux = torch.nn.Conv2d(4, 2, 1)

    def forward(self, x):
        h = self.drop(self.bn(self.body(x)))
        return (h, self.aux(h)) if self.training else h


@case("a training-only convolution is found; statistics and random state stay as they were")
def _():
    m = AuxHead().train()
    stats = {k: v.clone() for k, v in m.state_dict().items()}
    rng = torch.get_rng_state()
    ops = [(e["weight"], e["output"]) for e in conv_workspaces.convolutions(m, X)]
    if ops != [([4, 3, 3, 3], [4, 4, 16, 16]), ([2, 4, 1, 1], [4, 2, 16, 16])]:
        return f"found {ops}"
    changed = [k for k, v in m.state_dict().items() if not torch.equal(v, stats[k])]
    if changed or not torch.equal(rng, torch.get_rng_state()) or not m.training:
        return f"changed {changed}, rng same {torch.equal(rng, torch.get_rng_state())}"
    ops = [e["weight"] for e in conv_workspaces.convolutions(m.eval(), X)]
    return "" if ops == [[4, 3, 3, 3]] else f"in eval mode found {ops}"


@case("measure() off a CUDA GPU measures nothing")
def _():
    out = conv_workspaces.measure(MODEL, X)
    return "" if out == {"convolutions": [], "skipped": []} else f"measured {out}"


@case("a plan under a budget that cannot hold a measured workspace cuts it and says which")
def _():
    table = {"convolutions": []}
    for e in conv_workspaces.convolutions(MODEL, X):
        e.pop("output_padding", None)
        table["convolutions"].append(dict(e, forward_bytes=0, backward_bytes=0))
    table["convolutions"][3]["backward_bytes"] = 10 ** 9  # conv3's: no small budget holds it
    m = copy.deepcopy(MODEL)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        p = autovm.plan(m, (X, Y), momentum(m), budget="2MB", pytorch_margin=False,
                        conv_workspaces=table)
    if not any("1 convolution workspace(s) cut to fit the budget" in str(w.message)
               for w in said):
        return f"no warning of the cut: {[str(w.message)[:200] for w in said]}"
    cut = p.options.get("conv_workspaces_cut")
    if [(c["entry"], c["phase"], c["measured_bytes"]) for c in cut or []] != [(3, "backward", 10 ** 9)]:
        return f"cut: {cut}"
    if not 0 < cut[0]["bytes"] < 10 ** 9:
        return f"cut to {cut[0]['bytes']}"
    return ""


@case("with autovm's pool as PyTorch's allocator no measured workspace is cut: a budget that "
      "cannot hold it is refused (autovm-plan --workspaces-as-measured)")
def _():
    from autovm import planner

    table = {"convolutions": []}
    for e in conv_workspaces.convolutions(MODEL, X):
        e.pop("output_padding", None)
        table["convolutions"].append(dict(e, forward_bytes=0, backward_bytes=0))
    table["convolutions"][3]["backward_bytes"] = 10 ** 9  # cut at 2 MB by the case above
    m = copy.deepcopy(MODEL)
    kept = planner._pool_is_torchs
    planner._pool_is_torchs = lambda: True
    try:
        autovm.plan(m, (X, Y), momentum(m), budget="2MB", pytorch_margin=False,
                    conv_workspaces=table)
        return "a budget below the whole workspace was planned"
    except autovm.PlannerError as e:
        if e.exit_code != 6 or "grad_workspace (1.00 GB)" not in str(e):
            return f"exit code {e.exit_code}, not naming the whole workspace: {e}"
        return ""
    finally:
        planner._pool_is_torchs = kept


def workspaces_of(plan_path):
    """{tensor name: bytes} of the plan's workspace tensors."""
    with open(plan_path) as f:
        doc = json.load(f)
    return doc, {t["name"]: t["bytes"] for t in doc["tensors"] if t["kind"] == "workspace"}


@case("plan() plans each convolution's measured workspaces, forward and backward")
def _():
    table = {"convolutions": []}
    for k, e in enumerate(conv_workspaces.convolutions(MODEL, X)):
        e.pop("output_padding", None)
        table["convolutions"].append(dict(e, forward_bytes=(k + 1) * 10 ** 6,
                                          backward_bytes=(k + 1) * 10 ** 6 + 512))
    m = copy.deepcopy(MODEL)
    p = autovm.plan(m, (X, Y), momentum(m), loss="cross-entropy", conv_workspaces=table)
    if p.conv_workspaces is not table:
        return "plan.conv_workspaces is not the table"
    doc, ws = workspaces_of(p.path)
    if doc["options"].get("conv_workspaces_measured") != 5:
        return f"options: {doc['options']}"
    forward = sorted(b for n, b in ws.items() if n.endswith("/workspace"))
    backward = sorted(b for n, b in ws.items() if n.endswith("/grad_workspace"))
    want = [(k + 1) * 10 ** 6 for k in range(5)]
    # The first convolution's backward computes only its weight's gradient; it has a
    # workspace all the same (cuDNN's filter gradient).
    if forward != want or backward != [w + 512 for w in want]:
        return f"forward {forward}, backward {backward}"
    estimate = autovm.plan(copy.deepcopy(MODEL), (X, Y), momentum(MODEL), conv_workspaces=None)
    _, ws0 = workspaces_of(estimate.path)
    if estimate.conv_workspaces is not None or sorted(ws0.values()) == sorted(ws.values()):
        return f"without the table the workspaces are {sorted(ws0.values())}"
    return ""


@case("conv_workspaces refuses what is not a table")
def _():
    m = copy.deepcopy(MODEL)
    for bad, says in (("everything", "conv_workspaces: 'auto', None"),
                      ({"convs": []}, '{"convolutions": [...]}')):
        why = raises(ValueError, lambda: autovm.plan(m, (X, Y), momentum(m), conv_workspaces=bad),
                     says)
        if why:
            return f"{bad!r}: {why}"
    return ""


sys.exit(finish())
