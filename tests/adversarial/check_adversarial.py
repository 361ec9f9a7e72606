#!/usr/bin/python3
"""autovm-plan on a small set of adversarial models: each must be refused with its documented
exit code and a message that names the fault, never a crash, a hang or a leak of file bytes.

usage: check_adversarial.py AUTOVM_PLAN

The models are built here, in a temporary folder, at test time: symlinks and FIFOs cannot be
committed, and the rest are a few lines each. CASES lists every one with the exit code and the
words its message must contain (written by hand from autovm-plan --help's exit codes: 2 bad
usage, 3 unreadable model, 4 invalid model). Each run has a 60 s limit, so a model that makes
the planner wait (a FIFO) fails instead of hanging the suite. Prints one line per case and
'N passed, M failed'; exits 1 if any failed.
"""
import os
import struct
import subprocess
import sys
import tempfile

import onnx
from onnx import TensorProto, helper

PLAN = sys.argv[1]
# "root:x:0:0:root:" read as two little-endian int64s: what a symlink out once leaked.
SECRET = b"root:x:0:0:root:"
LEAKED = [str(v) for v in struct.unpack("<qq", SECRET)]


def model(nodes, inputs, outputs, initializers=(), name="adversarial"):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def tensor(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def conv_model(in_channels=3, weight_channels=3, input_shape=None):
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, weight_channels, 3, 3],
                           [0.0] * (4 * weight_channels * 9))
    return model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", ["c"], ["y"], name="relu")],
                 [tensor("x", input_shape or [2, in_channels, 8, 8])], [tensor("y", None)], [w])


def reshape_model(location, offset=0, length=16):
    """x [2, 3, 4, 4] -> Reshape by a shape constant kept in external data at `location`."""
    shape = TensorProto()
    shape.name = "shape"
    shape.data_type = TensorProto.INT64
    shape.dims.append(2)
    shape.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        e = shape.external_data.add()
        e.key, e.value = k, v
    return model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                  helper.make_node("Reshape", ["r", "shape"], ["y"], name="reshape")],
                 [tensor("x", [2, 3, 4, 4])], [tensor("y", None)], [shape])


def build(tmp):
    """Writes every model; returns [(name, model path, extra args, exit code, needles)]."""
    folder = os.path.join(tmp, "models")
    outside = os.path.join(tmp, "outside")
    os.makedirs(folder)
    os.makedirs(outside)
    with open(os.path.join(outside, "passwd"), "wb") as f:
        f.write(SECRET)
    with open(os.path.join(folder, "shape.bin"), "wb") as f:
        f.write(struct.pack("<qq", 2, -1))
    with open(os.path.join(folder, "short.bin"), "wb") as f:
        f.write(struct.pack("<q", 2))
    os.symlink(os.path.join(outside, "passwd"), os.path.join(folder, "link_out.bin"))
    os.symlink("shape.bin", os.path.join(folder, "link_in.bin"))
    os.symlink(outside, os.path.join(folder, "sub"))
    os.mkfifo(os.path.join(folder, "fifo.bin"))
    os.mkdir(os.path.join(folder, "dir.bin"))
    os.mkfifo(os.path.join(folder, "fifo.onnx"))
    os.mkdir(os.path.join(folder, "dir.onnx"))

    def save(name, m):
        path = os.path.join(folder, name + ".onnx")
        onnx.save(m, path)
        return path

    cases = []

    def add(name, m, code, *needles, args=(), file=None):
        path = save(name, m) if m is not None else os.path.join(folder, file)
        cases.append((name, path, list(args), code, needles))

    add("cycle", model([helper.make_node("Relu", ["x", "b"], ["a"], name="first"),
                        helper.make_node("Add", ["a", "x"], ["b"], name="second"),
                        helper.make_node("Relu", ["b"], ["y"], name="last")],
                       [tensor("x", [2, 4])], [tensor("y", None)]),
        4, "the graph has a cycle: 'first' (Relu) <- 'second' (Add) <- 'first'")
    add("dangling_input", model([helper.make_node("Add", ["x", "ghost"], ["y"], name="add")],
                                [tensor("x", [2, 4])], [tensor("y", None)]),
        4, "node 'add' (Add) uses 'ghost', which no node, initializer or graph input defines")
    add("channel_mismatch", conv_model(in_channels=3, weight_channels=5),
        4, "node 'conv' (Conv): input has 3 channels but the weight expects 5")
    add("dims_overflow", conv_model(input_shape=[2, 3, 1 << 40, 1 << 40]),
        4, "graph input 'x' with batch 2 has shape [2, 3, 1099511627776, 1099511627776], which is too large")
    add("negative_dims", conv_model(input_shape=[2, 3, -8, 8]),
        4, "graph input 'x' declares a negative dimension -8")
    add("zero_nodes", model([], [tensor("x", [2, 4])], [tensor("x", None)]),
        4, "has a graph with no nodes")
    add("huge_batch", conv_model(input_shape=["batch", 3, 8, 8]),
        4, "graph input 'x' with batch 1152921504606846976 has shape", "which is too large",
        args=["--batch", str(1 << 60)])
    add("external_short", reshape_model("short.bin"), 4,
        "initializer 'shape'", "'short.bin'", "too short")
    add("external_symlink_out", reshape_model("link_out.bin"), 4,
        "initializer 'shape'", "'link_out.bin'", "outside the model's folder")
    add("external_symlinked_folder_out", reshape_model("sub/passwd"), 4,
        "initializer 'shape'", "'sub/passwd'", "outside the model's folder")
    add("external_dotdot", reshape_model("sub/../shape.bin"), 4,
        "'sub/../shape.bin'", "relative path inside the model's folder")
    add("external_fifo", reshape_model("fifo.bin"), 4,
        "initializer 'shape'", "'fifo.bin'", "a FIFO, not a regular file")
    add("external_directory", reshape_model("dir.bin"), 4,
        "initializer 'shape'", "'dir.bin'", "a directory, not a regular file")
    add("model_fifo", None, 3, "fifo.onnx", "not a regular file", file="fifo.onnx")
    add("model_directory", None, 3, "dir.onnx", "Is a directory", file="dir.onnx")
    # The control: a symlink that stays inside the folder is followed, and the model plans.
    add("external_symlink_in", reshape_model("link_in.bin"), 0, "external_symlink_in.onnx (sha256")
    return cases


def main():
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, path, args, code, needles in build(tmp):
            out = os.path.join(tmp, name + ".plan.json")
            try:
                r = subprocess.run([PLAN, path, *args, "-o", out], capture_output=True, text=True,
                                   timeout=60)
                rc, text = r.returncode, r.stderr
            except subprocess.TimeoutExpired:
                rc, text = "timeout", ""
            missing = [n for n in needles if n not in text]
            leaked = [v for v in LEAKED if v in text]
            ok = rc == code and not missing and not leaked
            results.append(ok)
            print(f"{'PASS' if ok else 'FAIL'} {name}: exit {rc} (want {code})")
            if "-v" in sys.argv:
                print("  ", text.strip().splitlines()[0] if text.strip() else "")
            if not ok:
                print("  missing:", missing, "leaked:", leaked, "\n  stderr:", text[-600:])
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
