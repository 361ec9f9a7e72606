#!/usr/bin/env python3
"""Real exporter styles end to end: writes the hand-built test models (tests/models/) and plans
each with autovm-plan at batch 4, checking the facts documented in tests/models/README.md:
logits shape, parameter count, the inference-export note, the unsupported-ops error, that
weights stored externally (even in a missing file) plan the same, and that the dynamo-style
rewrite of resnet18 plans exactly like the TorchScript export.

usage: test_exports.py AUTOVM_PLAN MODELS_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

PLAN, MODELS = sys.argv[1], sys.argv[2]
HERE = os.path.dirname(os.path.abspath(__file__))
MAKE = os.path.join(HERE, "..", "models", "make_test_models.py")
results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print(f"{'PASS' if ok else 'FAIL'} {name}" + ("" if ok else f" {detail}"))


def plan(path, *extra, out_dir=None):
    # The plan goes beside the model, or into out_dir (a shipped model's folder stays clean).
    out = os.path.join(out_dir, os.path.basename(path)) + ".plan.json" if out_dir else path + ".plan.json"
    r = subprocess.run([PLAN, path, "--batch", "4", "-o", out, *extra], capture_output=True, text=True)
    return r, (json.load(open(out)) if r.returncode == 0 else None)


try:
    import onnx  # noqa: F401
    import torch  # noqa: F401
except ImportError:
    print("python3-onnx or python3-torch missing: skipped")
    sys.exit(77)

with tempfile.TemporaryDirectory() as tmp:
    subprocess.run(["/usr/bin/python3", MAKE, tmp], check=True, stdout=subprocess.DEVNULL)

    r, p = plan(os.path.join(tmp, "dynamo_style.onnx"))
    check("dynamo_style (IR 10, opset 20) plans", r.returncode == 0, r.stderr[-300:])
    if p:
        st = p["statistics"]
        check("dynamo_style: 330 parameters, logits [4, 10], IR 10 opset 20",
              st["parameter_count"] == 330 and p["model"]["classes"] == 10 and p["model"]["ir_version"] == 10
              and p["model"]["opset"] == 20, f"{st['parameter_count']} {p['model']['classes']}")

    r18 = os.path.join(MODELS, "resnet18.onnx")
    r, a = plan(r18, out_dir=tmp)
    r2, b = plan(os.path.join(tmp, "resnet18_dynamo_style.onnx"))
    check("resnet18 dynamo style plans", r2.returncode == 0, r2.stderr[-300:])
    if a and b:
        sa, sb = a["statistics"], b["statistics"]
        same = all(sa[k] == sb[k] for k in ("parameter_bytes", "peak_bytes", "step_count", "tensor_count"))
        check("resnet18: dynamo style plans like the TorchScript export", same,
              f"params {sa['parameter_bytes']}/{sb['parameter_bytes']} peak {sa['peak_bytes']}/{sb['peak_bytes']} "
              f"steps {sa['step_count']}/{sb['step_count']}")
        check("resnet18: 46,758,048 parameter bytes (PyTorch's)", sb["parameter_bytes"] == 46758048)

    r, ext = plan(os.path.join(tmp, "external_weights.onnx"))
    r2, miss = plan(os.path.join(tmp, "external_missing.onnx"))
    check("external weights plan", r.returncode == 0, r.stderr[-300:])
    check("weights in a missing external file still plan", r2.returncode == 0, r2.stderr[-300:])
    if ext and miss:
        check("and plan alike", ext["statistics"]["peak_bytes"] == miss["statistics"]["peak_bytes"]
              and ext["statistics"]["parameter_count"] == 330)

    r, inf = plan(os.path.join(tmp, "inference_export.onnx"))
    check("inference export plans with a note", r.returncode == 0 and "looks like an inference export" in r.stderr
          and inf["model"]["looks_like_inference_export"], r.stderr[-200:])
    if a:
        check("a training export is not flagged", not a["model"]["looks_like_inference_export"])

    r, _ = plan(os.path.join(tmp, "unsupported_op.onnx"))
    check("unsupported ops named", r.returncode == 5 and "LSTM" in r.stderr and "Foo" in r.stderr, r.stderr[-300:])

    r, old = plan(os.path.join(tmp, "old_opset9.onnx"))
    check("opset 9 export (Upsample, 5-output batch norm) plans with 1,498 parameters",
          r.returncode == 0 and old["statistics"]["parameter_count"] == 1498, r.stderr[-300:])

failed = results.count(False)
print(f"{len(results) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
