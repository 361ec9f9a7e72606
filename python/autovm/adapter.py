"""autovm.attach(): train a PyTorch model under an AutoVM plan (python/autovm/README.md).

Pieces, in the order a training step meets them:

  forward   root pre hook     new _Step; batch and input size checked; input named
            leaf pre hook     call order checked against the plan; boundary(first step - 1)
            pack hook         saved tensor -> _Entry (shared by every op that saves it);
                              parameters, buffers and views of them stay as they are (the
                              model's are read once a step, when first needed: after the
                              step's first launch)
            leaf post hook    entries named (module output, then other outputs by size and
                              order); boundary(last step); a pre hook on the output's autograd
                              node for the backward
            root post hook    boundary(last forward step)
  backward  node pre hook     call order checked; boundary(first backward step - 1)
            unpack hook       waits for the entry's prefetch (late: brings it back now); a
                              discarded entry is regenerated now if its chain has not run

  boundary(pos): every plan step <= pos has been issued on the compute stream, so the plan's
  actions with after_step <= pos are issued (evict: copy to host; prefetch: copy back;
  discard: the entry gives up its GPU tensor, no copy; recompute: the chain runs on the compute
  stream) and evicted entries whose ready_before_step - 1 <= pos give up their GPU tensor.

Recomputation (plans made with autovm-plan --recompute-ops, a subset of REPLAYABLE_OPS): a
recompute action's source step is replayed with the functional form of its op (batch norm in
training mode with the batch's statistics and no running ones, which the forward already
updated once, as without the adapter; a convolution through its module's own _conv_forward),
from the saved tensors it reads and the temporaries made before it in its chain.
Only tensors matched to the plan by identity (a module call's output or argument, or the
model's input) are discarded or read by a chain, never ones matched by size and order, so the
replay reads exactly the tensors the op read in forward.

Numerics never depend on how tensors were matched to the plan: a saved tensor comes back as
itself, as an exact copy of the bytes it had when it was saved, or as its op run again on the
same inputs by the same kernel (ReLU, addition and max pooling are exact; batch norm's kernel
is the one the forward ran; cuDNN keeps the algorithm it chose for a convolution's shape and
runs it again).

Max pooling's int64 indices (plans made with autovm-plan --pool-indices, as autovm.plan makes
them) are a saved tensor of the plan like any other: evicted, prefetched, discarded and
regenerated (max pooling replayed for its indices). A chain that makes both a pooling's output
and its indices runs the pooling once for the two, as the planner times it.

The modules, one job each (each one's docstring says what it owns and assumes):
  adapter.py    attach() and Attachment, which composes the parts below: the checks of plan,
                model and optimizer, the schedule of the plan's actions, the boundaries
  hooks.py      module, autograd node, saved-tensor and optimizer hooks (_Hooks)
  matching.py   real tensors and module calls to plan tensors and steps (_Matching)
  replay.py     discards and recompute chains, op replay (_Replay)
  copy_path.py  the copy backend: the bytes of evictions and prefetches (CopyPath)
  runtime_executor.py  the runtime backend (executor="runtime"): libautovm moves the real
                tensors' pages; the boundaries begin and end its steps, the tensors named
                here are bound to the plan, and the copy backend's evictions and prefetches
                are off (discards and recomputes stay the adapter's)
  trace.py      Stats, memory and time traces (_Trace)
  state.py      a training step's state: _Step, _Entry, _Packed
"""
import warnings

from .copy_path import CopyPath
from .errors import AutoVMError, OptimizerMismatchError, PlanFitError
from .hooks import _Hooks
from .matching import BUCKET_PREFIX, MOVABLE_KINDS, _Matching, onnx_scope  # noqa: F401

EXECUTORS = ("copy", "runtime")
from .planner import (REMOTE_READ_EXECUTORS, RUNTIME_KINDS,  # noqa: F401 (autovm.RUNTIME_KINDS)
                      RUNTIME_LAST_USE_KINDS,
                      optimizer_kind)
from .replay import REPLAYABLE_OPS, _Replay
from .trace import Stats, _Trace


def _ddp_class():
    try:
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel
    except ImportError:
        return None


