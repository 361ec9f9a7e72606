#!/usr/bin/python3
"""Write a synthetic ONNX model: a chain of N 3x3 convolutions (for planner speed benchmarks).

    input [batch, C, S, S]  (C=16, S=32 by default; 'batch' is symbolic)
    -> Conv_0 -> Relu_0 -> Conv_1 -> Relu_1 -> ... -> Conv_{N-1}     (N convs, N-1 Relus)
    -> GlobalAveragePool -> Flatten -> Gemm (10 classes) -> logits [batch, 10]

Every Conv is 3x3, C -> C channels, stride 1, pads 1 (spatial size stays S x S), with weight
W [C, C, 3, 3] and bias B [C].  The Gemm has weight [10, C] (transB=1) and bias [10].
Weights are stripped (initializers carry dims and data_type only).  opset 17, IR 8.

Parameter elements: N * (C*C*9 + C) + 10*C + 10   (C=16: N * 2320 + 170).

The file is written directly in protobuf's wire format from prebuilt templates (byte-identical
to building the ModelProto message by message, see build_chain_reference), so 100,000
convolutions take about a second.  Output is deterministic.

Example: /usr/bin/python3 tools/gen_chain.py 100000 /tmp/chain100k.onnx
"""

from __future__ import annotations

import argparse
import sys
import time


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


_VARINTS = [_varint(i) for i in range(1 << 14)]


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _parts(n: int, channels: int, size: int, classes: int):
    """Template messages shared by the fast and the reference builders."""
    from onnx import TensorProto, helper

    if n < 1:
        raise ValueError("the chain needs at least one convolution")
    conv = helper.make_node("Conv", ["", "", ""], [""], kernel_shape=[3, 3],
                            pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1)
    w = TensorProto()
    w.data_type = TensorProto.FLOAT
    w.dims.extend([channels, channels, 3, 3])
    b = TensorProto()
    b.data_type = TensorProto.FLOAT
    b.dims.append(channels)
    tail = [
        helper.make_node("GlobalAveragePool", ["LAST"], ["gap_out"], name="GlobalAveragePool_0"),
        helper.make_node("Flatten", ["gap_out"], ["flat_out"], name="Flatten_0", axis=1),
        helper.make_node("Gemm", ["flat_out", "fc.weight", "fc.bias"], ["logits"],
                         name="Gemm_0", alpha=1.0, beta=1.0, transB=1),
    ]
    tail[0].input[0] = _chain_output(n)
    fc = []
    for name, dims in (("fc.weight", [classes, channels]), ("fc.bias", [classes])):
        t = TensorProto()
        t.name = name
        t.data_type = TensorProto.FLOAT
        t.dims.extend(dims)
        fc.append(t)
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                            ["batch", channels, size, size])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])]
    return conv, w, b, tail, fc, inputs, outputs


def _chain_output(n: int) -> str:
    return f"conv{n - 1}_out"


def _model_shell(n: int):
    import onnx

    model = onnx.ModelProto()
    model.ir_version = 8
    model.producer_name = "autovm-gen_chain"
    model.producer_version = "1"
    op = model.opset_import.add()
    op.domain = ""
    op.version = 17
    p = model.metadata_props.add()
    p.key, p.value = "autovm.weights", "stripped"
    return model


def build_chain_reference(n: int, channels: int = 16, size: int = 32, classes: int = 10):
    """The same model built message by message (slow; used to check serialize_chain)."""
    conv, w_tpl, b_tpl, tail, fc, inputs, outputs = _parts(n, channels, size, classes)
    relu = __import__("onnx").helper.make_node("Relu", [""], [""])
    model = _model_shell(n)
    g = model.graph
    x = "input"
    for i in range(n):
        c = g.node.add()
        c.CopyFrom(conv)
        c.name = f"Conv_{i}"
        c.input[0], c.input[1], c.input[2] = x, f"conv{i}.weight", f"conv{i}.bias"
        c.output[0] = x = f"conv{i}_out"
        if i + 1 < n:
            r = g.node.add()
            r.CopyFrom(relu)
            r.name = f"Relu_{i}"
            r.input[0] = x
            r.output[0] = x = f"relu{i}_out"
    g.node.extend(tail)
    g.name = f"chain_convs_{n}"
    for i in range(n):
        for tpl, suffix in ((w_tpl, "weight"), (b_tpl, "bias")):
            t = g.initializer.add()
            t.CopyFrom(tpl)
            t.name = f"conv{i}.{suffix}"
    g.initializer.extend(fc)
    g.input.extend(inputs)
    g.output.extend(outputs)
    return model


