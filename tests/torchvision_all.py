#!/usr/bin/python3
"""Plan every torchvision classification CNN with autovm-plan and check its parameter bytes.

For each model of tools/export_models.py's --all list (every classification CNN of the
installed torchvision; 68 with Debian's torchvision 0.14), this test

  1. exports it for training (opset 17, weights stripped) into WORKDIR/<name>.onnx with
     tools/export_models.py's functions, 2 processes in parallel by default;
  2. runs  autovm-plan WORKDIR/<name>.onnx --batch 32 --budget 1TB -o WORKDIR/<name>.plan.json
  3. checks that it exits 0 and that plan["statistics"]["parameter_bytes"] equals PyTorch's
     sum(p.numel() * p.element_size() for p in model.parameters()).

Each model is planned as soon as its export finishes.  One line per model:
    name  export seconds  plan ms  parameter bytes ours vs PyTorch  PASS/FAIL
then exactly one line "N passed, M failed".  Exits 1 if any failed, 77 (skipped, for meson)
if torch/torchvision/onnx cannot be imported, 2 on bad arguments.

Exporting all 68 models took 26 minutes with 2 processes on the 2-core development machine
(the per-model times add up to 47 minutes; regnet_y_128gf alone takes about 5, the VGGs 1-3
each); planning adds what autovm-plan needs.  --reuse keeps the exports of an earlier run in
the same WORKDIR, so a second run only plans.

    /usr/bin/python3 tests/torchvision_all.py --plan build/compiler/autovm-plan --workdir /tmp/tv
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))

SKIP = 77


def run_plan(plan: str, model_path: str, out_json: str, batch: int, budget: str,
             timeout: float) -> tuple[bool, float, int | None, str]:
    """Run autovm-plan; return (ok, milliseconds, parameter_bytes or None, error message)."""
    cmd = [plan, model_path, "--batch", str(batch), "--budget", budget, "-o", out_json]
    if os.path.exists(out_json):
        os.remove(out_json)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, text=True, errors="replace")
    except subprocess.TimeoutExpired:
        return False, (time.monotonic() - t0) * 1e3, None, f"timed out after {timeout:.0f} s"
    except OSError as e:
        return False, 0.0, None, f"cannot run {plan}: {e}"
    ms = (time.monotonic() - t0) * 1e3
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip() or "(no output)").splitlines()[-5:]
        return False, ms, None, f"exit code {proc.returncode}: " + " | ".join(tail)
    try:
        with open(out_json) as f:
            plan_json = json.load(f)
        ours = plan_json["statistics"]["parameter_bytes"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return False, ms, None, f"bad plan JSON {out_json}: {type(e).__name__}: {e}"
    if not isinstance(ours, int):
        return False, ms, None, f"statistics.parameter_bytes is not an integer: {ours!r}"
    return True, ms, ours, ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Export every torchvision classification CNN for training and check "
                    "autovm-plan's statistics.parameter_bytes against PyTorch's count.",
        epilog="Example: /usr/bin/python3 tests/torchvision_all.py "
               "--plan build/compiler/autovm-plan --workdir /tmp/tv")
    ap.add_argument("--plan", metavar="PATH",
                    help="the autovm-plan executable (required unless --export-only)")
    ap.add_argument("--workdir", required=True, metavar="DIR",
                    help="folder for the exported models and plans (created if missing)")
    ap.add_argument("--models", nargs="+", metavar="NAME",
                    help="only these models (default: every classification CNN)")
    ap.add_argument("-j", "--jobs", type=int, default=2,
                    help="parallel export processes (default 2)")
    ap.add_argument("--batch", type=int, default=32, help="--batch for autovm-plan (default 32)")
    ap.add_argument("--budget", default="1TB", help="--budget for autovm-plan (default 1TB)")
    ap.add_argument("--timeout", type=float, default=600,
                    help="seconds allowed to one autovm-plan run (default 600)")
    ap.add_argument("--reuse", action="store_true",
                    help="reuse WORKDIR/<name>.onnx exported by an earlier run "
                         "(parameter counts are kept in WORKDIR/param_counts.json)")
    ap.add_argument("--export-only", action="store_true",
                    help="only export (and time) the models; do not plan")
    args = ap.parse_args(argv)
    if not args.export_only and not args.plan:
        ap.error("--plan is required unless --export-only")
    if args.plan and not args.export_only:
        if not (os.path.isfile(args.plan) and os.access(args.plan, os.X_OK)):
            ap.error(f"--plan {args.plan}: not an executable file")
        args.plan = os.path.abspath(args.plan)

    try:
        import onnx  # noqa: F401
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {e} (run with Debian's /usr/bin/python3 and python3-torch, "
              "python3-torchvision, python3-onnx installed)")
        return SKIP
    import export_models

    names = export_models.classification_model_names()
    if args.models:
        unknown = [n for n in args.models if n not in names]
        if unknown:
            ap.error(f"unknown model(s): {', '.join(unknown)}")
        names = list(args.models)

    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    counts_path = os.path.join(workdir, "param_counts.json")
    counts: dict = {}
    if args.reuse and os.path.exists(counts_path):
        with open(counts_path) as f:
            counts = json.load(f)

    passed = failed = 0
    t_start = time.monotonic()

    def finish(r: dict) -> None:
        nonlocal passed, failed
        name = r["name"]
        export_s = "reused" if r.get("reused") else f"{r['seconds']:.1f}s"
        if "error" in r:
            failed += 1
            print(f"{name:<20} export {export_s:>7}  FAIL  export failed: {r['error']}",
                  flush=True)
            return
        theirs = r["parameter_bytes"]
        counts[name] = {"parameter_bytes": theirs, "parameters": r["parameters"],
                        "resolution": r["resolution"]}
        if args.export_only:
            passed += 1
            print(f"{name:<20} export {export_s:>7}  PyTorch {theirs:>13,} B  EXPORTED",
                  flush=True)
            return
        ok, ms, ours, err = run_plan(args.plan, r["path"],
                                     os.path.join(workdir, f"{name}.plan.json"),
                                     args.batch, args.budget, args.timeout)
        if ok and ours != theirs:
            ok, err = False, f"parameter_bytes {ours:,} != PyTorch's {theirs:,}"
        ours_s = f"{ours:,}" if ours is not None else "-"
        line = (f"{name:<20} export {export_s:>7}  plan {ms:8.1f} ms  "
                f"params ours {ours_s:>13} vs PyTorch {theirs:>13,}  "
                f"{'PASS' if ok else 'FAIL'}")
        if ok:
            passed += 1
        else:
            failed += 1
            line += f"  ({err})"
        print(line, flush=True)

    todo = []
    for name in names:
        path = os.path.join(workdir, f"{name}.onnx")
        if args.reuse and name in counts and os.path.exists(path):
            finish({"name": name, "path": path, "reused": True, "seconds": 0.0, **counts[name]})
        else:
            todo.append(name)
    t_export = time.monotonic()
    export_models.export_many(todo, workdir, jobs=args.jobs, callback=finish, opset=17,
                              weights="strip")
    export_wall = time.monotonic() - t_export

    with open(counts_path, "w") as f:
        json.dump(dict(sorted(counts.items())), f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"# exported {len(todo)} models in {export_wall:.0f} s with {args.jobs} processes; "
          f"{time.monotonic() - t_start:.0f} s in all", flush=True)
    print(f"{passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