class Attachment(_Hooks, _Matching, _Replay, _Trace):
    """Returned by attach(); a context manager. `stats` says what moved."""

    def __init__(self, model, optimizer, plan, unrealized="warn", memory_limit=None,
                 executor="copy", runtime_mode="plan", runtime_backend="cuda"):
        import torch

        if unrealized not in ("warn", "error", "ignore"):
            raise ValueError("unrealized: 'warn', 'error' or 'ignore'")
        if executor not in EXECUTORS:
            raise ValueError(f"executor: one of {', '.join(EXECUTORS)}, not {executor!r}")
        self.executor = executor
        self._movable = MOVABLE_KINDS if executor == "copy" else RUNTIME_KINDS
        self.runtime = None  # the RuntimeExecutor of executor="runtime"
        self.torch = torch
        self._int64 = torch.int64
        ddp = _ddp_class()
        # DistributedDataParallel: the hooks go on the module it wraps (whose parameter names
        # the plan has); DDP's own forward only adds its bucket rebuild and buffer broadcast.
        self.wrapper = model if ddp is not None and isinstance(model, ddp) else None
        if self.wrapper is not None:
            model = model.module
        self.model, self.optimizer, self.plan = model, optimizer, plan
        self.memory_limit = memory_limit
        # None, or a list each plan boundary appends to (set it to [] to start): a dict with
        # the training step, the plan position every step up to which has been issued ("pos";
        # -1 at the start of a training step), torch.cuda.memory_allocated() there and the
        # peak since the previous entry ("peak"); under autovm.allocator the pool's allocated
        # bytes, or on a vmm pool the device memory its chunks hold in use (an evicted tensor
        # stays allocated there, its pages unmapped; such rows add "asked" and "peak_asked",
        # the bytes the trainer's live allocations asked for, and "paged_out" and "paged_in",
        # the pool's running sums of the runtime's paging). Recording resets the peak statistics
        # at every boundary (so max_memory_allocated() then covers one interval), and costs a
        # few microseconds per boundary: for measurements of where memory goes, not for timing.
        self.memory_trace = None
        # None, or a list each plan boundary appends to (set it to [] to start): a dict with
        # the training step, the plan position ("pos", as in memory_trace; the optimizer adds
        # the step before its first and its last) and a mark of when everything issued before
        # it had run (a CUDA event on the current stream; on the CPU, time.perf_counter_ns()).
        # A profile run under a plan without actions: time_rows() reads the marks and
        # measured_step_times() turns them into autovm-plan --step-times.
        self.time_trace = None
        self.stats = Stats()
        self.unrealized = []
        self._hooks = []
        self._ctx = None
        self._step = None   # the step whose forward is running
        self._last_step = None  # a weak reference to the last step begun
        self._steps = 0
        self.copies = CopyPath(torch)  # the copy backend (copy_path.py)
        self._check_data_parallel()
        warning = self._check_plan(unrealized)
        self._map_model()
        self._map_gradients()
        self._check_optimizer()
        self._schedule()
        if executor == "runtime":
            from .runtime_executor import make_runtime
            self.runtime = make_runtime(plan, runtime_mode, runtime_backend)
        warning = self._check_unmatched(unrealized, warning)
        opt_steps = [st["id"] for st in self.plan.steps if st["phase"] == "optimizer"]
        self.first_optimizer_step = min(opt_steps) if opt_steps else len(self.plan.steps)
        if warning:
            warnings.warn(warning, RuntimeWarning, stacklevel=3)

    # --- checks and the plan's maps, once ------------------------------------------------

    def _check_plan(self, unrealized):
        p = self.plan
        ops = sorted({p.steps[a["source_step"]]["op"] for a in p.actions
                      if a["kind"] == "recompute"} - set(REPLAYABLE_OPS))
        if ops:
            raise AutoVMError(f"{p.path}: the plan recomputes with {', '.join(ops)}, which the "
                              "PyTorch adapter cannot run again (it replays "
                              f"{', '.join(REPLAYABLE_OPS)}). Plan with --recompute-ops "
                              f"{','.join(REPLAYABLE_OPS)} (autovm.plan(..., recompute=True)) or "
                              "--no-recompute")
        remote = [a for a in p.actions if a["kind"] == "read_remote"]
        if remote and self.executor not in REMOTE_READ_EXECUTORS:
            steps = sorted({a["ready_before_step"] for a in remote})
            raise PlanFitError(
                f"{p.path}: the plan has steps read {len(remote)} tensors where they lie in host "
                f"memory (read_remote at steps {', '.join(map(str, steps[:8]))}"
                f"{', ...' if len(steps) > 8 else ''}), which executor={self.executor!r} "
                "cannot do: plan with autovm-plan --no-remote-reads (autovm.plan() does so for "
                "this executor) at a budget that holds every step's working set")
        # A recompute of a step's other output (batch norm's saved mean or inverse standard
        # deviation, which autograd saved and the adapter matches only by size): the adapter
        # leaves that tensor on the GPU, its discard and recompute unrealized.
        self.kept = {a["tensor"] for a in p.actions if a["kind"] == "recompute"
                     and p.steps[a["source_step"]]["outputs"][0] != a["tensor"]
                     and p.steps[a["source_step"]]["op"] != "MaxPool"}
        for a in p.actions:
            if a["kind"] == "discard" and a["tensor"] in self.kept:
                t = p.tensors[a["tensor"]]
                self.unrealized.append(("discard", t["kind"], t["name"], a["bytes"]))
        # (tensor, step) of each remote read: _at_last_use, here and in _unmatched_actions
        self._remote_at = {(a["tensor"], a["ready_before_step"]) for a in remote}
        for a in p.actions:
            t = p.tensors[a["tensor"]]
            if (a["kind"] in ("evict", "prefetch") and t["kind"] not in self._movable
                    and not self._at_last_use(a, t)):
                self.unrealized.append((a["kind"], t["kind"], t["name"], a["bytes"]))
        if self.unrealized and unrealized != "ignore":
            kinds = {}
            for kind, tkind, _, nbytes in self.unrealized:
                if kind in ("evict", "discard"):
                    key = tkind if kind == "evict" else "other outputs of recomputed steps"
                    kinds[key] = kinds.get(key, 0) + nbytes
            text = ", ".join(f"{k} {v / 1e6:.3f} MB" for k, v in sorted(kinds.items()))
            msg = (f"{p.path}: the plan also takes off the GPU tensors that the adapter cannot "
                   f"move or regenerate ({text}); they stay on the GPU, so PyTorch's memory "
                   "exceeds the plan's")
            if unrealized == "error":
                raise PlanFitError(msg + " (attach(..., unrealized='warn') runs it anyway)")
            return msg
        return None

    def _at_last_use(self, a, t):
        """Whether action `a` on plan tensor `t` is an activation gradient's eviction for the
        remote read of the next step, its last use, which the runtime executor can run: it binds
        the gradient just before that step (_map_gradients says which ones it reaches)."""
        return (self.executor == "runtime" and t["kind"] in RUNTIME_LAST_USE_KINDS
                and a["kind"] == "evict" and a["ready_before_step"] == a["after_step"] + 1
                and (a["tensor"], a["ready_before_step"]) in self._remote_at)

    def _check_data_parallel(self):
        dp = self.plan.data_parallel
        if self.wrapper is not None and dp is None:
            raise PlanFitError(
                f"the model is wrapped in DistributedDataParallel, whose gradient buckets (as "
                f"large as all parameter gradients) the plan {self.plan.path} does not count: "
                "plan with autovm.plan(..., data_parallel=True) (autovm-plan --data-parallel)")
        if self.wrapper is not None:
            cap = getattr(self.wrapper, "bucket_bytes_cap", None)
            if cap is not None and cap != dp.get("bucket_cap_bytes"):
                warnings.warn(f"DistributedDataParallel's bucket cap is {cap} B, the plan's "
                              f"{dp.get('bucket_cap_bytes')} B: bucket sizes differ from the "
                              "plan's (their total does not)", RuntimeWarning, stacklevel=4)
        elif dp is not None:
            warnings.warn(f"{self.plan.path} was made for DistributedDataParallel (its gradient "
                          "buckets are counted), the model is not wrapped in it: the plan "
                          "counts memory that is not used", RuntimeWarning, stacklevel=4)

    def _check_optimizer(self):
        if self.optimizer is None:
            return
        kind = optimizer_kind(self.optimizer)
        if kind != self.plan.optimizer:
            raise OptimizerMismatchError(
                f"the plan was made for optimizer '{self.plan.optimizer}', the optimizer is "
                f"{type(self.optimizer).__name__} ('{kind}'): plan again with this optimizer")
        own = {id(q) for q in self.model.parameters()}
        params = [q for g in self.optimizer.param_groups for q in g["params"]]
        stray = [q for q in params if id(q) not in own]
        if stray:
            raise OptimizerMismatchError(f"the optimizer holds {len(stray)} tensors that are not "
                                         "parameters of the model")
        n_plan = sum(1 for t in self.plan.tensors if t["kind"] == "parameter")
        if len(params) != n_plan:
            raise OptimizerMismatchError(f"the optimizer updates {len(params)} parameters, the "
                                         f"plan's optimizer step {n_plan}")

    def _schedule(self):
        p = self.plan
        mv = [a for a in p.actions if p.tensors[a["tensor"]]["kind"] in MOVABLE_KINDS]
        copies = self.executor == "copy"  # executor="runtime": libautovm moves the bytes
        self.evicts = sorted((a for a in mv if a["kind"] == "evict" and copies),
                             key=lambda a: a["after_step"])
        self.prefetches = sorted((a for a in mv if a["kind"] == "prefetch" and copies),
                                 key=lambda a: a["after_step"])
        self.discards = sorted((a for a in mv if a["kind"] == "discard"
                                and a["tensor"] not in self.kept), key=lambda a: a["after_step"])
        self._schedule_recomputes()
        # Other outputs of a call's steps (batch norm's saved mean and inverse std, say),
        # matched to tensors saved inside the call by size and order.
        self.call_outputs = {}
        for call, ids in self.call_steps.items():
            outs = []
            for sid in ids:
                for tid in p.steps[sid]["outputs"]:
                    if p.tensors[tid]["kind"] == "activation" and tid not in outs:
                        outs.append(tid)
            self.call_outputs[call] = outs

    # --- context manager -----------------------------------------------------------------

    def __enter__(self):
        self._register_hooks()
        if self.runtime is not None:
            self.runtime.apply_limit()  # again, if the attachment is entered again
            self.runtime.bind_model(self.model)
            self._grad_hooks = self.runtime.hook_gradients(self.model)
            self._hooks.extend(self._grad_hooks or ())
        self._ctx = self.torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._ctx.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.abandon_step()
        self.close()
        return False

    def abandon_step(self):
        """An exception left the last training step unfinished: its saved tensors are released
        now. An entry holds its tensor, whose autograd node holds the entry (a cycle through
        PyTorch's C++ objects that Python's garbage collector does not see, which only the
        step's backward would break), so without this they would stay allocated. The GPU
        first finishes the step's copies, which may read or write those tensors."""
        step = self._last_step() if self._last_step is not None else None
        if step is None:
            return
        torch = self.torch
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        entries = list(step.live.values()) + list(step.pending)
        entries += [e for _, e in step.releasing]
        for e in entries:
            e.gpu = e.cpu = e.d2h = e.h2d = None
        step.pending, step.releasing, step.due, step.discards_due = [], [], [], []
        self._step = None

    def close(self):
        if self._ctx is not None:
            self._ctx.__exit__(None, None, None)
            self._ctx = None
        for h in self._hooks:
            h.remove()
        self._hooks = []
        unwrap, self._unwrap_optimizer = getattr(self, "_unwrap_optimizer", None), None
        if unwrap is not None:
            unwrap()
        if self.runtime is not None:
            self.runtime.finish_training_step()
            self.runtime.restore()  # the model's tensors are all addressable after the context
            self.runtime.release_limit()  # the pool's limit as before attach()
        self._step = None

    def reset_stats(self):
        self.stats = Stats()

    # --- the plan's actions --------------------------------------------------------------

    def _boundary(self, step, pos):
        if pos < step.pos:
            return
        step.pos = pos
        if self.runtime is not None:
            self.runtime.advance(pos)
        self._trace(pos)
        self._time(step.index, pos)
        step.ev_i = self._issue(self.evicts, step.ev_i, pos, step.due)
        still = []
        for a in step.due:
            entries = self._entries(step, a["tensor"])
            if not entries:
                still.append(a)
                continue
            for e in entries:
                if self.copies.evict(e):
                    self.stats.evictions += 1
                    self.stats.bytes_to_host += e.nbytes
                    step.releasing.append((a["ready_before_step"], e))
        step.due = still
        self._discard_due(step, pos)
        keep = []
        for ready, e in step.releasing:
            if ready - 1 <= pos:
                self.copies.release(e)
            else:
                keep.append((ready, e))
        step.releasing = keep
        pf = self.prefetches
        while step.pf_i < len(pf) and pf[step.pf_i]["after_step"] <= pos:
            for r in step.by_tid.get(pf[step.pf_i]["tensor"], ()):
                e = r()
                if e is not None and e.gpu is None and e.cpu is not None:
                    self._prefetch(e)
                    self.stats.prefetches += 1
            step.pf_i += 1
        groups = self.groups
        while step.rc_i < len(groups) and groups[step.rc_i]["after_step"] <= pos:
            self._run_group(step, step.rc_i)
            step.rc_i += 1

    @staticmethod
    def _issue(actions, i, pos, due):
        """Appends to `due` the actions (sorted by after_step) from index i on that are issued
        by pos; returns the index of the first one not yet issued."""
        while i < len(actions) and actions[i]["after_step"] <= pos:
            due.append(actions[i])
            i += 1
        return i

    def _missed(self, step):
        """Evictions due whose tensor PyTorch never saved under that name (the loss's
        log-probabilities, say: the loss is computed outside the model)."""
        for a in step.due:
            self.stats.missed_evictions += 1
            self.stats.missed_bytes += a["bytes"]
        step.due = []
        self.stats.missed_discards += len(step.discards_due)
        step.discards_due = []

    def _prefetch(self, e):
        """The copy backend's copy back of evicted entry e, counted."""
        self.copies.prefetch(e)
        self.stats.bytes_to_device += e.nbytes

    def _check_memory(self, where):
        if self.memory_limit is None:
            return
        torch = self.torch
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            peak = torch.cuda.max_memory_allocated()
            if peak > self.memory_limit:
                raise PlanFitError(f"after {where}: torch.cuda.max_memory_allocated() is "
                                   f"{peak} B, over the limit of {self.memory_limit} B given "
                                   "to attach(): the plan no longer fits")


