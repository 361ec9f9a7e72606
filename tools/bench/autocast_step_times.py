#!/usr/bin/env python3
"""The cost model under bf16 autocast against measured training steps: for each model of
tools/bench/dense_training.py's table (plain PyTorch and checkpointing rows), autovm-plan's
predicted step time of the same policy, the ratio, and whether autovm-plan prints it.

    /usr/bin/python3 tools/bench/autocast_step_times.py \\
        --csv tools/bench/data/plan-quality/baselines-bf16.csv
    /usr/bin/python3 tools/bench/autocast_step_times.py --device my-profile.json --bf16-tflops 150

The measured side is an earlier run of dense_training.py on the GPU (its --csv, by default
tools/bench/data/dense/h200.csv); the predicted side runs here, on the CPU, from the same
exports (tools/bench/data/dense/exports). --bf16-tflops replaces the profile's bf16 and fp16
rates, to see how the ratios move with it (the h200-pcie profile's rate is the one whose worst
ratio over these models is least).

Exit codes: 0 done, 1 autovm-plan failed, 2 bad usage or input.
"""
import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# dense_training.py's titles -> their exports (dense_training.py, MODELS).
EXPORTS = {"VGG-19": "vgg19", "ResNet-50": "resnet50", "DeepLabV3-ResNet50": "deeplabv3",
           "U-Net 2-D": "unet2d", "U-Net 3-D": "unet3d"}
# dense_training.py's configs -> the planner's baseline policies.
POLICIES = {"plain PyTorch": "no_swap", "checkpointing": "checkpoint"}


def measured_rows(path):
    """[(title, export, batch, policy, measured ms)] from dense_training.py's --csv."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            policy = POLICIES.get(r["config"])
            if policy is None:
                continue
            m = re.match(r"(.+) b(\d+) ", r["model"] + " ")
            if m is None or m.group(1) not in EXPORTS:
                raise SystemExit(f"{path}: model '{r['model']}' is not one of "
                                 f"{', '.join(EXPORTS)} with its batch (bN)")
            rows.append((r["model"], EXPORTS[m.group(1)], int(m.group(2)), policy,
                         float(r["step ms"])))
    if not rows:
        raise SystemExit(f"{path}: no plain PyTorch or checkpointing rows")
    return rows


def plan_stats(planner, onnx, batch, budget, device, out):
    args = [planner, onnx, "--batch", str(batch), "--optimizer", "momentum", "--autocast",
            "bf16", "--memory-model", "pytorch", "--pool-indices", "--quiet", "--budget", budget,
            "--device", device, "-o", out]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode == 6:
        return None  # no plan fits this budget
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        raise SystemExit(1)
    with open(out) as f:
        return json.load(f)["statistics"]


def baselines(planner, onnx, batch, device, tmp):
    """{policy: (predicted ms, printed)}: baselines exist only under a budget the graph's peak
    exceeds, so the plan is made below that peak (their step times do not depend on it)."""
    out = os.path.join(tmp, "plan.json")
    peak = plan_stats(planner, onnx, batch, "1000GB", device, out)["peak_bytes"]
    for share in (0.5, 0.75, 0.9):
        s = plan_stats(planner, onnx, batch, f"{int(peak * share)}B", device, out)
        if s is not None:
            return {b["policy"]: (b["step_time_us"] / 1000, b.get("calibrated", False))
                    for b in s["baselines"]}
    raise SystemExit(f"{onnx}: no plan at 50-90 % of its peak")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--measured", default=os.path.join(ROOT, "tools/bench/data/dense/h200.csv"))
    ap.add_argument("--exports", default=os.path.join(ROOT, "tools/bench/data/dense/exports"))
    ap.add_argument("--planner", default=os.environ.get("AUTOVM_PLAN") or
                    os.path.join(ROOT, "build/compiler/driver/autovm-plan"))
    ap.add_argument("--device", default="h200-pcie", help="profile name or file")
    ap.add_argument("--bf16-tflops", type=float, help="replace the profile's bf16/fp16 rate")
    ap.add_argument("--csv", help="write the table here (atomically)")
    a = ap.parse_args()
    if not os.access(a.planner, os.X_OK):
        raise SystemExit(f"autovm-plan not found at {a.planner}: build it, or give --planner")
    rows = measured_rows(a.measured)
    with tempfile.TemporaryDirectory() as tmp:
        device = a.device
        if a.bf16_tflops:
            path = device if device.endswith(".json") else \
                os.path.join(ROOT, "profiles", device + ".json")
            with open(path) as f:
                profile = json.load(f)
            profile["bf16_tflops"] = profile["f16_tflops"] = a.bf16_tflops
            device = os.path.join(tmp, "profile.json")
            with open(device, "w") as f:
                json.dump(profile, f)
        cache = {}
        table = []
        for title, export, batch, policy, measured in rows:
            if export not in cache:
                cache[export] = baselines(a.planner, os.path.join(a.exports, export + ".onnx"),
                                          batch, device, tmp)
            predicted, printed = cache[export][policy]
            table.append({"model": title, "policy": policy, "predicted ms": f"{predicted:.1f}",
                          "measured ms": f"{measured:.1f}",
                          "measured / predicted": f"{measured / predicted:.2f}",
                          "printed": "yes" if printed else "no"})
    fields = list(table[0])
    print(",".join(fields))
    for r in table:
        print(",".join(r[k] for k in fields))
    if a.csv:
        tmp_path = a.csv + ".tmp"
        with open(tmp_path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
            w.writeheader()
            w.writerows(table)
        os.replace(tmp_path, a.csv)


if __name__ == "__main__":
    main()
