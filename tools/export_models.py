#!/usr/bin/python3
"""Export torchvision classification CNNs to ONNX *training* graphs for AutoVM.

Run with Debian's interpreter (/usr/bin/python3): it is the one that sees Debian's
python3-torch (1.13.1), python3-torchvision (0.14.1) and python3-onnx (1.12).

How a model is exported
-----------------------
    torch.onnx.export(model.train(), x, f,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, opset_version=OPSET,
                      input_names=['input'], output_names=['logits'],
                      dynamic_axes={'input': {0: 'batch'}, 'logits': {0: 'batch'}})

with x a random batch of 2 images (the planner overrides the batch size; the batch
dimension is symbolic, named 'batch').  Training mode keeps BatchNormalization
(training_mode=1, 3 outputs) and Dropout (training_mode=True) instead of folding them.

Special cases
-------------
* Stochastic depth (torchvision.ops.StochasticDepth, used by efficientnet_* and
  convnext_*) draws its mask with an in-place `bernoulli_`, which torch 1.13 cannot
  export to ONNX.  For models that contain it, those modules alone are put in eval mode
  (where they are the identity) and the model is exported with TrainingMode.PRESERVE, so
  every other module (BatchNorm, Dropout) still exports in training form.  The memory
  cost of the dropped per-sample mask is negligible; the graph is otherwise the
  training graph.
* googlenet and inception_v3 are built with aux_logits=False, init_weights=False so the
  export has a single output ('logits'); the auxiliary classifiers exist only in
  training and only to add loss terms.
* inception_v3 is exported at its natural resolution 299x299; every other model at
  224x224.  --resolution overrides both.
* Vision transformers (vit_*, swin_*, maxvit_t) are not CNNs and are not part of --all.

Weights
-------
By default weight bytes are STRIPPED: every floating-point initializer keeps its name,
dims and data_type but loses its data (raw_data/float_data/... cleared).  Integer
initializers are kept: they are shape constants (Reshape targets and the like).  A
model metadata entry "autovm.weights" says "stripped", "inline" or "external".
--keep-weights keeps the (randomly initialised, seed 0) weights inline;
--external-data writes them to "<name>.onnx.data" beside the model.

The output is deterministic: the same command writes byte-identical files.

Examples
--------
    /usr/bin/python3 tools/export_models.py resnet50 vgg16 --out models
    /usr/bin/python3 tools/export_models.py --all --out /tmp/tv --param-counts /tmp/tv/p.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings

DEFAULT_OPSET = 17
DEFAULT_BATCH = 2

# The classification CNNs of torchvision 0.14 (checked against
# torchvision.models.list_models(module=torchvision.models) minus the transformers).
# Used when list_models() does not exist (torchvision < 0.14).
CHECKED_CNN_NAMES = [
    "alexnet",
    "convnext_base", "convnext_large", "convnext_small", "convnext_tiny",
    "densenet121", "densenet161", "densenet169", "densenet201",
    "efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3",
    "efficientnet_b4", "efficientnet_b5", "efficientnet_b6", "efficientnet_b7",
    "efficientnet_v2_l", "efficientnet_v2_m", "efficientnet_v2_s",
    "googlenet", "inception_v3",
    "mnasnet0_5", "mnasnet0_75", "mnasnet1_0", "mnasnet1_3",
    "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small",
    "regnet_x_16gf", "regnet_x_1_6gf", "regnet_x_32gf", "regnet_x_3_2gf",
    "regnet_x_400mf", "regnet_x_800mf", "regnet_x_8gf",
    "regnet_y_128gf", "regnet_y_16gf", "regnet_y_1_6gf", "regnet_y_32gf",
    "regnet_y_3_2gf", "regnet_y_400mf", "regnet_y_800mf", "regnet_y_8gf",
    "resnet101", "resnet152", "resnet18", "resnet34", "resnet50",
    "resnext101_32x8d", "resnext101_64x4d", "resnext50_32x4d",
    "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5", "shufflenet_v2_x2_0",
    "squeezenet1_0", "squeezenet1_1",
    "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn",
    "wide_resnet101_2", "wide_resnet50_2",
]

# Families of CNNs; a name from list_models() is a CNN iff it starts with one of these.
CNN_PREFIXES = (
    "alexnet", "vgg", "resnet", "resnext", "wide_resnet", "densenet", "googlenet",
    "inception_v3", "mobilenet_v2", "mobilenet_v3", "mnasnet", "shufflenet_v2",
    "squeezenet", "efficientnet_", "regnet_", "convnext_",
)

NATURAL_RESOLUTION = {"inception_v3": 299}
DEFAULT_RESOLUTION = 224

# Extra constructor arguments, to keep the export single-output.
BUILDER_KWARGS = {
    "googlenet": {"aux_logits": False, "init_weights": False},
    "inception_v3": {"aux_logits": False, "init_weights": False},
}

WEIGHTS_MODES = ("strip", "inline", "external")


class ExportError(RuntimeError):
    pass


def classification_model_names() -> list[str]:
    """Every classification CNN of the installed torchvision, sorted."""
    import torchvision.models as tvm

    if hasattr(tvm, "list_models"):
        names = [n for n in tvm.list_models(module=tvm) if n.startswith(CNN_PREFIXES)]
    else:
        names = [n for n in CHECKED_CNN_NAMES if hasattr(tvm, n)]
    return sorted(names)


def natural_resolution(name: str) -> int:
    return NATURAL_RESOLUTION.get(name, DEFAULT_RESOLUTION)


def build_model(name: str):
    """The torchvision model `name` with random weights (seed 0), in training mode."""
    import torch
    import torchvision.models as tvm

    torch.manual_seed(0)
    kwargs = dict(BUILDER_KWARGS.get(name, {}))
    if hasattr(tvm, "get_model"):
        try:
            model = tvm.get_model(name, weights=None, **kwargs)
        except ValueError as e:  # unknown name
            raise ExportError(f"{name}: not a torchvision model ({e})") from None
    else:
        builder = getattr(tvm, name, None)
        if builder is None or not callable(builder):
            raise ExportError(f"{name}: not a torchvision model")
        model = builder(weights=None, **kwargs)
    return model.train()


def parameter_info(model) -> dict:
    """PyTorch's own count of trainable parameters (buffers such as BN running stats excluded)."""
    params = list(model.parameters())
    return {
        "parameter_bytes": int(sum(p.numel() * p.element_size() for p in params)),
        "parameters": int(sum(p.numel() for p in params)),
    }


