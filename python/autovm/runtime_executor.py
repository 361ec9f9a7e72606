"""The runtime backend of the adapter's executor (attach(..., executor="runtime")): libautovm
executes the plan on the trainer's own tensors; Python moves no bytes.

    allocator.install("vmm")                  # PyTorch's tensors on libautovm's vmm pool
    with autovm.attach(model, opt, plan, executor="runtime") as run:
        ...train as usual...
    run.runtime.stats()                       # the runtime's figures (autovm_stats)

What it does, at the plan boundaries the adapter computes (adapter.py's boundary(pos): every plan
step <= pos has been enqueued on the compute stream):
  steps     autovm_step_begin(s) / autovm_step_end(s) on torch.cuda.current_stream() for every
            plan step in order; steps no hook sees (the loss, functional ops) are begun and
            ended in sequence. A tensor bound while its step runs (a module's output, in the
            module's post hook) is bound between that step's begin and end.
  binding   autovm_tensor_bind of each plan tensor to the real tensor's range as it appears:
            the model's input and every tensor the adapter names (module outputs and arguments
            by identity, other saved outputs by size and order), parameters and buffers at
            attach, gradients when autograd accumulates them (before the optimizer's step on
            a torch without post-accumulate-grad hooks), optimizer state after the optimizer
            makes it. A range is bound only when it is the tensor's whole dense range inside
            one allocation of the pool (allocator.find); anything else stays unbound. The
            runtime runs with AUTOVM_MEMORY_TRAINER: it owns no arena, skips (and counts) the
            actions of tensors not bound, and forgets a non-persistent tensor's binding when
            its lifetime ends, so every training step binds again (addresses change).
  moving    the runtime's copy streams, events against the compute stream, by the pool's memory
            (runtime/include/autovm/autovm.h, AUTOVM_MEMORY_TRAINER):
              vmm      the mapped mechanism: the copy engine takes an evicted tensor's bytes
                       to pinned host memory, one stream each way, and its pages are unmapped
                       (its address stays); a prefetch maps them and copies the bytes back,
                       unless PyTorch freed the tensor meanwhile. A saved tensor autograd
                       unpacks is required first (require()): a late or wrong plan costs a
                       wait, never a read of memory that is not there.
              managed  the prefetch mechanism, by migration (cudaMemPrefetchAsync): a range
                       PyTorch freed and reused before the plan expected is moved, never
                       overwritten; 3-13 GB/s to the host on the H200 (BENCHMARKS.md).
  remote    the plan's read_remote actions (a step reads a tensor where its evicted copy lies
            in host memory) are the runtime's too: on vmm its host memory is mapped at the
            tensor's own paged-out chunks for that step, on managed memory the range is advised
            to stay on the host and be read from there (runtime/README.md, "Remote reads").
            The kernels read the tensor at its address; require() finds it readable and
            copies nothing back.
  recompute plan tensors the plan discards and recomputes are not bound: the adapter's own op
            replay (adapter.py) drops and remakes them, and the runtime's discard of them is
            skipped.
  gradients of activations: those of a module call's output or argument whose gradient the
            plan moves, when autograd hands the gradient to the backward of the op that made
            the tensor (hooks.py, _hook_gradient): the step that reads it last is about to run,
            so the plan takes them off only to be read remotely there (plan()'s
            --movable-at-last-use activation_grad); other activation gradients stay unbound.
Not bound: workspaces, the label.
Binds and skipped actions are counted in `binds` / the runtime's unbound_actions.
"""
import ctypes
import os

from ._lib import (BACKENDS, MEMORY_TRAINER, MODES, Library, RuntimeOptions, RuntimeStats,
                   MECHANISMS)
from .errors import AutoVMError, LibraryError


# The runtime's mechanism for the pool PyTorch's tensors lie in.
POOL_MECHANISMS = {"vmm": "mapped", "managed": "prefetch"}