def attach(model, optimizer, plan, *, unrealized="warn", memory_limit=None, executor="copy",
           runtime_mode="plan", runtime_backend="cuda"):
    """Trains `model` under `plan` inside a `with` block (see the package's README).

    model: the module, or a DistributedDataParallel wrapping it (then the plan must be made
    with autovm.plan(..., data_parallel=True); one plan and one attach() per rank).

    unrealized: what to do when the plan also evicts tensors that saved-tensor hooks cannot move
    (parameters, gradients, optimizer state, activation gradients): 'warn' (default), 'error' or
    'ignore'; those tensors stay on the GPU.
    memory_limit: bytes; PlanFitError when torch.cuda.max_memory_allocated() exceeds it after a
    forward or backward pass (None: no check).
    executor: "copy" (saved tensors copied to pinned buffers by torch) or "runtime" (libautovm
    moves the real tensors, runtime_executor.py; needs allocator.install("vmm") or
    install("managed") first); runtime_mode: "plan" or "demand_paging" (managed pool only);
    runtime_backend: "cuda", or "host" for tests on the CPU. Leaving the context brings every
    tensor the runtime has off the device back.
    """
    from .planfile import Plan

    if not isinstance(plan, Plan):
        raise TypeError(f"plan: an autovm.Plan (autovm.plan() or autovm.load_plan()), not "
                        f"{type(plan).__name__}")
    return Attachment(model, optimizer, plan, unrealized=unrealized, memory_limit=memory_limit,
                      executor=executor, runtime_mode=runtime_mode,
                      runtime_backend=runtime_backend)
