#!/usr/bin/python3
"""Write AutoVM's hand-built ONNX test models into OUTDIR.

    /usr/bin/python3 tests/models/make_test_models.py OUTDIR [--only NAME ...]

Every model is small and deterministic (the same command writes byte-identical files).
Models are built with onnx.helper, with ir_version and opset_import set by hand; the ONNX
checker is never called (ONNX 1.12's checker rejects IR > 8).  The expected facts of each
model are documented at the top of the function that makes it; tests/models/README.md
lists them.

Needs Debian's python3-onnx (1.12), python3-torch (1.13) and python3-torchvision (0.14):
run it with /usr/bin/python3.  The torch-based models (resnet18_dynamo_style,
inference_export, old_opset9) take a few seconds each.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools"))

import export_models  # noqa: E402  (tools/export_models.py)

PRODUCER = "autovm-make_test_models"
DYNAMO_DOMAINS = [("", 20), ("pkg.onnxscript.torch_lib.common", 1)]


# --------------------------------------------------------------------------- helpers

def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2)."""
    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            b, n = n & 0x7F, n >> 7
            out.append(b | (0x80 if n else 0))
            if not n:
                return bytes(out)
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def set_node_metadata(node: onnx.NodeProto, entries: list[tuple[str, str]]) -> None:
    """Add NodeProto.metadata_props (field 9, ONNX >= 1.16) entries, as the dynamo exporter
    writes them.  ONNX 1.12's classes do not know the field: it is kept as an unknown field,
    exactly as in a file that torch 2.x writes and ONNX 1.12 reads."""
    extra = b"".join(_field(9, _field(1, k.encode()) + _field(2, v.encode()))
                     for k, v in entries)
    node.MergeFromString(extra)


def _rng_tensor(rng: np.random.RandomState, name: str, shape, scale: float = 0.1):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _i64(name: str, values, scalar: bool = False):
    arr = np.array(values, dtype=np.int64)
    if scalar:
        arr = arr.reshape(())
    return numpy_helper.from_array(arr, name)


def _model(graph, opsets, ir_version: int, **metadata) -> onnx.ModelProto:
    model = helper.make_model(graph, producer_name=PRODUCER, producer_version="1",
                              opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = ir_version
    for k, v in metadata.items():
        helper.set_model_props(model, {**{p.key: p.value for p in model.metadata_props}, k: v})
    return model


def _save(model: onnx.ModelProto, path: str) -> None:
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def _strip(model: onnx.ModelProto) -> onnx.ModelProto:
    export_models.strip_weights(model)
    return model


def _torch_export(module, x, path, *, opset, training, do_constant_folding,
                  input_names=("input",), output_names=("logits",)):
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, x, path, training=training,
                          do_constant_folding=do_constant_folding, opset_version=opset,
                          input_names=list(input_names), output_names=list(output_names),
                          dynamic_axes={input_names[0]: {0: "batch"},
                                        output_names[0]: {0: "batch"}})
    return onnx.load(path)


def _count(model: onnx.ModelProto) -> dict:
    """Float initializer elements, and the same without BatchNormalization running stats."""
    stats = {i for n in model.graph.node if n.op_type == "BatchNormalization"
             for i in n.input[3:5]}
    floats = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}
    total = params = 0
    for t in model.graph.initializer:
        if t.data_type in floats:
            n = int(np.prod(t.dims, dtype=np.int64))
            total += n
            if t.name not in stats:
                params += n
    return {"float_elements": total, "parameter_elements": params}


# --------------------------------------------------------------------------- models

def _small_cnn_weights(seed: int) -> list:
    """Conv(3->8, 3x3) + BN(8) + Gemm(8->10) initializers shared by the small test CNNs."""
    rng = np.random.RandomState(seed)
    return [
        _rng_tensor(rng, "conv.weight", (8, 3, 3, 3)),
        _rng_tensor(rng, "conv.bias", (8,)),
        numpy_helper.from_array(np.ones(8, np.float32), "bn.weight"),
        numpy_helper.from_array(np.zeros(8, np.float32), "bn.bias"),
        numpy_helper.from_array(np.zeros(8, np.float32), "bn.running_mean"),
        numpy_helper.from_array(np.ones(8, np.float32), "bn.running_var"),
        _rng_tensor(rng, "fc.weight", (10, 8)),
        _rng_tensor(rng, "fc.bias", (10,)),
    ]