def _disable_stochastic_depth(model) -> int:
    """Put every StochasticDepth module in eval mode (identity); return how many."""
    try:
        from torchvision.ops import StochasticDepth
    except ImportError:  # very old torchvision: no such module
        return 0
    count = 0
    for module in model.modules():
        if isinstance(module, StochasticDepth):
            module.eval()
            count += 1
    return count


_FLOAT_TYPES = None


def _float_types():
    global _FLOAT_TYPES
    if _FLOAT_TYPES is None:
        from onnx import TensorProto as T

        _FLOAT_TYPES = {T.FLOAT, T.DOUBLE, T.FLOAT16, T.BFLOAT16, T.COMPLEX64, T.COMPLEX128}
    return _FLOAT_TYPES


def strip_tensor(tensor) -> None:
    """Drop a tensor's data but keep its name, dims and data_type (data_location DEFAULT)."""
    for field in ("raw_data", "float_data", "double_data", "int32_data", "int64_data",
                  "uint64_data", "string_data", "external_data", "data_location"):
        tensor.ClearField(field)


def strip_weights(model_proto) -> int:
    """Strip every floating-point initializer of the main graph; return how many."""
    floats = _float_types()
    count = 0
    for tensor in model_proto.graph.initializer:
        if tensor.data_type in floats:
            strip_tensor(tensor)
            count += 1
    return count


def _set_metadata(model_proto, entries: dict) -> None:
    existing = {p.key: p for p in model_proto.metadata_props}
    for key, value in entries.items():
        prop = existing.get(key)
        if prop is None:
            prop = model_proto.metadata_props.add()
            prop.key = key
        prop.value = str(value)


def _remove(path: str) -> None:
    if os.path.lexists(path):
        os.remove(path)