def make_runtime(plan, mode="plan", backend="cuda"):
    """The RuntimeExecutor of attach(..., executor="runtime"): on CUDA, over the library of
    autovm.allocator, which must be installed as PyTorch's allocator (vmm: copies and
    unmapped pages; managed: migration). Demand paging needs the managed pool."""
    if backend != "cuda":
        return RuntimeExecutor(plan, mode=mode, backend=backend)
    from . import allocator
    if allocator.installed() != "global":
        raise AutoVMError(
            "attach(..., executor='runtime') moves PyTorch's tensors where they lie, so they "
            "must lie in libautovm's pool: call autovm.allocator.install('vmm') (or 'managed') "
            "before the first CUDA tensor (installed now: "
            f"{allocator.installed() or 'none'})")
    memory = allocator.memory()
    if mode == "demand_paging" and memory != "managed":
        raise AutoVMError("runtime_mode='demand_paging' faults pages back, which only managed "
                          "memory does: install the allocator with 'managed'")
    if memory == "vmm":
        capacity = allocator.stats()["capacity_bytes"]
        if plan.budget_bytes and capacity < plan.budget_bytes:
            import warnings
            warnings.warn(
                f"the vmm pool's capacity ({capacity / 1e9:.2f} GB) is below the plan's budget "
                f"({plan.budget_bytes / 1e9:.2f} GB): training will run out of memory. The "
                "capacity has to hold the plan and what it does not see (cuDNN workspaces, "
                "whole-chunk rounding: docs/trainer-paging.md); install the allocator with a "
                "larger capacity_bytes", RuntimeWarning, stacklevel=3)
    # A calibrated plan's budget was measured as the device memory the pool holds, with what the
    # process holds beside it: the pool's limit keeps it at the rest (unused chunks go back
    # before the limit is passed).
    calibration = getattr(plan, "calibration", None)
    limit = 0
    if memory == "vmm" and calibration is not None:
        limit = min(calibration.get("pool_limit_bytes", plan.requested_budget_bytes),
                    allocator.stats()["capacity_bytes"])
    return RuntimeExecutor(plan, mode=mode, backend=backend, lib=allocator.library(),
                           mechanism=POOL_MECHANISMS[memory], pool_limit_bytes=limit)


# What an optimizer step reads: the plan's kinds.
OPTIMIZER_READS = ("parameter", "gradient", "optimizer_state")

# torch.optim's state keys -> the planner's optimizer state names (compiler/training/optimizer.cc).
STATE_NAMES = {"momentum_buffer": "momentum", "exp_avg": "adam_m", "exp_avg_sq": "adam_v"}


