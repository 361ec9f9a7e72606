"""ctypes binding of libautovm's C API (runtime/include/autovm/autovm.h): plan queries, runtimes
(for the adapter's runtime executor, autovm/runtime_executor.py) and the memory pools behind
autovm.allocator. Every call's status is checked; a failure raises LibraryError with the
function's name and autovm_last_error().
"""
import ctypes
import os

from . import locate
from .errors import LibraryError, ToolNotFoundError

API_VERSION = 7  # AUTOVM_API_VERSION of the header this binding follows

TENSOR_KINDS = ("input", "label", "parameter", "buffer", "gradient", "optimizer_state",
                "activation", "activation_grad", "workspace")
# autovm_action_kind, by value: read_remote (5) is after the others, whose numbers stay.
ACTION_KINDS = ("evict", "prefetch", "discard", "recompute", "advise", "read_remote")
STATUS_NAMES = ("OK", "INVALID_ARGUMENT", "IO", "PLAN", "NOT_RESIDENT", "OUT_OF_MEMORY",
                "BACKEND", "STATE")


class TensorInfo(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int32), ("name", ctypes.c_char_p), ("kind", ctypes.c_int),
                ("dtype", ctypes.c_char_p), ("bytes", ctypes.c_int64), ("offset", ctypes.c_int64),
                ("first_step", ctypes.c_int64), ("last_step", ctypes.c_int64),
                ("persistent", ctypes.c_int)]


class StepInfo(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int64), ("op", ctypes.c_char_p), ("phase", ctypes.c_char_p),
                ("node", ctypes.c_char_p),
                ("inputs", ctypes.POINTER(ctypes.c_int32)), ("input_count", ctypes.c_size_t),
                ("outputs", ctypes.POINTER(ctypes.c_int32)), ("output_count", ctypes.c_size_t),
                ("workspace", ctypes.c_int32), ("compute_us", ctypes.c_double)]


class ActionInfo(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("tensor", ctypes.c_int32), ("bytes", ctypes.c_int64),
                ("after_step", ctypes.c_int64), ("ready_before_step", ctypes.c_int64),
                ("source_step", ctypes.c_int64), ("advice", ctypes.c_char_p)]


class PoolOptions(ctypes.Structure):
    _fields_ = [("memory", ctypes.c_int), ("device", ctypes.c_int),
                ("capacity_bytes", ctypes.c_int64), ("free_margin_bytes", ctypes.c_int64),
                ("allow_oversubscribe", ctypes.c_int), ("chunk_bytes", ctypes.c_int64)]


class PoolStats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int64) for name in (
        "allocated_bytes", "peak_allocated_bytes", "resident_bytes", "peak_resident_bytes",
        "capacity_bytes", "allocations", "alloc_calls", "free_calls", "cross_stream_waits",
        "failed_allocations", "last_failed_bytes", "released_bytes", "paged_out_bytes",
        "paged_in_bytes", "limit_bytes", "small_chunk_bytes", "unused_chunk_bytes",
        "in_use_bytes", "peak_in_use_bytes", "pressure_waits", "pressure_wait_us")]


class RuntimeOptions(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_int), ("budget_bytes", ctypes.c_int64),
                ("strict", ctypes.c_int), ("host_arena_cap_bytes", ctypes.c_int64),
                ("mechanism", ctypes.c_int), ("mode", ctypes.c_int), ("device", ctypes.c_int),
                ("free_margin_bytes", ctypes.c_int64), ("allow_oversubscribe", ctypes.c_int),
                ("layout", ctypes.c_int), ("memory", ctypes.c_int), ("pool", ctypes.c_void_p)]


