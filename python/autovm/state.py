"""The adapter's state within a training step, and the small tensor helpers its parts share.

- _Entry: one saved tensor, shared by every op that saves it. Its fields belong to the parts
  of the adapter: tid and exact to matching.py (which plan tensor it is; matched by identity or
  by size and order); regen to replay.py (the chain group that makes it again after a
  discard); gpu, cpu, d2h and h2d to the copy backend (copy_path.py: the tensor autograd gets
  back, the host copy, the copies to host and back in flight). The rest is what autograd saved
  (size, stride, dtype, device, nbytes, version) and how many ops saved it (uses).
- _Packed: what autograd keeps instead of a saved tensor (its entry and its _Step).
- _Step: one forward pass and its backward: hook order, names, the plan's actions issued.

Entries are held strongly only by what autograd saved, so a saved tensor is freed when autograd
releases it, as without the adapter. torch is imported lazily.
"""
import weakref


def _first_tensor(value):
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for v in value:
            t = _first_tensor(v)
            if t is not None:
                return t
    if isinstance(value, dict):
        for v in value.values():
            t = _first_tensor(v)
            if t is not None:
                return t
    return None


def _autocast_state(torch, device_type):
    """(enabled, dtype) of torch.autocast on device_type ('cuda' or 'cpu'): the device-type API
    of torch >= 2.4, else torch 1.13's per-device calls; (False, None) where neither exists."""
    if hasattr(torch, "get_autocast_dtype"):
        return torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)
    if device_type == "cuda":
        return torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype()
    if device_type == "cpu" and hasattr(torch, "is_autocast_cpu_enabled"):
        return torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype()
    return False, None


def _nbytes(t):
    return t.numel() * t.element_size()


def _dtype_name(dtype):
    """A torch dtype as plans name it (torch.float32 -> 'float32', torch.int64 -> 'int64')."""
    return str(dtype).replace("torch.", "")


_MODIFIED = ("a tensor of shape {} saved for backward was modified in place after it was saved "
             "(plain PyTorch raises at backward for this): the adapter will not copy it")


class _Entry:
    """One saved tensor, shared by the ops that save it."""
    __slots__ = ("gpu", "cpu", "tid", "exact", "regen", "ref", "version", "uses", "d2h", "h2d",
                 "size", "stride", "dtype", "device", "nbytes", "__weakref__")

    def __init__(self, t):
        self.gpu, self.cpu, self.tid = t, None, None
        self.exact = False   # tid matched by identity (a module call's output or the input)
        self.regen = None    # discarded: the index of the chain group that makes it again
        self.ref, self.version = weakref.ref(t), t._version
        self.uses, self.d2h, self.h2d = 0, None, None
        self.size, self.stride, self.dtype, self.device = t.size(), t.stride(), t.dtype, t.device
        self.nbytes = _nbytes(t)

    def __del__(self):
        # A prefetch nobody unpacked (the graph was freed first): the compute stream waits for
        # the copy before the caching allocator may hand the block out again.
        if self.h2d is not None and self.gpu is not None:
            try:
                import torch
                torch.cuda.current_stream(self.device).wait_event(self.h2d)
            except Exception:  # interpreter shutdown
                pass


class _Packed:
    """What autograd keeps instead of a saved tensor."""
    __slots__ = ("entry", "step")

    def __init__(self, entry, step):
        self.entry, self.step = entry, step


class _Step:
    """The state of one training step (one forward pass and its backward)."""

    def __init__(self, att, index):
        self.att, self.index = att, index
        self.fwd_idx = 0
        self.calls = {}           # module name -> calls so far in this forward
        self.current = None       # the leaf call running: (name, k)
        self.pending = []         # entries packed during the current leaf call, not yet named
        # Entries are held by what autograd saved (_Packed) and weakly here, so that a saved
        # tensor is freed when autograd releases it, as it would be without the adapter.
        self.live = weakref.WeakValueDictionary()  # id(tensor) -> _Entry
        self.named = {}           # id(tensor) -> (tid, weakref, version)
        self.by_tid = {}          # plan tensor -> [weakref to _Entry]
        self.assigned = set()     # plan tensors given to an entry by size and order
        self.ev_i = self.pf_i = self.dc_i = self.rc_i = 0
        self.due = []             # evicts issued by the plan, waiting for their entry
        self.discards_due = []    # discards issued by the plan, waiting for their entry
        self.groups_run = set()   # recompute groups (Attachment.groups) run in this step
        self.releasing = []       # (ready_before_step, entry)
        self.grad_calls = []      # leaf calls whose backward node got a pre hook
        self.bwd_seq = None
        self.bwd_idx = 0
        self.pos = -1
        self.forward_done = False