def make_dynamo_style(outdir: str) -> None:
    """dynamo_style.onnx: a small CNN written the way PyTorch 2.x's dynamo exporter writes it.

    IR 10; opset_import {"": 20, "pkg.onnxscript.torch_lib.common": 1} (the second domain
    is imported but unused, as dynamo exports do).  Nodes named node_<Op>_<i>, each with a
    node metadata_props entry "pkg.torch.onnx.name_scopes" (NodeProto field 9, unknown to
    ONNX 1.12).  Weights inline (deterministic, numpy RandomState(0)).  NO value_info: the
    planner must infer shapes itself through the opset-18 op forms.

      x [s0, 3, 32, 32] float                      (symbolic batch dim 's0')
      node_Conv_0                3x3 pad 1, 3->8   -> convolution      [s0, 8, 32, 32]
      node_BatchNormalization_1  training_mode=1, 3 outputs
                                 -> batch_norm [s0,8,32,32], batch_norm_1 [8], batch_norm_2 [8]
      node_Relu_2                                  -> relu             [s0, 8, 32, 32]
      node_MaxPool_3             2x2 stride 2      -> max_pool2d       [s0, 8, 16, 16]
      node_Split_4               axis 1, num_outputs=2 (opset 18 form)
                                                   -> split_0, split_1 [s0, 4, 16, 16] each
      node_Concat_5              axis 1            -> cat              [s0, 8, 16, 16]
      node_ReduceMean_6          axes as an INPUT (initializer [2, 3]), keepdims 1
                                                   -> mean             [s0, 8, 1, 1]
      node_Shape_7                                 -> val_shape        [4] int64
      node_Constant_8            value=int64 scalar 0 -> val_zero      [] int64
      node_Gather_9              axis 0            -> val_batch        [] int64
      node_Unsqueeze_10          axes input [0]    -> val_batch_1d     [1] int64
      node_Constant_11           value_ints=[-1]   -> val_neg1         [1] int64
      node_Concat_12             axis 0            -> val_new_shape    [2] int64 = [s0, -1]
      node_Reshape_13                              -> view             [s0, 8]
      node_Cast_14               to FLOAT (a no-op cast, as dynamo emits) -> _to_copy [s0, 8]
      node_Expand_15             shape initializer [1, 8] -> expand    [s0, 8]
      node_Gemm_16               transB=1, 8->10   -> linear           [s0, 10]
      output: linear [s0, 10]

    Expected: output shape at batch 4 = [4, 10].
    Parameters (trainable) = 330 elements = 1,320 bytes:
      conv.weight 216 + conv.bias 8 + bn.weight 8 + bn.bias 8 + fc.weight 80 + fc.bias 10.
    Float initializers incl. BN running stats (bn.running_mean 8, bn.running_var 8) = 346.
    Integer initializers (shape constants): val_axes [2], val_expand_shape [2], val_unsq_axes [1].
    17 nodes.
    """
    inits = _small_cnn_weights(seed=0) + [
        _i64("val_axes", [2, 3]),
        _i64("val_unsq_axes", [0]),
        _i64("val_expand_shape", [1, 8]),
    ]
    spec = [  # (op, inputs, outputs, attrs, name scope)
        ("Conv", ["x", "conv.weight", "conv.bias"], ["convolution"],
         dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1],
              group=1), "conv"),
        ("BatchNormalization",
         ["convolution", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"],
         ["batch_norm", "batch_norm_1", "batch_norm_2"],
         dict(epsilon=1e-5, momentum=0.9, training_mode=1), "bn"),
        ("Relu", ["batch_norm"], ["relu"], {}, "relu"),
        ("MaxPool", ["relu"], ["max_pool2d"],
         dict(kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0], dilations=[1, 1],
              ceil_mode=0), "pool"),
        ("Split", ["max_pool2d"], ["split_0", "split_1"], dict(axis=1, num_outputs=2), ""),
        ("Concat", ["split_0", "split_1"], ["cat"], dict(axis=1), ""),
        ("ReduceMean", ["cat", "val_axes"], ["mean"], dict(keepdims=1), ""),
        ("Shape", ["mean"], ["val_shape"], dict(start=0), ""),
        ("Constant", [], ["val_zero"],
         dict(value=_i64("", 0, scalar=True)), ""),
        ("Gather", ["val_shape", "val_zero"], ["val_batch"], dict(axis=0), ""),
        ("Unsqueeze", ["val_batch", "val_unsq_axes"], ["val_batch_1d"], {}, ""),
        ("Constant", [], ["val_neg1"], dict(value_ints=[-1]), ""),
        ("Concat", ["val_batch_1d", "val_neg1"], ["val_new_shape"], dict(axis=0), ""),
        ("Reshape", ["mean", "val_new_shape"], ["view"], dict(allowzero=0), ""),
        ("Cast", ["view"], ["_to_copy"], dict(to=TensorProto.FLOAT), ""),
        ("Expand", ["_to_copy", "val_expand_shape"], ["expand"], {}, ""),
        ("Gemm", ["expand", "fc.weight", "fc.bias"], ["linear"],
         dict(alpha=1.0, beta=1.0, transB=1), "fc"),
    ]
    nodes = []
    for i, (op, ins, outs, attrs, scope) in enumerate(spec):
        node = helper.make_node(op, ins, outs, name=f"node_{op}_{i}", **attrs)
        set_node_metadata(node, [("pkg.torch.onnx.name_scopes", repr(["", scope] if scope else [""]))])
        nodes.append(node)
    graph = helper.make_graph(
        nodes, "main_graph",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["s0", 3, 32, 32])],
        [helper.make_tensor_value_info("linear", TensorProto.FLOAT, ["s0", 10])],
        initializer=inits)
    model = _model(graph, DYNAMO_DOMAINS, 10)
    _save(model, os.path.join(outdir, "dynamo_style.onnx"))


