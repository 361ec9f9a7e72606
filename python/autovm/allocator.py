"""PyTorch's CUDA tensors on memory libautovm owns: its stream-ordered pools
(runtime/include/autovm/autovm.h, "Memory pools") as PyTorch's allocator.

    from autovm import allocator
    allocator.install("managed")        # or "vmm"; before the first CUDA tensor
    with allocator.out_of_memory_errors():
        ...train as usual...
    print(allocator.stats())            # current and peak allocated / resident bytes

How it is installed, and why. install() makes the pool PyTorch's one CUDA allocator
(torch.cuda.memory.CUDAPluggableAllocator + change_current_allocator). The pool then sees
every tensor at its exact size and address, with the stream current at its allocation: what
an executor needs to bind plan tensors to real tensors (find()) and to move their pages. The
other way, a torch.cuda.MemPool over the same pool (install_mempool()), keeps PyTorch's
caching allocator on top: the pool only sees segments (2 MiB, 20 MB or the request rounded to
2 MiB) that the cache splits among tensors, so a tensor's range is not an allocation of the
pool and freed tensors stay in PyTorch's cache. A MemPool is also thread-local (autograd's
backward thread does not allocate from it unless torch.autograd.set_multithreading_enabled is
False). tools/bench/allocator_overhead.py times both against the caching allocator.

Out of memory. install() routes the pool through a small shim compiled against the process's
torch (torch_oom.py, cached after its first build), so that a refusal raises PyTorch's own
out-of-memory error: torch.cuda.OutOfMemoryError in Python, and cuDNN tries a convolution
algorithm with a smaller workspace, as on a GPU of that size. Where the shim cannot be built
(no C++ compiler or torch headers; install() warns) or AUTOVM_TORCH_OOM=0, a refusal is a
RuntimeError from inside PyTorch and the convolution fails. out_of_memory_error() says which;
out_of_memory_errors() adds the pool's figures to either, as torch.cuda.OutOfMemoryError.

Limits of the global allocator (README.md, "Memory the runtime owns"):
torch.cuda.memory_allocated / max_memory_allocated / memory_stats raise (use stats()),
cudnn.benchmark fails, CUDA graphs do not work, torch.cuda.empty_cache() does nothing (use
trim()).
"""
import contextlib
import ctypes

from ._lib import Library, PoolOptions, PoolStats
from .errors import AutoVMError

MEMORIES = {"managed": 0, "vmm": 1}
OOM_MARK = "autovm_torch_alloc: out of memory"

_state = {"lib": None, "mode": None}


def _options(lib, memory, capacity_bytes, allow_oversubscribe, device, chunk_bytes=0):
    if memory not in MEMORIES:
        raise AutoVMError(f"allocator memory {memory!r}: use one of {sorted(MEMORIES)}")
    if int(capacity_bytes) < 0:
        raise AutoVMError(f"allocator capacity_bytes is {capacity_bytes}: give bytes >= 0 "
                          "(0: the device's free memory less 1 GiB)")
    if int(chunk_bytes) < 0 or (int(chunk_bytes) and memory != "vmm"):
        raise AutoVMError(f"allocator chunk_bytes is {chunk_bytes}: bytes >= 0, for the vmm pool "
                          "only (0: the allocation granularity)")
    o = PoolOptions()
    lib.call("autovm_pool_options_init", ctypes.byref(o))
    o.memory = MEMORIES[memory]
    o.device = int(device)
    o.capacity_bytes = int(capacity_bytes)
    o.allow_oversubscribe = 1 if allow_oversubscribe else 0
    o.chunk_bytes = int(chunk_bytes)
    return o


def _configure(memory, capacity_bytes, allow_oversubscribe, device, lib_path, chunk_bytes=0):
    if _state["lib"] is not None:
        raise AutoVMError("autovm.allocator is installed already: once a process")
    lib = Library.get(lib_path)
    if not lib._lib.autovm_cuda_built():
        raise AutoVMError(f"{lib.path} was built without CUDA: rebuild it with -Dcuda=enabled")
    lib.call("autovm_torch_configure", ctypes.byref(
        _options(lib, memory, capacity_bytes, allow_oversubscribe, device, chunk_bytes)))
    return lib