class RuntimeStats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int64) for name in (
        "bytes_to_host", "bytes_to_device", "evictions", "prefetches", "discards", "recomputes",
        "advises", "resident_bytes", "peak_resident_bytes", "violations", "training_steps",
        "initial_offload_bytes")] + [
        ("accounting_only", ctypes.c_int), ("stall_us", ctypes.c_double),
        ("late_prefetches", ctypes.c_int64), ("measured_waits", ctypes.c_int64),
        ("memory_bytes", ctypes.c_int64), ("unbound_actions", ctypes.c_int64),
        ("unbound_bytes", ctypes.c_int64), ("late_requires", ctypes.c_int64),
        ("stale_prefetches", ctypes.c_int64), ("remote_reads", ctypes.c_int64),
        ("remote_read_bytes", ctypes.c_int64), ("host_us", ctypes.c_double),
        ("host_wait_us", ctypes.c_double), ("paging_us", ctypes.c_double)]


BACKENDS = {"host": 0, "cuda": 1}
MECHANISMS = {"plan": 0, "prefetch": 1, "staged": 2, "mapped": 3}
MODES = {"plan": 0, "demand_paging": 1, "resident": 2}
MEMORY_TRAINER = 1


def library_path(path=None):
    """(libautovm's path, how it was found): `path`, else the search of autovm/locate.py."""
    return locate.library(path)


_loaded = {}


class Library:
    """libautovm loaded once per path; use Library.get()."""

    def __init__(self, path):
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise ToolNotFoundError(f"cannot load libautovm from {path}: {e}") from None
        self.path = path
        self._lib = lib
        P = ctypes.c_void_p
        sig = {
            "autovm_version": ([], ctypes.c_int),
            "autovm_last_error": ([], ctypes.c_char_p),
            "autovm_plan_load": ([ctypes.c_char_p, ctypes.POINTER(P)], ctypes.c_int),
            "autovm_plan_free": ([P], None),
            "autovm_plan_tensor_count": ([P, ctypes.POINTER(ctypes.c_int32)], ctypes.c_int),
            "autovm_plan_step_count": ([P, ctypes.POINTER(ctypes.c_int64)], ctypes.c_int),
            "autovm_plan_action_count": ([P, ctypes.POINTER(ctypes.c_int64)], ctypes.c_int),
            "autovm_plan_arena_bytes": ([P, ctypes.POINTER(ctypes.c_int64)], ctypes.c_int),
            "autovm_plan_budget_bytes": ([P, ctypes.POINTER(ctypes.c_int64)], ctypes.c_int),
            "autovm_plan_tensor_info": ([P, ctypes.c_int32, ctypes.POINTER(TensorInfo)],
                                        ctypes.c_int),
            "autovm_plan_step_info": ([P, ctypes.c_int64, ctypes.POINTER(StepInfo)],
                                      ctypes.c_int),
            "autovm_plan_action_info": ([P, ctypes.c_int64, ctypes.POINTER(ActionInfo)],
                                        ctypes.c_int),
            "autovm_cuda_built": ([], ctypes.c_int),
            "autovm_runtime_options_init": ([ctypes.POINTER(RuntimeOptions)], ctypes.c_int),
            "autovm_runtime_create": ([P, ctypes.POINTER(RuntimeOptions), ctypes.POINTER(P)],
                                      ctypes.c_int),
            "autovm_runtime_free": ([P], None),
            "autovm_step_begin": ([P, ctypes.c_int64, P], ctypes.c_int),
            "autovm_step_end": ([P, ctypes.c_int64, P], ctypes.c_int),
            "autovm_tensor_bind": ([P, ctypes.c_int32, P, ctypes.c_int64], ctypes.c_int),
            "autovm_runtime_stats": ([P, ctypes.POINTER(RuntimeStats)], ctypes.c_int),
            "autovm_runtime_stats_reset": ([P], ctypes.c_int),
            "autovm_pool_options_init": ([ctypes.POINTER(PoolOptions)], ctypes.c_int),
            "autovm_torch_configure": ([ctypes.POINTER(PoolOptions)], ctypes.c_int),
            "autovm_torch_pool": ([ctypes.POINTER(P)], ctypes.c_int),
            "autovm_pool_stats_get": ([P, ctypes.POINTER(PoolStats)], ctypes.c_int),
            "autovm_pool_reset_peaks": ([P], ctypes.c_int),
            "autovm_pool_trim": ([P], ctypes.c_int),
            "autovm_pool_set_limit": ([P, ctypes.c_int64], ctypes.c_int),
            "autovm_pool_find": ([P, P, ctypes.POINTER(P), ctypes.POINTER(ctypes.c_int64)],
                                 ctypes.c_int),
        }
        for name, (args, res) in sig.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                raise ToolNotFoundError(f"{path} does not export {name}: not libautovm, or "
                                        "an older one; rebuild it") from None
            fn.argtypes = args
            fn.restype = res
        version = lib.autovm_version()
        if version != API_VERSION:
            raise ToolNotFoundError(f"{path} has API version {version}; this package speaks "
                                    f"version {API_VERSION}: use the libautovm of this checkout")

    @staticmethod
    def get(path=None):
        path, _ = library_path(path)
        key = os.path.realpath(path)
        if key not in _loaded:
            _loaded[key] = Library(path)
        return _loaded[key]

    def call(self, name, *args):
        status = getattr(self._lib, name)(*args)
        if status != 0:
            code = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else str(status)
            msg = (self._lib.autovm_last_error() or b"").decode("utf-8", "replace")
            raise LibraryError(f"{name} failed (AUTOVM_ERR_{code}): {msg or 'no message'}")

    def free_plan(self, handle):
        self._lib.autovm_plan_free(handle)