def export_model(name: str, out_path: str, *, opset: int = DEFAULT_OPSET,
                 resolution: int | None = None, weights: str = "strip",
                 batch: int = DEFAULT_BATCH, verbose: bool = False) -> dict:
    """Export torchvision model `name` for training to `out_path`.

    weights: "strip" (default), "inline" or "external" (data in `out_path + '.data'`).
    Returns {"name", "path", "seconds", "resolution", "opset", "training_mode",
    "file_bytes", "parameter_bytes", "parameters"}.
    """
    import onnx
    import torch
    from onnx import external_data_helper

    if weights not in WEIGHTS_MODES:
        raise ValueError(f"weights must be one of {WEIGHTS_MODES}, not {weights!r}")
    t0 = time.monotonic()
    res = resolution or natural_resolution(name)
    model = build_model(name)
    info = parameter_info(model)
    mode = torch.onnx.TrainingMode.TRAINING
    if _disable_stochastic_depth(model):
        mode = torch.onnx.TrainingMode.PRESERVE
    torch.manual_seed(0)
    x = torch.randn(batch, 3, res, res)

    out_path = os.path.abspath(out_path)
    data_name = os.path.basename(out_path) + ".data"
    data_path = os.path.join(os.path.dirname(out_path), data_name)
    os.makedirs(os.path.dirname(out_path), exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="autovm-export-") as tmp:
        # Export to a file in a fresh folder: above 2 GB of weights torch writes them as
        # external data files beside it.
        tmp_model = os.path.join(tmp, "model.onnx")
        with warnings.catch_warnings():
            if not verbose:
                warnings.simplefilter("ignore")
            try:
                torch.onnx.export(
                    model, x, tmp_model,
                    training=mode,
                    do_constant_folding=False,
                    opset_version=opset,
                    input_names=["input"],
                    output_names=["logits"],
                    dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                    verbose=False,
                )
            except Exception as e:  # torch raises many kinds; report them uniformly
                msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ExportError(f"{name}: torch.onnx.export failed: "
                                  f"{type(e).__name__}: {msg[:400]}") from e
        del model
        proto = onnx.load(tmp_model, load_external_data=False)
        floats = _float_types()
        for tensor in proto.graph.initializer:
            if external_data_helper.uses_external_data(tensor):
                if weights == "strip" and tensor.data_type in floats:
                    continue  # stripped below: never read it
                external_data_helper.load_external_data_for_tensor(tensor, tmp)
                tensor.ClearField("external_data")
                tensor.ClearField("data_location")

        if weights == "strip":
            strip_weights(proto)
        _set_metadata(proto, {
            "autovm.source": f"torchvision.models.{name}",
            "autovm.resolution": res,
            "autovm.weights": {"strip": "stripped", "inline": "inline",
                               "external": "external"}[weights],
        })

        _remove(data_path)
        if weights == "external":
            onnx.save(proto, out_path, save_as_external_data=True,
                      all_tensors_to_one_file=True, location=data_name)
        else:
            if proto.ByteSize() >= 2**31:
                raise ExportError(f"{name}: {proto.ByteSize() / 2**30:.2f} GiB with inline "
                                  "weights exceeds protobuf's 2 GiB limit; use --external-data")
            onnx.save(proto, out_path)

    info.update({
        "name": name,
        "path": out_path,
        "seconds": time.monotonic() - t0,
        "resolution": res,
        "opset": opset,
        "training_mode": mode.name,
        "file_bytes": os.path.getsize(out_path)
                      + (os.path.getsize(data_path) if os.path.exists(data_path) else 0),
    })
    return info


def _export_worker(job: tuple) -> dict:
    """multiprocessing entry point: never raises, reports the error instead."""
    name, out_path, kwargs = job
    import torch

    torch.set_num_threads(kwargs.pop("threads", 1))
    t0 = time.monotonic()
    try:
        return export_model(name, out_path, **kwargs)
    except Exception as e:
        return {"name": name, "path": out_path, "error": f"{e}",
                "seconds": time.monotonic() - t0}


def export_many(names: list[str], out_dir: str, *, jobs: int = 1, callback=None,
                **kwargs) -> list[dict]:
    """Export `names` into out_dir/<name>.onnx with `jobs` processes.

    Returns one result per name, in the order of `names`; a failed export has an
    "error" key instead of raising.  callback(result) is called as each finishes.
    """
    jobs_list = [(n, os.path.join(out_dir, f"{n}.onnx"), dict(kwargs)) for n in names]
    results = {}
    if jobs <= 1:
        for job in jobs_list:
            job[2]["threads"] = job[2].get("threads", os.cpu_count() or 1)
            r = _export_worker(job)
            results[r["name"]] = r
            if callback:
                callback(r)
    else:
        import multiprocessing as mp

        # spawn: a fresh interpreter per worker, no forked torch thread pools.
        ctx = mp.get_context("spawn")
        with ctx.Pool(processes=jobs, maxtasksperchild=1) as pool:
            for r in pool.imap_unordered(_export_worker, jobs_list):
                results[r["name"]] = r
                if callback:
                    callback(r)
    return [results[n] for n in names]