def install(memory="managed", capacity_bytes=0, allow_oversubscribe=False, device=0,
            lib_path=None, chunk_bytes=0):
    """Makes libautovm's pool PyTorch's CUDA allocator, for the rest of the process.

    memory: "managed" (one cudaMallocManaged range advised to the device) or "vmm" (device
    memory mapped in chunks of chunk_bytes, 0: the 2 MiB granularity; trim() gives it back;
    attach(..., executor="runtime") unmaps an evicted tensor's chunks, so larger chunks mean
    fewer driver calls a step). capacity_bytes: the most device memory the
    pool holds (0: the device's free memory less 1 GiB); more than is free is refused unless
    allow_oversubscribe (managed only: on a GPU that is yours alone). device: the device index
    the process trains on (the pool serves one). Call it before anything allocates CUDA memory:
    PyTorch cannot swap its allocator afterwards."""
    import torch

    lib = _configure(memory, capacity_bytes, allow_oversubscribe, device, lib_path, chunk_bytes)
    hooks, errors = _global_hooks(torch, lib)
    try:
        torch.cuda.memory.change_current_allocator(hooks)
    except RuntimeError as e:
        raise AutoVMError(f"cannot install the autovm allocator: {e}. Install it before the "
                          "first CUDA tensor (and before torch.cuda.set_device or "
                          "current_device, which start PyTorch's allocator)") from None
    _state.update(lib=lib, mode="global", hooks=hooks, memory=memory, errors=errors)


def _global_hooks(torch, lib):
    """(the CUDAPluggableAllocator, what a refusal raises): through the shim of torch_oom.py
    ("torch.OutOfMemoryError"), else libautovm's own hooks ("RuntimeError"), with a warning
    that says why the shim is not there."""
    from . import torch_oom

    if torch_oom.enabled():
        try:
            path = torch_oom.build()
            _state["shim"] = torch_oom.bind(path, lib)
            return (torch.cuda.memory.CUDAPluggableAllocator(path, torch_oom.ALLOC,
                                                             torch_oom.FREE),
                    "torch.OutOfMemoryError")
        except torch_oom.ShimUnavailable as e:
            import warnings
            warnings.warn(f"{e}. Without it a refusal of the pool is a RuntimeError, and cuDNN "
                          "cannot fall back to a convolution algorithm with a smaller "
                          "workspace", RuntimeWarning, stacklevel=3)
    return (torch.cuda.memory.CUDAPluggableAllocator(lib.path, "autovm_torch_alloc",
                                                     "autovm_torch_free"), "RuntimeError")


def out_of_memory_error():
    """What an allocation the installed global pool refuses raises: "torch.OutOfMemoryError"
    (through the shim, python/autovm/torch_oom.py), "RuntimeError" (libautovm's own hooks), or
    None when no global pool is installed."""
    return _state.get("errors") if _state["mode"] == "global" else None


def install_mempool(memory="managed", capacity_bytes=0, allow_oversubscribe=False, device=0,
                    lib_path=None):
    """The same pool behind a torch.cuda.MemPool (PyTorch's caching allocator on top; see the
    module's note). Returns the MemPool: allocate under `with torch.cuda.use_mem_pool(pool):`,
    with torch.autograd.set_multithreading_enabled(False) so that backward allocates there too.
    PyTorch's statistics keep working; an exhausted pool raises torch.cuda.OutOfMemoryError."""
    import torch

    lib = _configure(memory, capacity_bytes, allow_oversubscribe, device, lib_path)
    hooks = torch.cuda.memory.CUDAPluggableAllocator(lib.path, "autovm_torch_segment_alloc",
                                                     "autovm_torch_free")
    pool = torch.cuda.MemPool(hooks.allocator())
    _state.update(lib=lib, mode="mempool", hooks=hooks, mempool=pool, memory=memory)
    return pool


def installed():
    """"global", "mempool" or None."""
    return _state["mode"]


def memory():
    """"managed", "vmm" or None (not installed)."""
    return _state.get("memory")


def library():
    """The installed pool's libautovm (autovm._lib.Library), or None."""
    return _state["lib"]