# Newer op forms.  Reduce ops other than ReduceSum took axes as an input from opset 18.
_REDUCE_OPS = {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
               "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ReduceSum"}
_VALUE_NAMES = {"Conv": "convolution", "BatchNormalization": "batch_norm", "Relu": "relu",
                "MaxPool": "max_pool2d", "Add": "add", "GlobalAveragePool": "mean",
                "Gemm": "linear", "Reshape": "view", "Shape": "val_shape",
                "Gather": "val_gather", "Unsqueeze": "val_unsqueeze", "Concat": "val_concat",
                "Constant": "val_constant"}


def _pop_attr(node: onnx.NodeProto, name: str):
    for i, a in enumerate(node.attribute):
        if a.name == name:
            value = helper.get_attribute_value(a)
            del node.attribute[i]
            return value
    return None


def modernize_ops(graph: onnx.GraphProto, new_inits: list) -> None:
    """Rewrite attribute forms into the opset-18..20 input forms, in place.

    Reduce* axes, Squeeze/Unsqueeze axes, Split split, Pad pads/value and Clip min/max move
    from attributes to (int64 / float) initializer inputs; Split without explicit sizes
    gets num_outputs (opset 18)."""
    counter = [0]

    def const(values, dtype=np.int64, scalar=False):
        counter[0] += 1
        arr = np.array(values, dtype=dtype)
        if scalar:
            arr = arr.reshape(())
        t = numpy_helper.from_array(arr, f"val_modernized_{counter[0]}")
        new_inits.append(t)
        return t.name

    for node in graph.node:
        op = node.op_type
        if op in _REDUCE_OPS or op in ("Squeeze", "Unsqueeze"):
            axes = _pop_attr(node, "axes")
            if axes is not None:  # attribute form: the data is the only input
                node.input.append(const(list(axes)))
        elif op == "Split":
            split = _pop_attr(node, "split")
            if split is not None:
                node.input.append(const(list(split)))
            elif len(node.input) < 2 or not node.input[1]:
                node.attribute.append(helper.make_attribute("num_outputs", len(node.output)))
        elif op == "Pad":
            pads = _pop_attr(node, "pads")
            value = _pop_attr(node, "value")
            if pads is not None:
                node.input.append(const(list(pads)))
                if value is not None:
                    node.input.append(const(value, np.float32, scalar=True))
        elif op == "Clip":
            lo = _pop_attr(node, "min")
            hi = _pop_attr(node, "max")
            if lo is not None or hi is not None:
                node.input.append(const(lo, np.float32, scalar=True) if lo is not None else "")
                node.input.append(const(hi, np.float32, scalar=True) if hi is not None else "")


