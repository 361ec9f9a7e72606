"""The copy backend: moves the bytes of saved tensors that the plan evicts and prefetches.

The Attachment (adapter.py) decides when, at plan boundaries, at unpack and when a recompute
chain reads an evicted tensor; a backend decides how. The boundary is per saved tensor (an
_Entry, state.py), and these five calls are all the Attachment makes of a backend:

  evict(e) -> bool     start taking e's bytes off the GPU (e.cpu: where they are kept); False
                       when e cannot be moved (already moved, or not dense); AutoVMError when
                       the tensor was modified in place since it was saved
  release(e)           e gives up its GPU tensor (e.gpu = None), once the compute stream is
                       ordered after the eviction's copy, so the memory the caching allocator
                       hands out again is never still being read
  prefetch(e)          start bringing an evicted e back: e.gpu a new GPU tensor, filled
                       asynchronously
  wait_copy_back(e)    the compute stream waits for e's prefetch (before it reads e.gpu)
  wait_copy_out(e)     the compute stream waits for e's eviction (before e.gpu may be freed)

The backend keeps its in-flight copies on the entry (e.d2h, e.h2d: CUDA events, None when
none; an entry freed with its copy back pending makes the compute stream wait for e.h2d,
state.py) and counts nothing: the Attachment counts evictions and bytes (Stats).

CopyPath is the one backend: copies between the GPU and pinned host memory (a pinned tensor
per eviction, from PyTorch's caching host allocator) on two streams per device, one each way,
ordered against the compute stream by CUDA events; on the CPU, plain copies.
"""
from .errors import AutoVMError
from .state import _MODIFIED


class CopyPath:
    """Copies to pinned host memory and back on a device's two copy streams."""

    def __init__(self, torch):
        self.torch = torch
        self._streams = {}  # device -> (device to host, host to device)

    def _cuda(self, device):
        return device.type == "cuda"

    def _copy_streams(self, device):
        s = self._streams.get(device)
        if s is None:
            torch = self.torch
            s = (torch.cuda.Stream(device=device), torch.cuda.Stream(device=device))
            self._streams[device] = s
        return s  # (device to host, host to device)

    def evict(self, e):
        torch = self.torch
        g = e.gpu
        if g is None or e.cpu is not None:
            return False
        if g._version != e.version:
            raise AutoVMError(_MODIFIED.format(tuple(e.size)))
        if not (g.is_contiguous() or g.is_contiguous(memory_format=torch.channels_last)):
            return False  # not dense: a copy would not free its storage
        if self._cuda(e.device):
            d2h, _ = self._copy_streams(e.device)
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(e.device))
            d2h.wait_event(ready)
            cpu = torch.empty_strided(e.size, e.stride, dtype=e.dtype, device="cpu",
                                      pin_memory=True)
            with torch.cuda.stream(d2h):
                cpu.copy_(g, non_blocking=True)
                e.d2h = torch.cuda.Event()
                e.d2h.record(d2h)
        else:
            cpu = torch.empty_strided(e.size, e.stride, dtype=e.dtype, device="cpu")
            cpu.copy_(g)
        e.cpu = cpu
        return True

    def release(self, e):
        if e.gpu is None or e.cpu is None:
            return
        # The compute stream passes this point only once the copy is done, so memory the
        # caching allocator hands out again after the free below is never still being read.
        self.wait_copy_out(e)
        e.gpu = None

    def prefetch(self, e):
        torch = self.torch
        g = torch.empty_strided(e.size, e.stride, dtype=e.dtype, device=e.device)
        if self._cuda(e.device):
            _, h2d = self._copy_streams(e.device)
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(e.device))  # g's block may be in use there
            h2d.wait_event(ready)
            with torch.cuda.stream(h2d):
                g.copy_(e.cpu, non_blocking=True)
                e.h2d = torch.cuda.Event()
                e.h2d.record(h2d)
        else:
            g.copy_(e.cpu)
        e.gpu = g

    def wait_copy_back(self, e):
        if e.h2d is not None:
            self.torch.cuda.current_stream(e.device).wait_event(e.h2d)
            e.h2d = None

    def wait_copy_out(self, e):
        if e.d2h is not None:
            self.torch.cuda.current_stream(e.device).wait_event(e.d2h)
            e.d2h = None