def serialize_chain(n: int, channels: int = 16, size: int = 32, classes: int = 10) -> bytes:
    """The serialized ModelProto, written field by field (the protobuf wire format).

    Byte-identical to build_chain_reference(...).SerializeToString(), and several times faster:
    100,000 convolutions take well under two seconds.
    """
    import onnx

    conv, w_tpl, b_tpl, tail, fc, inputs, outputs = _parts(n, channels, size, classes)
    # NodeProto fields: input=1, output=2, name=3, op_type=4, attribute=5.
    conv_tail = _field(4, b"Conv") + b"".join(_field(5, a.SerializeToString())
                                             for a in conv.attribute)
    relu_op = _field(4, b"Relu")
    w_head = w_tpl.SerializeToString()  # dims=1, data_type=2; then name=8
    b_head = b_tpl.SerializeToString()
    # Hot loop: varints of lengths below 2**14 come from a table, tags are constants.
    v = _VARINTS
    nodes = []
    inits = []
    x = b"input"
    for i in range(n):
        si = str(i).encode()
        wn, bn, y = b"conv" + si + b".weight", b"conv" + si + b".bias", b"conv" + si + b"_out"
        name = b"Conv_" + si
        node = (b"\x0a" + v[len(x)] + x + b"\x0a" + v[len(wn)] + wn + b"\x0a" + v[len(bn)] + bn
                + b"\x12" + v[len(y)] + y + b"\x1a" + v[len(name)] + name + conv_tail)
        nodes.append(b"\x0a" + v[len(node)] + node)
        t = w_head + b"\x42" + v[len(wn)] + wn
        inits.append(b"\x2a" + v[len(t)] + t)
        t = b_head + b"\x42" + v[len(bn)] + bn
        inits.append(b"\x2a" + v[len(t)] + t)
        x = y
        if i + 1 < n:
            y = b"relu" + si + b"_out"
            name = b"Relu_" + si
            node = (b"\x0a" + v[len(x)] + x + b"\x12" + v[len(y)] + y
                    + b"\x1a" + v[len(name)] + name + relu_op)
            nodes.append(b"\x0a" + v[len(node)] + node)
            x = y
    f = _field
    # GraphProto fields: node=1, name=2, initializer=5, input=11, output=12.
    graph = (b"".join(nodes)
             + onnx.GraphProto(node=tail).SerializeToString()
             + onnx.GraphProto(name=f"chain_convs_{n}").SerializeToString()
             + b"".join(inits)
             + onnx.GraphProto(initializer=fc, input=inputs, output=outputs).SerializeToString())
    # ModelProto fields: ir_version=1, producer_name=2, producer_version=3, graph=7,
    # opset_import=8, metadata_props=14.
    shell = _model_shell(n)
    head = onnx.ModelProto(ir_version=shell.ir_version, producer_name=shell.producer_name,
                           producer_version=shell.producer_version).SerializeToString()
    rest = onnx.ModelProto(opset_import=shell.opset_import,
                           metadata_props=shell.metadata_props).SerializeToString()
    return head + f(7, graph) + rest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Write a chain of N 3x3 convolutions (Relu between each pair) followed by "
                    "GlobalAveragePool, Flatten and Gemm as a stripped ONNX model "
                    "(opset 17, IR 8).",
        epilog="Parameter elements: N*(C*C*9+C) + 10*C + 10.")
    ap.add_argument("n", type=int, metavar="N", help="number of convolutions (>= 1)")
    ap.add_argument("out", metavar="OUT", help="output .onnx path")
    ap.add_argument("--channels", type=int, default=16, help="channels of every conv (default 16)")
    ap.add_argument("--size", type=int, default=32, help="input height and width (default 32)")
    ap.add_argument("-q", "--quiet", action="store_true", help="print nothing")
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error("N must be at least 1")
    if args.channels < 1 or args.size < 1:
        ap.error("--channels and --size must be positive")

    t0 = time.monotonic()
    data = serialize_chain(args.n, args.channels, args.size)
    with open(args.out, "wb") as f:
        f.write(data)
    if not args.quiet:
        print(f"{args.out}: {args.n} convs, {2 * args.n - 1 + 3} nodes, "
              f"{len(data) / 2**20:.1f} MiB, {time.monotonic() - t0:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