def _flatten_to_reshape_chain(graph: onnx.GraphProto, new_inits: list) -> None:
    """Replace every Flatten(axis=1) by Shape -> Gather(0) -> Unsqueeze -> Concat(-1) -> Reshape."""
    nodes = []
    k = 0
    for node in graph.node:
        if node.op_type != "Flatten":
            nodes.append(node)
            continue
        axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 1)
        if axis != 1:
            raise ValueError(f"Flatten with axis={axis} not handled")
        x, y, p = node.input[0], node.output[0], f"flatten{k}"
        k += 1
        idx = _i64(f"{p}_idx0", 0, scalar=True)
        axes = _i64(f"{p}_axes0", [0])
        neg1 = _i64(f"{p}_neg1", [-1])
        new_inits.extend([idx, axes, neg1])
        chain = [
            helper.make_node("Shape", [x], [f"{p}_shape"]),
            helper.make_node("Gather", [f"{p}_shape", idx.name], [f"{p}_batch"], axis=0),
            helper.make_node("Unsqueeze", [f"{p}_batch", axes.name], [f"{p}_batch_1d"]),
            helper.make_node("Concat", [f"{p}_batch_1d", neg1.name], [f"{p}_new_shape"], axis=0),
            helper.make_node("Reshape", [x, f"{p}_new_shape"], [y]),
        ]
        for c in chain:
            c.name = node.name  # the old name; renamed with the others later
        nodes.extend(chain)
    del graph.node[:]
    graph.node.extend(nodes)


def _name_scopes(old_name: str) -> str:
    """'/layer1/layer1.0/conv1/Conv' -> "['', 'layer1', 'layer1.0', 'conv1']"."""
    parts = [p for p in old_name.split("/") if p][:-1]
    return repr([""] + parts)


def dynamo_rewrite(model: onnx.ModelProto) -> onnx.ModelProto:
    """Rewrite a TorchScript-exporter model into the dynamo exporter's style (IR 10, opset 20)."""
    g = model.graph
    new_inits: list = []
    _flatten_to_reshape_chain(g, new_inits)
    modernize_ops(g, new_inits)
    g.initializer.extend(new_inits)

    # Rename: graph input/output as dynamo names them, intermediates after their aten op.
    keep = {t.name for t in g.initializer}
    rename = {g.input[0].name: "x", g.output[0].name: "linear"}
    used: dict[str, int] = {}
    for node in g.node:
        for j, out in enumerate(node.output):
            if out in rename or not out:
                continue
            base = _VALUE_NAMES.get(node.op_type, "val_" + node.op_type.lower())
            n = used.get(base, 0)
            used[base] = n + 1
            rename[out] = base if n == 0 else f"{base}_{n}"
    for i, node in enumerate(g.node):
        old = node.name
        node.name = f"node_{node.op_type}_{i}"
        for j, v in enumerate(node.input):
            if v in rename and v not in keep:
                node.input[j] = rename[v]
        for j, v in enumerate(node.output):
            if v in rename:
                node.output[j] = rename[v]
        set_node_metadata(node, [("pkg.torch.onnx.name_scopes", _name_scopes(old))])
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        vi.name = rename.get(vi.name, vi.name)
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param == "batch":
                d.dim_param = "s0"
    g.name = "main_graph"

    del model.opset_import[:]
    model.opset_import.extend([helper.make_opsetid(d, v) for d, v in DYNAMO_DOMAINS])
    model.ir_version = 10
    model.producer_name = PRODUCER
    model.producer_version = "1"
    return model