def _format_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _display_path(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _print_result(r: dict) -> None:
    if "error" in r:
        print(f"{r['name']:<20} FAILED after {r['seconds']:6.1f} s: {r['error']}", flush=True)
    else:
        print(f"{r['name']:<20} {r['seconds']:6.1f} s  opset {r['opset']}  {r['resolution']}px  "
              f"{r['training_mode']:<8}  {_format_bytes(r['file_bytes']):>10}  "
              f"params {r['parameters']:>11,}  -> {_display_path(r['path'])}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Export torchvision classification CNNs to ONNX training graphs\n"
                    "(TorchScript exporter, TrainingMode.TRAINING, no constant folding,\n"
                    "symbolic batch 'batch'). Floating-point weights are stripped (dims and\n"
                    "data_type kept) unless --keep-weights or --external-data is given.\n"
                    "See the header of this script for the special cases (stochastic\n"
                    "depth, googlenet/inception_v3).",
        epilog="example:\n  /usr/bin/python3 tools/export_models.py --out models "
               "--param-counts models/param_counts.json \\\n      resnet18 resnet50",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", metavar="MODEL",
                   help="torchvision model names (e.g. resnet50 vgg16)")
    p.add_argument("--all", action="store_true",
                   help="export every classification CNN of the installed torchvision "
                        "(transformers vit_*/swin_*/maxvit_t excluded)")
    p.add_argument("--list", action="store_true", help="print the names --all exports and exit")
    p.add_argument("--out", default=".", metavar="DIR",
                   help="output folder; files are DIR/<name>.onnx (default: .)")
    p.add_argument("--opset", type=int, default=DEFAULT_OPSET,
                   help=f"ONNX opset; torch 1.13 writes 7..17 (default {DEFAULT_OPSET}, "
                        "which exports every model)")
    p.add_argument("--resolution", type=int, metavar="PIXELS",
                   help="input height and width (default: 299 for inception_v3, 224 otherwise)")
    p.add_argument("--batch", type=int, default=DEFAULT_BATCH,
                   help=f"batch of the example input (default {DEFAULT_BATCH}; the batch "
                        "dimension of the graph is symbolic anyway)")
    w = p.add_mutually_exclusive_group()
    w.add_argument("--keep-weights", action="store_true",
                   help="keep the (random, seed 0) weights inline in the model")
    w.add_argument("--external-data", action="store_true",
                   help="write the weights to DIR/<name>.onnx.data beside the model")
    p.add_argument("--param-counts", metavar="FILE",
                   help="write JSON {name: {parameter_bytes, parameters, resolution}} "
                        "(PyTorch's counts of model.parameters())")
    p.add_argument("-j", "--jobs", type=int, default=1,
                   help="export this many models in parallel processes (default 1)")
    p.add_argument("-v", "--verbose", action="store_true", help="show torch's export warnings")
    args = p.parse_args(argv)

    if args.list:
        print("\n".join(classification_model_names()))
        return 0
    known = classification_model_names()
    names = list(known) if args.all else []
    for n in args.models:
        if n not in names:
            names.append(n)
    if not names:
        p.error("name at least one model, or use --all")
    unknown = [n for n in names if n not in known]
    if unknown:
        import torchvision.models as tvm
        really_unknown = [n for n in unknown if not callable(getattr(tvm, n, None))]
        if really_unknown:
            p.error(f"unknown model(s): {', '.join(really_unknown)} (see --list)")
    if not 7 <= args.opset <= 17:
        p.error("--opset must be between 7 and 17 for torch 1.13's exporter")

    weights = "inline" if args.keep_weights else "external" if args.external_data else "strip"
    t0 = time.monotonic()
    results = export_many(names, args.out, jobs=args.jobs, callback=_print_result,
                          opset=args.opset, resolution=args.resolution, weights=weights,
                          batch=args.batch, verbose=args.verbose)
    failed = [r for r in results if "error" in r]
    print(f"{len(results) - len(failed)} exported, {len(failed)} failed, "
          f"{time.monotonic() - t0:.1f} s in all", flush=True)

    if args.param_counts:
        counts = {}  # this run's models only: the file is rewritten, never merged
        for r in results:
            if "error" not in r:
                counts[r["name"]] = {"parameter_bytes": r["parameter_bytes"],
                                     "parameters": r["parameters"],
                                     "resolution": r["resolution"]}
        os.makedirs(os.path.dirname(os.path.abspath(args.param_counts)), exist_ok=True)
        with open(args.param_counts, "w") as f:
            json.dump(dict(sorted(counts.items())), f, indent=2, sort_keys=True)
            f.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