class RuntimeExecutor:
    """One libautovm runtime over a plan, driven by an Attachment's boundaries.

    mode: "plan" (evict and prefetch as planned) or "demand_paging" (the plan's evictions, no
    prefetches: pages fault back when touched). backend: "cuda", or "host" (tests on the CPU:
    the host backend counts the moves and leaves the bytes alone).
    mechanism: the CUDA backend's, for the pool the tensors lie in (POOL_MECHANISMS).
    calls: None, or a list that records every call made to the runtime (tests).
    pool_limit_bytes: > 0, autovm.allocator's vmm pool holds at most that much device memory
    from its creation (or apply_limit()) until release_limit() or close() (allocator.limit).
    The Attachment applies it when its context begins and releases it when the context ends,
    so that the limit before it holds again then, not when the runtime is collected (stats()
    stay readable after the context)."""

    def __init__(self, plan, *, mode="plan", backend="cuda", lib=None, budget_bytes=0,
                 calls=None, mechanism="prefetch", pool_limit_bytes=0):
        if mode not in MODES:
            raise AutoVMError(f"runtime mode {mode!r}: use one of {sorted(MODES)}")
        if backend not in BACKENDS:
            raise AutoVMError(f"runtime backend {backend!r}: use one of {sorted(BACKENDS)}")
        self._limit = None     # allocator.limit(pool_limit_bytes), entered
        self.handle = None
        self.lib = lib if lib is not None else Library.get()
        self.plan, self.backend, self.mode = plan, backend, mode
        # Whether the runtime takes pages off the device (the mapped mechanism): then a tensor
        # read outside the plan's boundaries must be required first (require()).
        self.pages = backend == "cuda" and mechanism == "mapped"
        self.calls = calls
        self.steps = len(plan.steps)
        self.next = 0          # the plan step step_begin expects (steps: the training step is over)
        self.running = None    # the plan step begun and not ended
        self.binds = 0         # COUNT: autovm_tensor_bind calls made
        self.refused = 0       # COUNT: tensors left unbound (not a whole range of the pool)
        self._bound = {}       # plan tensor -> data pointer bound in this training step
        self._streams = backend == "cuda"
        handle = ctypes.c_void_p()
        self.lib.call("autovm_plan_load", os.fsencode(plan.path), ctypes.byref(handle))
        try:
            o = RuntimeOptions()
            self.lib.call("autovm_runtime_options_init", ctypes.byref(o))
            o.backend = BACKENDS[backend]
            o.mode = MODES[mode]
            o.mechanism = MECHANISMS[mechanism] if backend == "cuda" else MECHANISMS["plan"]
            o.memory = MEMORY_TRAINER
            o.budget_bytes = int(budget_bytes)
            rt = ctypes.c_void_p()
            self.lib.call("autovm_runtime_create", handle, ctypes.byref(o), ctypes.byref(rt))
        finally:
            self.lib.free_plan(handle)
        self.handle = rt
        self.ids = {t["name"]: t["id"] for t in plan.tensors}
        self.pool_limit_bytes = pool_limit_bytes
        self.apply_limit()

    def close(self):
        if self.handle is not None:
            if self._streams:
                import torch
                torch.cuda.synchronize()  # the runtime's copies may still read bound ranges
            self.lib._lib.autovm_runtime_free(self.handle)
            self.handle = None
        self.release_limit()

    def apply_limit(self):
        """Limits the pool to pool_limit_bytes (if > 0), unless this runtime already does."""
        if self.pool_limit_bytes > 0 and self._limit is None:
            from . import allocator

            self._limit = allocator.limit(self.pool_limit_bytes)
            self._limit.__enter__()

    def release_limit(self):
        """The pool's limit goes back to what it was before this runtime set it."""
        if self._limit is not None:
            limit, self._limit = self._limit, None
            limit.__exit__(None, None, None)

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    # --- steps -------------------------------------------------------------------------------

    def _stream(self):
        if not self._streams:
            return None
        import torch
        return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def _begin(self, s):
        if self.calls is not None:
            self.calls.append(("begin", s))
        self.lib.call("autovm_step_begin", self.handle, s, self._stream())
        self.running, self.next = s, s + 1

    def _end(self, s):
        if self.calls is not None:
            self.calls.append(("end", s))
        self.lib.call("autovm_step_end", self.handle, s, self._stream())
        self.running = None
        if s == self.steps - 1:
            self._bound = {k: v for k, v in self._bound.items()
                           if self.plan.tensors[k]["persistent"]}

    def advance(self, pos):
        """Every plan step <= pos has been enqueued: each is begun (if need be) and ended.
        Step pos + 1 is begun too, before the trainer enqueues it, so that the compute stream's
        waits for what it needs (prefetches due before it) come before its kernels."""
        pos = min(pos, self.steps - 1)
        while True:
            if self.running is not None and self.running <= pos:
                self._end(self.running)
            elif self.running is None and self.next <= pos:
                self._begin(self.next)
            else:
                break
        if self.running is None and self.next == pos + 1 and self.next < self.steps:
            self._begin(self.next)

    def restore(self):
        """Every bound tensor the runtime has off the device comes back (the current stream
        waits): before the trainer reads its tensors outside the plan's training steps."""
        self.lib.call("autovm_runtime_restore", self.handle, self._stream())

    def finish_training_step(self):
        """Ends the training step the runtime is in (every remaining plan step), if any."""
        if self.running is not None or 0 < self.next < self.steps:
            self.advance(self.steps - 1)

    def start_training_step(self):
        """A new training step: the last one is finished first, if it was not."""
        self.finish_training_step()
        self.next = 0

    def optimizer_boundary(self, att, done):
        """Before the optimizer's step: the plan's steps before its first optimizer step are
        over (gradients are bound now where torch has no post-accumulate-grad hooks). After
        it: optimizer state is bound (made at the first step), then the training step ends."""
        if not done:
            self.advance(att.first_optimizer_step - 1)
            if getattr(att, "_grad_hooks", None) is None:
                self.bind_gradients(att.model)
            if self.pages:
                # The optimizer's plan steps are begun only after it has run (one hook for all
                # of them): what it reads must be on the device before it starts.
                for tid in list(self._bound):
                    if self.plan.tensors[tid]["kind"] in OPTIMIZER_READS:
                        self.require(tid)
            return
        if att.optimizer is not None:
            self.bind_optimizer_state(att.model, att.optimizer)
        self.advance(self.steps - 1)

    # --- binding -------------------------------------------------------------------------------

    def open(self, s):
        """Step s has been enqueued and is the running step (the steps before it are over)."""
        if self.running == s or s < self.next:
            return
        self.advance(s - 1)
        self._begin(s)

    def bind(self, tid, t, made=False):
        """Binds plan tensor tid to torch tensor t's range, when it is t's whole dense range in
        one allocation of the pool and of the plan tensor's size; returns whether it did.
        made: t was just made by the step its plan lifetime starts at (a module's output), so
        that step has been enqueued: it is begun first, and t bound while it runs."""
        if t is None or tid is None:
            return False
        info = self.plan.tensors[tid]
        if made and not info["persistent"]:
            self.open(info["first"])
        nbytes = t.numel() * t.element_size()
        ptr = t.data_ptr()
        if self._bound.get(tid) == ptr:
            return True
        ok = nbytes == info["bytes"] and nbytes > 0 and t.is_contiguous()
        if ok and self.backend == "cuda":
            from . import allocator
            found = allocator.find(ptr)
            ok = found is not None and found[0] <= ptr and ptr + nbytes <= found[0] + found[1]
        if not ok:
            self.refused += 1
            return False
        if self.calls is not None:
            self.calls.append(("bind", info["name"]))
        try:
            self.lib.call("autovm_tensor_bind", self.handle, int(tid), ctypes.c_void_p(ptr),
                          nbytes)
        except LibraryError as e:
            if "AUTOVM_ERR_STATE" not in str(e):
                raise
            self.refused += 1  # the runtime has it off the device: its pages stay where they are
            return False
        self._bound[tid] = ptr
        self.binds += 1
        return True

    def require(self, tid):
        """Plan tensor tid is about to be read on the current stream: the runtime brings its
        bytes back first if they are off the device (autovm_tensor_require)."""
        if self.calls is not None:
            self.calls.append(("require", self.plan.tensors[tid]["name"]))
        self.lib.call("autovm_tensor_require", self.handle, int(tid), self._stream())

    def bind_name(self, name, t):
        return self.bind(self.ids.get(name), t)

    def bind_model(self, model):
        """Parameters and buffers, by their state_dict names (persistent: bound once)."""
        for name, q in list(model.named_parameters()) + list(model.named_buffers()):
            self.bind_name(name, q.detach())

    def bind_gradients(self, model):
        for name, q in model.named_parameters():
            if q.grad is not None:
                self.bind_name("grad/" + name, q.grad)

    def hook_gradients(self, model):
        """Binds each gradient when autograd has accumulated it (torch >= 2.1); returns the
        hooks' handles, or None where torch has no such hook."""
        handles = []
        for name, q in model.named_parameters():
            if not hasattr(q, "register_post_accumulate_grad_hook"):
                return None

            def hook(p, key="grad/" + name):  # must return None
                self.bind_name(key, p.grad)
            handles.append(q.register_post_accumulate_grad_hook(hook))
        return handles

    def bind_optimizer_state(self, model, optimizer):
        """The optimizer's state tensors under the plan's names (<parameter>/momentum,
        /adam_m, /adam_v)."""
        names = {id(q): n for n, q in model.named_parameters()}
        for q, state in optimizer.state.items():
            name = names.get(id(q))
            if name is None:
                continue
            for key, plan_key in STATE_NAMES.items():
                t = state.get(key)
                if t is not None and hasattr(t, "data_ptr"):
                    self.bind_name(f"{name}/{plan_key}", t)

    # --- figures -------------------------------------------------------------------------------

    def stats(self):
        """The runtime's autovm_stats as a dict (synchronises with the device), with the
        executor's binds and refused."""
        s = RuntimeStats()
        self.lib.call("autovm_runtime_stats", self.handle, ctypes.byref(s))
        out = {name: getattr(s, name) for name, _ in RuntimeStats._fields_}
        out.update(binds=self.binds, refused=self.refused)
        return out

    def reset_stats(self):
        self.lib.call("autovm_runtime_stats_reset", self.handle)
        self.binds = self.refused = 0