def make_resnet18_dynamo_style(outdir: str) -> None:
    """resnet18_dynamo_style.onnx: torchvision resnet18 (training export, opset 17, stripped,
    224x224) rewritten in the dynamo exporter's style.

    IR 10, opset_import {"": 20, "pkg.onnxscript.torch_lib.common": 1}.  Every node renamed
    node_<Op>_<i> (i = its index in the graph) with its old TorchScript name kept as
    "pkg.torch.onnx.name_scopes" node metadata (NodeProto field 9, unknown to ONNX 1.12).
    The Flatten is replaced by Shape -> Gather -> Unsqueeze -> Concat(-1) -> Reshape (int64
    initializers flatten0_idx0, flatten0_axes0, flatten0_neg1).  resnet18 has no ReduceMean/
    Squeeze/Unsqueeze/Split/Pad/Clip of its own (modernize_ops would convert them).
    Input x [s0, 3, 224, 224], output linear [s0, 1000].  value_info (108 entries) for every
    intermediate tensor of the original graph (from ONNX 1.12 shape inference on the opset-17
    original, batch dim renamed 's0'), as dynamo exports carry it; the four int64 values of
    the new flatten chain have none.  Weights stripped.

    Expected: 73 nodes (69 of the original minus Flatten plus 5); BatchNormalization x20
    with training_mode=1 and 3 outputs.  Output shape at batch 4 = [4, 1000].
    Parameters = 11,689,512 elements = 46,758,048 bytes (same as torchvision's resnet18);
    float initializers incl. BN running stats = 11,699,112 elements.
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "resnet18.onnx")
        export_models.export_model("resnet18", path, opset=17)
        model = onnx.load(path)
    model = onnx.shape_inference.infer_shapes(model)
    model = dynamo_rewrite(model)
    _save(model, os.path.join(outdir, "resnet18_dynamo_style.onnx"))


def _small_cnn_graph(name: str):
    """Conv(3->8, 3x3, pad 1) -> BN (training) -> Relu -> GlobalAveragePool -> Flatten -> Gemm(8->10)."""
    inits = _small_cnn_weights(seed=1)
    nodes = [
        helper.make_node("Conv", ["input", "conv.weight", "conv.bias"], ["conv_out"],
                         name="Conv_0", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["conv_out", "bn.weight", "bn.bias",
                                                "bn.running_mean", "bn.running_var"],
                         ["bn_out", "bn_mean_out", "bn_var_out"], name="BatchNormalization_1",
                         epsilon=1e-5, momentum=0.9, training_mode=1),
        helper.make_node("Relu", ["bn_out"], ["relu_out"], name="Relu_2"),
        helper.make_node("GlobalAveragePool", ["relu_out"], ["gap_out"],
                         name="GlobalAveragePool_3"),
        helper.make_node("Flatten", ["gap_out"], ["flat_out"], name="Flatten_4", axis=1),
        helper.make_node("Gemm", ["flat_out", "fc.weight", "fc.bias"], ["logits"],
                         name="Gemm_5", alpha=1.0, beta=1.0, transB=1),
    ]
    return helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        initializer=inits)


def make_external(outdir: str) -> None:
    """external_weights.onnx + external_weights.onnx.data, and external_missing.onnx.

    IR 8, opset 17.  input [batch, 3, 16, 16] -> Conv 3->8 3x3 pad 1 -> BatchNormalization
    (training_mode=1, 3 outputs) -> Relu -> GlobalAveragePool -> Flatten -> Gemm 8->10 ->
    logits [batch, 10].  Every initializer (all are float) is external:
    data_location=EXTERNAL with location/offset/length entries into
    "external_weights.onnx.data" (1,384 bytes = 346 floats; onnx.save with
    save_as_external_data=True, size_threshold=0).

    external_missing.onnx is the same graph and the same external references, but to
    "external_missing.onnx.data", which does not exist.  The planner never reads float
    weights, so it must plan both the same way.

    Expected: output shape at batch 4 = [4, 10].  Parameters = 330 elements = 1,320 bytes
    (conv 216+8, bn 8+8, fc 80+10); float initializers incl. BN running stats = 346.
    6 nodes.
    """
    model = _model(_small_cnn_graph("external_weights"), [("", 17)], 8)
    path = os.path.join(outdir, "external_weights.onnx")
    data = "external_weights.onnx.data"
    if os.path.exists(os.path.join(outdir, data)):
        os.remove(os.path.join(outdir, data))  # onnx.save appends to an existing data file
    missing = onnx.ModelProto()
    missing.CopyFrom(model)
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location=data, size_threshold=0)

    # Same references, to a data file that is never written.
    written = onnx.load(path, load_external_data=False)
    for t in written.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "external_missing.onnx.data"
    written.graph.name = "external_missing"
    _save(written, os.path.join(outdir, "external_missing.onnx"))
    stale = os.path.join(outdir, "external_missing.onnx.data")
    if os.path.exists(stale):
        os.remove(stale)


def make_inference_export(outdir: str) -> None:
    """inference_export.onnx: torchvision resnet18 exported for INFERENCE: model.eval(),
    TrainingMode.EVAL, do_constant_folding=True (torch.onnx.export's default), opset 17,
    IR 8, input [batch, 3, 224, 224], output logits [batch, 1000], weights stripped.

    Batch norm is folded into the convolutions: no BatchNormalization node, every Conv has a
    bias.  49 nodes: Conv x20, Relu x17, MaxPool, Add x8, GlobalAveragePool, Flatten, Gemm.

    Expected: float initializer elements = 11,689,512 - 9,600 + 4,800 = 11,684,712
    (the 20 BNs' 4,800 gammas and 4,800 betas are gone; 20 conv biases add 4,800);
    torchvision's parameter count for resnet18 is 11,689,512.  Output at batch 4 = [4, 1000].
    A training planner may accept it (it is a valid CNN) or warn that it is an inference
    export; it must not crash.
    """
    import torch

    model = export_models.build_model("resnet18").eval()
    # Freshly initialised BNs (gamma 1, beta 0, mean 0, var 1) fold into identical all-zero
    # conv biases, which torch's initializer de-duplication then shares through Identity
    # nodes.  Random BN statistics, as in a trained model, keep every folded bias distinct.
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with tempfile.TemporaryDirectory() as tmp:
        proto = _torch_export(model, x, os.path.join(tmp, "m.onnx"), opset=17,
                              training=torch.onnx.TrainingMode.EVAL, do_constant_folding=True)
    _save(_strip(proto), os.path.join(outdir, "inference_export.onnx"))


def make_unsupported_op(outdir: str) -> None:
    """unsupported_op.onnx: a graph with two ops a CNN planner does not support, on its main
    path, so the error can name both: "LSTM" (standard domain) and "Foo" (custom domain
    "com.example", imported at version 1).

    IR 8, opset_import {"": 17, "com.example": 1}.
      input [batch, 3, 8, 8] -> Conv_0 (3->8, 3x3 pad 1) -> Relu_1
      -> Foo_2 (com.example; shape unknown to any schema) -> GlobalAveragePool_3
      -> Flatten_4 -> Unsqueeze_5 (axes [0]) -> LSTM_6 (hidden 16, seq 1)
      -> Squeeze_7 (axes [0, 1]) -> Gemm_8 (16->10) -> logits [batch, 10]
    Weights stripped.  Expected: planning fails with an error naming LSTM and
    com.example Foo (or Foo); nothing else is unsupported.
    """
    def t(name, dims, dtype=TensorProto.FLOAT):
        tensor = TensorProto()
        tensor.name, tensor.data_type = name, dtype
        tensor.dims.extend(dims)
        return tensor

    inits = [t("conv.weight", [8, 3, 3, 3]), t("conv.bias", [8]),
             t("lstm.W", [1, 64, 8]), t("lstm.R", [1, 64, 16]), t("lstm.B", [1, 128]),
             t("fc.weight", [10, 16]), t("fc.bias", [10]),
             _i64("axes0", [0]), _i64("axes01", [0, 1])]
    nodes = [
        helper.make_node("Conv", ["input", "conv.weight", "conv.bias"], ["c"], name="Conv_0",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="Relu_1"),
        helper.make_node("Foo", ["r"], ["f"], name="Foo_2", domain="com.example", alpha=0.5),
        helper.make_node("GlobalAveragePool", ["f"], ["g"], name="GlobalAveragePool_3"),
        helper.make_node("Flatten", ["g"], ["fl"], name="Flatten_4", axis=1),
        helper.make_node("Unsqueeze", ["fl", "axes0"], ["seq"], name="Unsqueeze_5"),
        helper.make_node("LSTM", ["seq", "lstm.W", "lstm.R", "lstm.B"], ["y", "y_h", "y_c"],
                         name="LSTM_6", hidden_size=16, direction="forward"),
        helper.make_node("Squeeze", ["y", "axes01"], ["ys"], name="Squeeze_7"),
        helper.make_node("Gemm", ["ys", "fc.weight", "fc.bias"], ["logits"], name="Gemm_8",
                         transB=1),
    ]
    graph = helper.make_graph(
        nodes, "unsupported_op",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        initializer=inits)
    model = _model(graph, [("", 17), ("com.example", 1)], 8)
    _save(model, os.path.join(outdir, "unsupported_op.onnx"))


def make_old_opset9(outdir: str) -> None:
    """old_opset9.onnx: a small CNN exported by torch 1.13's TorchScript exporter with
    opset_version=9 in training mode (TrainingMode.TRAINING, do_constant_folding=False),
    weights stripped; IR 4 (what torch writes for opset 9).

      input [batch, 3, 16, 16]
      Conv 3->8 3x3 pad 1        [batch, 8, 16, 16]
      BatchNormalization (training: opset-9 form, 5 outputs, no training_mode attribute)
      ReLU6                      Clip with min/max ATTRIBUTES (opset < 11)
      ZeroPad2d(1)               Pad with pads/value ATTRIBUTES (opset < 11) [batch, 8, 18, 18]
      Conv 8->16 3x3 no pad      [batch, 16, 16, 16]
      x[:, :8]                   Slice with starts/ends/axes ATTRIBUTES (opset < 10)
                                 [batch, 8, 16, 16]
      Upsample x2 nearest        Upsample (opset 9; scales as an input) [batch, 8, 32, 32]
      MaxPool 2                  [batch, 8, 16, 16]
      mean over (2, 3)           ReduceMean with axes ATTRIBUTE, keepdims 0 [batch, 8]
      Dropout(0.5)               Dropout (opset-9 form: ratio attribute, 2 outputs)
      Linear 8->10               Gemm -> logits [batch, 10]

    The Upsample scales come from Concat(Constant, Constant), not from an initializer.
    14 nodes: Conv x2, BatchNormalization, Clip, Pad, Slice, Constant x2, Concat, Upsample,
    MaxPool, ReduceMean, Dropout, Gemm.

    Expected: output shape at batch 4 = [4, 10].  Parameters = 1,498 elements = 5,992 bytes
    (conv1 216+8, bn1 8+8, conv2 1,152+16, fc 80+10); float initializers incl. BN running
    stats = 1,514 elements.
    """
    import torch
    from torch import nn

    class Old(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
            self.bn1 = nn.BatchNorm2d(8)
            self.relu6 = nn.ReLU6()
            self.pad = nn.ZeroPad2d(1)
            self.conv2 = nn.Conv2d(8, 16, 3)
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.pool = nn.MaxPool2d(2)
            self.drop = nn.Dropout(0.5)
            self.fc = nn.Linear(8, 10)

        def forward(self, x):
            x = self.pad(self.relu6(self.bn1(self.conv1(x))))
            x = self.conv2(x)[:, :8]
            x = self.pool(self.up(x))
            x = x.mean(dim=(2, 3))
            return self.fc(self.drop(x))

    torch.manual_seed(0)
    module = Old().train()
    x = torch.randn(2, 3, 16, 16)
    with tempfile.TemporaryDirectory() as tmp:
        proto = _torch_export(module, x, os.path.join(tmp, "m.onnx"), opset=9,
                              training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False)
    _save(_strip(proto), os.path.join(outdir, "old_opset9.onnx"))


MAKERS = {
    "dynamo_style": make_dynamo_style,
    "resnet18_dynamo_style": make_resnet18_dynamo_style,
    "external": make_external,
    "inference_export": make_inference_export,
    "unsupported_op": make_unsupported_op,
    "old_opset9": make_old_opset9,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Write AutoVM's hand-built ONNX test models (see tests/models/README.md).",
        epilog="Makers: " + ", ".join(MAKERS) + " ('external' writes external_weights.onnx, "
               "its .data file and external_missing.onnx).")
    ap.add_argument("outdir", metavar="OUTDIR", help="folder to write the models into")
    ap.add_argument("--only", nargs="+", choices=sorted(MAKERS), metavar="NAME",
                    help="make only these (default: all)")
    ap.add_argument("--facts", action="store_true",
                    help="print IR, opsets, node and parameter counts of every model in OUTDIR")
    args = ap.parse_args(argv)

    os.makedirs(args.outdir, exist_ok=True)
    import torch
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    for name in args.only or MAKERS:
        MAKERS[name](args.outdir)
    for f in sorted(os.listdir(args.outdir)):
        path = os.path.join(args.outdir, f)
        if not args.facts or not f.endswith(".onnx"):
            continue
        m = onnx.load(path, load_external_data=False)
        c = _count(m)
        print(f"{f:<28} IR {m.ir_version:<2} opset "
              f"{','.join(f'{o.domain or chr(34)*2}:{o.version}' for o in m.opset_import):<40} "
              f"nodes {len(m.graph.node):<4} params {c['parameter_elements']:>10,}  "
              f"float elements {c['float_elements']:>10,}  {os.path.getsize(path):>8,} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