def _s(b):
    return b.decode("utf-8") if b is not None else ""


def read_plan(lib, path):
    """Loads the plan at `path` with libautovm and returns plain Python lists:
    (tensors, steps, actions, budget_bytes, arena_bytes)."""
    handle = ctypes.c_void_p()
    lib.call("autovm_plan_load", os.fsencode(path), ctypes.byref(handle))
    try:
        n_t, n_s, n_a = ctypes.c_int32(), ctypes.c_int64(), ctypes.c_int64()
        budget, arena = ctypes.c_int64(), ctypes.c_int64()
        lib.call("autovm_plan_tensor_count", handle, ctypes.byref(n_t))
        lib.call("autovm_plan_step_count", handle, ctypes.byref(n_s))
        lib.call("autovm_plan_action_count", handle, ctypes.byref(n_a))
        lib.call("autovm_plan_budget_bytes", handle, ctypes.byref(budget))
        lib.call("autovm_plan_arena_bytes", handle, ctypes.byref(arena))
        tensors, steps, actions = [], [], []
        ti, si, ai = TensorInfo(), StepInfo(), ActionInfo()
        for i in range(n_t.value):
            lib.call("autovm_plan_tensor_info", handle, i, ctypes.byref(ti))
            tensors.append({"id": ti.id, "name": _s(ti.name), "kind": TENSOR_KINDS[ti.kind],
                            "dtype": _s(ti.dtype), "bytes": ti.bytes, "offset": ti.offset,
                            "first": ti.first_step, "last": ti.last_step,
                            "persistent": bool(ti.persistent)})
        for s in range(n_s.value):
            lib.call("autovm_plan_step_info", handle, s, ctypes.byref(si))
            steps.append({"id": si.id, "op": _s(si.op), "phase": _s(si.phase),
                          "node": _s(si.node),
                          "inputs": [si.inputs[k] for k in range(si.input_count)],
                          "outputs": [si.outputs[k] for k in range(si.output_count)],
                          "workspace": si.workspace, "compute_us": si.compute_us})
        for a in range(n_a.value):
            lib.call("autovm_plan_action_info", handle, a, ctypes.byref(ai))
            if not 0 <= ai.kind < len(ACTION_KINDS):  # a library newer than this binding
                raise LibraryError(f"{path}: action {a} has kind {ai.kind}, which this binding "
                                   f"does not know ({', '.join(ACTION_KINDS)})")
            actions.append({"kind": ACTION_KINDS[ai.kind], "tensor": ai.tensor,
                            "bytes": ai.bytes, "after_step": ai.after_step,
                            "ready_before_step": ai.ready_before_step,
                            "source_step": ai.source_step, "advice": _s(ai.advice)})
        return tensors, steps, actions, budget.value, arena.value
    finally:
        lib.free_plan(handle)