def _pool():
    lib = _state["lib"]
    if lib is None:
        raise AutoVMError("autovm.allocator is not installed: call allocator.install() first")
    handle = ctypes.c_void_p()
    lib.call("autovm_torch_pool", ctypes.byref(handle))
    return lib, handle


def stats():
    """The pool's figures (autovm_pool_stats): allocated_bytes (asked for by live tensors),
    resident_bytes (device memory held), their peaks, capacity_bytes and limit_bytes, counts;
    on a vmm pool what the held memory is (small_chunk_bytes, unused_chunk_bytes)."""
    lib, handle = _pool()
    s = PoolStats()
    lib.call("autovm_pool_stats_get", handle, ctypes.byref(s))
    return {name: getattr(s, name) for name, _ in PoolStats._fields_}


def outside_bytes():
    """Device memory in use on the current GPU beyond what the pool holds: cudaMemGetInfo's used
    bytes less the pool's resident bytes. That is the CUDA context, the libraries' handles and
    scratch memory outside the pool (cuDNN, cuBLAS, NCCL), and whatever other processes hold
    on the same GPU. Meaningful for a vmm pool, whose resident bytes are device memory; a
    managed pool's pages count in cudaMemGetInfo wherever they lie."""
    import torch

    free, total = torch.cuda.mem_get_info()
    return max(0, total - free - stats()["resident_bytes"])


def reset_peaks():
    lib, handle = _pool()
    lib.call("autovm_pool_reset_peaks", handle)


def trim():
    """Synchronises the device and gives back the memory no tensor uses (vmm chunks; a managed
    pool keeps its pages)."""
    lib, handle = _pool()
    lib.call("autovm_pool_trim", handle)


def set_limit(bytes_):
    """vmm pools: the most device memory the pool may hold from now on, at most its capacity
    (0: the capacity again). Unused chunks beyond it go back at once; allocations past it are
    refused as at the capacity (autovm_pool_set_limit)."""
    lib, handle = _pool()
    lib.call("autovm_pool_set_limit", handle, ctypes.c_int64(int(bytes_)))


@contextlib.contextmanager
def limit(bytes_):
    """set_limit(bytes_) inside, the limit before it afterwards."""
    before = stats()
    set_limit(bytes_)
    try:
        yield
    finally:
        set_limit(0 if before["limit_bytes"] == before["capacity_bytes"] else
                  before["limit_bytes"])


def find(address):
    """(base, bytes) of the live allocation `address` lies in, or None."""
    lib, handle = _pool()
    base, size = ctypes.c_void_p(), ctypes.c_int64()
    lib.call("autovm_pool_find", handle, ctypes.c_void_p(int(address)), ctypes.byref(base),
             ctypes.byref(size))
    return (base.value, size.value) if base.value else None


def _gib(b):
    return f"{b / 2**30:.2f} GiB"


def describe():
    """One line of the pool's figures, for messages."""
    s = stats()
    return (f"autovm pool: {_gib(s['allocated_bytes'])} allocated in {s['allocations']} "
            f"tensors (peak {_gib(s['peak_allocated_bytes'])}), {_gib(s['resident_bytes'])} "
            f"held of a capacity of {_gib(s['capacity_bytes'])}"
            + (f" limited to {_gib(s['limit_bytes'])}"
               if s["limit_bytes"] < s["capacity_bytes"] else "")
            + f"; the refused request was "
            f"{_gib(s['last_failed_bytes'])}")


@contextlib.contextmanager
def out_of_memory_errors():
    """Inside: an allocation the pool refuses raises torch.cuda.OutOfMemoryError with the
    pool's figures (without the shim, under the global allocator PyTorch reports it as a
    RuntimeError)."""
    import torch

    try:
        yield
    except torch.cuda.OutOfMemoryError as e:
        if _state["lib"] is None:
            raise
        raise torch.cuda.OutOfMemoryError(f"{e}\n{describe()}") from e
    except RuntimeError as e:
        if OOM_MARK not in str(e) or _state["lib"] is None:
            raise
        raise torch.cuda.OutOfMemoryError(f"CUDA out of memory. {e}\n{describe()}") from e
