"""PyTorch's own out-of-memory error from libautovm's pool: the allocator shim torch_oom.cpp,
compiled against the trainer's torch (torch.utils.cpp_extension) the first time a process
installs the allocator, and cached.

    path = torch_oom.build()        # the shim's shared library; raises ShimUnavailable
    torch_oom.bind(path, lib)       # names libautovm's pool functions to it
    CUDAPluggableAllocator(path, "autovm_oom_alloc", "autovm_oom_free")

Why a shim (torch_oom.cpp says more): PyTorch's cuDNN convolutions fall back to an algorithm
with a smaller workspace only when the allocation raises c10::OutOfMemoryError, a type of the
trainer's libc10 that libautovm cannot throw. Without the shim a refusal is a RuntimeError and
the convolution fails (allocator.out_of_memory_errors() then names the pool's figures).

Cache: $AUTOVM_CACHE_DIR, else $XDG_CACHE_HOME/autovm, else ~/.cache/autovm; a folder per torch
version and shim source (torch-oom-<torch version>-<hash of the source>), so another torch or
another shim builds anew, and concurrent builds wait for each other (cpp_extension's lock).
Building needs a C++ compiler, ninja and torch's C++ headers (pip's torch carries them; Debian's
python3-torch needs libtorch-dev): about half a minute, once. $AUTOVM_TORCH_OOM=0 turns the shim
off.
"""
import ctypes
import hashlib
import os

from .errors import AutoVMError

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_oom.cpp")
ALLOC, FREE = "autovm_oom_alloc", "autovm_oom_free"


class ShimUnavailable(AutoVMError):
    """The shim cannot be built or loaded here; the message says why and what to do."""


def enabled():
    """False when $AUTOVM_TORCH_OOM is 0 (or "off", "no", "false")."""
    return os.environ.get("AUTOVM_TORCH_OOM", "1").strip().lower() not in ("0", "off", "no",
                                                                          "false")


def cache_dir():
    if os.environ.get("AUTOVM_CACHE_DIR"):
        return os.environ["AUTOVM_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "autovm")


def _name_and_folder():
    import torch

    with open(SOURCE, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    version = "".join(c if c.isalnum() else "_" for c in torch.__version__)
    name = f"autovm_torch_oom_{digest}"
    return name, os.path.join(cache_dir(), f"torch-oom-{version}-{digest}")


def build(verbose=False):
    """The shim's shared library for this process's torch, built into the cache if it is not
    there; raises ShimUnavailable naming what is missing."""
    if not os.path.isfile(SOURCE):
        raise ShimUnavailable(f"{SOURCE} is missing: reinstall the autovm package")
    try:
        from torch.utils import cpp_extension
    except ImportError as e:
        raise ShimUnavailable(f"torch.utils.cpp_extension cannot be imported: {e}") from None
    name, folder = _name_and_folder()
    path = os.path.join(folder, name + ".so")
    os.makedirs(folder, exist_ok=True)
    # Always through cpp_extension: its lock makes a second process (another DDP rank) wait
    # for a build in progress, and an up-to-date build is only checked, not redone.
    try:
        cpp_extension.load(name, [SOURCE], build_directory=folder, is_python_module=False,
                           extra_cflags=["-O2"], verbose=verbose)
    except (OSError, RuntimeError, ImportError, SystemExit) as e:
        raise ShimUnavailable(
            f"cannot build the allocator shim {SOURCE} into {folder}: {str(e).strip()[-600:]}. "
            "It needs a C++ compiler, ninja and torch's C++ headers (Debian: g++ ninja-build "
            "libtorch-dev); or set AUTOVM_TORCH_OOM=0 to do without it") from None
    if not os.path.isfile(path):
        raise ShimUnavailable(f"building {SOURCE} left no {path}")
    return path


def bind(path, lib):
    """Names libautovm `lib`'s (autovm._lib.Library) pool functions to the shim at `path`."""
    try:
        shim = ctypes.CDLL(path)
    except OSError as e:
        raise ShimUnavailable(f"cannot load the allocator shim {path}: {e}") from None
    address = lambda f: ctypes.cast(f, ctypes.c_void_p)
    shim.autovm_oom_bind.argtypes = [ctypes.c_void_p] * 3
    shim.autovm_oom_bind.restype = None
    shim.autovm_oom_bind(address(lib._lib.autovm_torch_try_alloc),
                         address(lib._lib.autovm_torch_free),
                         address(lib._lib.autovm_last_error))
    return shim
