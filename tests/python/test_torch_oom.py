"""autovm/torch_oom.cpp on the CPU with Debian's torch: the allocator shim builds against this
torch, is cached, and turns the pool's refusals into c10::OutOfMemoryError, the type PyTorch's
cuDNN code catches to try a smaller workspace, while other failures stay c10::Error.

The shim's autovm_oom_alloc is called from C++ (a probe built here, as PyTorch's
CUDAPluggableAllocator would call it), bound first to stand-in pool functions with hand-set
results, then to the real libautovm, whose pool cannot exist without a GPU (a failure that is
not out of memory).

    python3 test_torch_oom.py LIBAUTOVM
"""
import ctypes
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

PROBE = r"""
#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <cstdio>
#include <cstring>
// What PyTorch's callers see of one allocation through the shim at `shim`: "ok:<address>",
// "oom:<message>" (c10::OutOfMemoryError), "error:<message>" (another c10::Error), "other".
extern "C" __attribute__((visibility("default")))
void autovm_probe(const char* shim, size_t size, char* out, size_t n) {
  void* h = dlopen(shim, RTLD_NOW);
  auto alloc = h ? reinterpret_cast<void* (*)(size_t, int, void*)>(dlsym(h, "autovm_oom_alloc"))
                 : nullptr;
  if (alloc == nullptr) { std::snprintf(out, n, "missing:%s", dlerror()); return; }
  try {
    void* p = alloc(size, 0, nullptr);
    std::snprintf(out, n, "ok:%p", p);
  } catch (const c10::OutOfMemoryError& e) {
    std::snprintf(out, n, "oom:%s", e.what_without_backtrace());
  } catch (const c10::Error& e) {
    std::snprintf(out, n, "error:%s", e.what_without_backtrace());
  } catch (...) {
    std::snprintf(out, n, "other");
  }
}
"""

results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else ""))


def main():
    lib_path = sys.argv[1]
    try:
        import torch  # noqa: F401
        from torch.utils import cpp_extension
    except ImportError as e:
        print(f"SKIP: torch's C++ extension support is missing ({e})")
        return 77
    from autovm import torch_oom
    from autovm._lib import Library

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["AUTOVM_CACHE_DIR"] = os.path.join(tmp, "cache")
        try:
            t0 = time.time()
            shim = torch_oom.build()
            built_s = time.time() - t0
        except torch_oom.ShimUnavailable as e:
            print(f"FAIL build: {e}")
            return 1
        check("the shim builds into the cache", shim.startswith(os.environ["AUTOVM_CACHE_DIR"])
              and os.path.isfile(shim), f"{shim} in {built_s:.1f} s")
        t0 = time.time()
        again = torch_oom.build()
        check("a second build() takes the cached one", again == shim and time.time() - t0 < 1.0)

        src = os.path.join(tmp, "probe", "probe.cpp")
        os.makedirs(os.path.dirname(src))
        with open(src, "w") as f:
            f.write(PROBE)
        cpp_extension.load("autovm_oom_probe", [src], build_directory=os.path.dirname(src),
                           is_python_module=False, extra_ldflags=["-ldl"])
        probe = ctypes.CDLL(os.path.join(os.path.dirname(src), "autovm_oom_probe.so"))
        probe.autovm_probe.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                       ctypes.c_size_t]

        def through(size):
            out = ctypes.create_string_buffer(2048)
            probe.autovm_probe(shim.encode(), size, out, len(out))
            return out.value.decode()

        r = through(64)
        check("before bind: an error that is not out of memory",
              r.startswith("error:") and "before autovm_oom_bind" in r, r)

        # Stand-ins for libautovm's functions, with hand-set results: 100 B or less allocate at
        # 0x1000, 77 B fail as a wrong device would, more than 100 B are refused.
        message = ctypes.create_string_buffer(256)
        TRY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                               ctypes.POINTER(ctypes.c_void_p))
        FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                ctypes.c_void_p)
        ERROR = ctypes.CFUNCTYPE(ctypes.c_void_p)  # a char* the buffer `message` holds
        freed = []

        def try_alloc(size, device, stream, out):
            if size == 77:
                message.value = b"device 3 asked of a pool of device 0"
                return 1
            if size > 100:
                message.value = f"out of memory: cannot allocate {size} B (capacity 100 B)".encode()
                return 5
            out[0] = 0x1000 if size else None
            return 0

        keep = (TRY(try_alloc), FREE(lambda p, n, d, s: freed.append((p, n))),
                ERROR(lambda: ctypes.addressof(message)))
        shim_lib = ctypes.CDLL(shim)
        shim_lib.autovm_oom_bind.argtypes = [ctypes.c_void_p] * 3
        shim_lib.autovm_oom_bind(*[ctypes.cast(f, ctypes.c_void_p) for f in keep])

        r = through(64)
        check("an allocation the pool makes is its address", r in ("ok:0x1000", "ok:0000000000001000"), r)
        r = through(0)
        check("0 bytes: the pool's NULL, no error", r in ("ok:(nil)", "ok:0x0", "ok:0000000000000000"), r)
        r = through(4096)
        check("a refusal is c10::OutOfMemoryError with the pool's message",
              r.startswith("oom:CUDA out of memory. out of memory: cannot allocate 4096 B"), r)
        r = through(77)
        check("another failure is c10::Error, not out of memory",
              r.startswith("error:") and "device 3 asked of a pool of device 0" in r, r)
        shim_lib.autovm_oom_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                             ctypes.c_void_p]
        shim_lib.autovm_oom_free(ctypes.c_void_p(0x1000), 64, 0, None)
        check("free reaches the pool's free", freed == [(0x1000, 64)], str(freed))

        # The real libautovm: bind() names its functions; with no GPU its pool cannot be made,
        # which must not read as out of memory.
        torch_oom.bind(shim, Library.get(lib_path))
        r = through(64)
        check("libautovm without a GPU: an error, not out of memory", r.startswith("error:"), r)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
