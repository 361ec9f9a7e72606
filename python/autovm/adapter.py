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

Executors: "copy" (the default) moves saved tensors itself, as above; "runtime" leaves every
move to libautovm (runtime_executor.py): the boundaries begin and end the runtime's steps, the
tensors named here are bound to the plan, and the copy path's evictions and prefetches are off
(discards and recomputes stay the adapter's).

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
"""
import collections
import re
import time
import warnings
import weakref

from .errors import (AutoVMError, BatchMismatchError, HookOrderError, ModelMismatchError,
                     OptimizerMismatchError, PlanFitError)
from .planner import optimizer_kind

MOVABLE_KINDS = ("activation", "input")  # what saved-tensor hooks can move
# What executor="runtime" binds (runtime_executor.py); activation gradients, workspaces and the
# label stay where PyTorch puts them.
RUNTIME_KINDS = ("activation", "input", "parameter", "buffer", "gradient", "optimizer_state")
EXECUTORS = ("copy", "runtime")
# ONNX ops the adapter can run again from what autograd saved (autovm-plan --recompute-ops).
REPLAYABLE_OPS = ("Add", "BatchNormalization", "Conv", "MaxPool", "Relu")
_POOL_SLICE_BYTES = 64 << 20  # max pooling's replay: int64 indices of one slice of the batch
BUCKET_PREFIX = "ddp_bucket."  # DDP's gradient buckets in a --data-parallel plan (buffers)


def _ddp_class():
    try:
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel
    except ImportError:
        return None


def _unqualified(qualified):
    """torch.onnx's scope name of a module: its name from the last non-numeric atom on
    ('layer1.0.conv1' -> 'conv1', 'layer1.0' -> 'layer1.0')."""
    atoms = qualified.split(".")
    for i in range(len(atoms) - 1, -1, -1):
        if not atoms[i].isnumeric():
            return ".".join(atoms[i:])
    return qualified


def onnx_scope(name):
    """The TorchScript exporter's node-name scope of module `name` ('' is the root):
    'layer1.0.conv1' -> '/layer1/layer1.0/conv1'."""
    if not name:
        return ""
    parts = name.split(".")
    return "".join("/" + _unqualified(".".join(parts[:i])) for i in range(1, len(parts) + 1))


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


def _nbytes(t):
    return t.numel() * t.element_size()


def _dtype_name(dtype):
    """A torch dtype as plans name it (torch.float32 -> 'float32', torch.int64 -> 'int64')."""
    return str(dtype).replace("torch.", "")


class Stats:
    """What the adapter did, summed over the training steps since attach() (or reset())."""

    FIELDS = ("training_steps",      # COUNT: forward passes run under the plan
              "evictions",           # COUNT: saved tensors copied to host and dropped on the GPU
              "bytes_to_host",       # SUM: their bytes
              "prefetches",          # COUNT: copies back issued ahead, at the plan's after_step
              "late_prefetches",     # COUNT: copies back issued at unpack (not yet prefetched)
              "bytes_to_device",     # SUM: bytes of both kinds of copies back
              "missed_evictions",    # COUNT: plan evictions of activations PyTorch never saved
              "missed_bytes",        # SUM: their bytes
              "discards",            # COUNT: saved tensors dropped on the GPU to be regenerated
              "recomputes",          # COUNT: tensors made again by a chain (temporaries too)
              "bytes_recomputed",    # SUM: their bytes
              "replays",             # COUNT: ops run by chains (one for a step's several outputs)
              "late_recomputes",     # COUNT: chains run at unpack (no boundary before the use)
              "missed_discards")     # COUNT: plan discards of tensors not held by identity

    def __init__(self):
        for f in self.FIELDS:
            setattr(self, f, 0)

    def as_dict(self):
        return {f: getattr(self, f) for f in self.FIELDS}

    def __repr__(self):
        return "Stats(" + ", ".join(f"{k}={v}" for k, v in self.as_dict().items()) + ")"


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


class Attachment:
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
        # peak since the previous entry ("peak"). Recording resets PyTorch's peak statistics
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
        self._steps = 0
        self._streams = {}
        self._check_data_parallel()
        warning = self._check_plan(unrealized)
        self._map_model()
        self._check_optimizer()
        self._schedule()
        if executor == "runtime":
            from .runtime_executor import make_runtime
            self.runtime = make_runtime(plan, runtime_mode, runtime_backend)
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
        for a in p.actions:
            t = p.tensors[a["tensor"]]
            if a["kind"] in ("evict", "prefetch") and t["kind"] not in self._movable:
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

    def _map_model(self):
        p, model = self.plan, self.model
        # Parameters and buffers: the exporter names initializers by state_dict names.
        params = dict(model.named_parameters())
        buffers = dict(model.named_buffers())
        problems = []
        for t in p.tensors:
            if t["kind"] not in ("parameter", "buffer"):
                continue
            if t["kind"] == "buffer" and t["name"].startswith(BUCKET_PREFIX) and p.data_parallel:
                continue  # DDP's Reducer holds it, not the model
            q = params.get(t["name"]) if t["kind"] == "parameter" else buffers.get(t["name"])
            if q is None:
                problems.append(f"{t['kind']} {t['name']} of the plan is not in the model")
            elif _nbytes(q) != t["bytes"]:
                problems.append(f"{t['name']}: {tuple(q.shape)} ({_nbytes(q)} B) in the model, "
                                f"{p.shapes.get(t['id'])} ({t['bytes']} B) in the plan")
        plan_params = {t["name"] for t in p.tensors if t["kind"] == "parameter"}
        extra = [n for n, q in params.items() if q.requires_grad and n not in plan_params]
        if extra:
            problems.append(f"parameters of the model not in the plan: {', '.join(extra[:5])}")
        # Read by _scan_state once a step (None: not yet this step).
        self._param_ids = self._param_ptrs = None
        self._state_root, self._parameter = model, self.torch.nn.Parameter

        # Module calls: the exporter's node scope is the module's scope, '_k' for call k > 0.
        modules = dict(model.named_modules())
        by_scope = {onnx_scope(n): n for n in modules if n}
        self._leaves = {n for n, m in modules.items() if n and not any(True for _ in m.children())}
        first_fwd, last_fwd, first_bwd = {}, {}, {}
        self.call_steps = {}
        for s in p.steps:
            if not s["node"] or "/" not in s["node"]:
                continue
            scope = s["node"].rsplit("/", 1)[0]
            call = self._resolve(scope, by_scope)
            if call is None:
                if s["phase"] == "forward" and scope:
                    problems.append(f"plan step {s['id']} ({s['node']}): no module at "
                                    f"'{scope}' in the model")
                continue
            if call[0] not in self._leaves:
                continue  # a functional op inside a container (Add, Flatten): no hooks needed
            if s["phase"] == "forward":
                first_fwd.setdefault(call, s["id"])
                last_fwd[call] = s["id"]
                self.call_steps.setdefault(call, []).append(s["id"])
            elif s["phase"] == "backward":
                first_bwd.setdefault(call, s["id"])
        if problems:
            more = f" (and {len(problems) - 8} more)" if len(problems) > 8 else ""
            raise ModelMismatchError(f"the model does not match the plan {p.path}: "
                                     + "; ".join(problems[:8]) + more)
        self.fwd_seq = sorted(first_fwd, key=first_fwd.get)
        self.first_fwd, self.last_fwd, self.first_bwd = first_fwd, last_fwd, first_bwd
        self._planned_modules = {c[0] for c in self.fwd_seq}
        fwd_steps = [s["id"] for s in p.steps if s["phase"] == "forward"]
        self.last_forward_step = max(fwd_steps) if fwd_steps else -1
        inputs = [t for t in p.tensors if t["kind"] == "input"]
        self.input_tensor = inputs[0] if inputs else None
        self._input_id = self.input_tensor["id"] if inputs else None
        self.step_call = {}  # forward step -> its leaf module call
        for call, ids in self.call_steps.items():
            for sid in ids:
                self.step_call[sid] = call
        # What the adapter matches by identity: each call's output, each call's first input
        # (a functional op's result, such as a concatenation or a residual sum, reaches the
        # module after it as its argument), and the model's input.
        self.identity_tids = {p.steps[self.last_fwd[c]]["outputs"][0] for c in self.fwd_seq}
        self.call_input = {}
        for c in self.fwd_seq:
            ins = [t for t in p.steps[self.first_fwd[c]]["inputs"]
                   if p.tensors[t]["kind"] in MOVABLE_KINDS]
            if ins:
                self.call_input[c] = ins[0]
                self.identity_tids.add(ins[0])
        if self.input_tensor is not None:
            self.identity_tids.add(self.input_tensor["id"])
        # Max pooling's int64 indices (plans made with autovm-plan --pool-indices): the only
        # int64 tensor a max pooling call saves, so matched to the call's indices exactly.
        self.pool_indices = bool(p.options.get("pool_indices"))
        self.indices_tids = {p.steps[sid]["outputs"][1] for sid in self.step_call
                             if p.steps[sid]["op"] == "MaxPool"
                             and len(p.steps[sid]["outputs"]) > 1}
        self.identity_tids |= self.indices_tids

    @staticmethod
    def _resolve(scope, by_scope):
        if scope in by_scope:
            return (by_scope[scope], 0)
        head, _, last = scope.rpartition("/")
        m = re.match(r"^(.*)_(\d+)$", last)
        if m and f"{head}/{m.group(1)}" in by_scope:
            return (by_scope[f"{head}/{m.group(1)}"], int(m.group(2)))
        return None

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

    def _schedule_recomputes(self):
        """The plan's recompute actions in groups, one per (after_step, ready_before_step), in
        the plan's (dependency) order within a group; checked against what the adapter can
        find: every tensor a chain reads is a temporary made before it in its group, a
        parameter or buffer (read from the module), or a tensor matched by identity."""
        p = self.plan
        self.groups = []        # {"after_step", "ready_before_step", "actions", "targets",
        #                          "sources"}
        self.regen_groups = {}  # tensor -> [(after_step, group index)]: chains that make it
        self.step_module = {}   # replayed batch norm, convolution, max pooling step -> module
        by_key = {}
        for a in p.actions:
            if a["kind"] != "recompute" or a["tensor"] in self.kept:
                continue
            key = (a["after_step"], a["ready_before_step"])
            if key not in by_key:
                by_key[key] = {"after_step": key[0], "ready_before_step": key[1],
                               "actions": [], "targets": []}
                self.groups.append(by_key[key])
            by_key[key]["actions"].append(a)
        for g in self.groups:  # source step -> how many of the group's actions it makes
            g["sources"] = collections.Counter(a["source_step"] for a in g["actions"])
        self.groups.sort(key=lambda g: g["after_step"])  # stable: plan order otherwise
        problems = []
        for gi, g in enumerate(self.groups):
            made = set()
            for a in g["actions"]:
                s = p.steps[a["source_step"]]
                for tid in s["inputs"]:
                    if p.tensors[tid]["kind"] in ("parameter", "buffer") or tid in made:
                        continue
                    if tid not in self.identity_tids:
                        problems.append(f"the chain before step {a['ready_before_step']} reads "
                                        f"{p.tensors[tid]['name']}, which is no module call's "
                                        "output or argument")
                if s["op"] in ("BatchNormalization", "Conv", "MaxPool"):
                    call = self.step_call.get(s["id"])
                    kind = {"BatchNormalization": "BatchNorm"}.get(s["op"], s["op"])
                    m = self.model.get_submodule(call[0]) if call else None
                    if m is None or not type(m).__name__.startswith(kind):
                        problems.append(f"step {s['id']} ({s['node']}) is not a {kind} module "
                                        "call the adapter can replay")
                    self.step_module[s["id"]] = m
                made.add(a["tensor"])
                # docs/execution-model.md, "Recompute chains and temporaries" (own copy)
                if p.tensors[a["tensor"]]["last"] >= a["ready_before_step"]:  # not a temporary
                    if a["tensor"] not in self.identity_tids:
                        problems.append(f"{p.tensors[a['tensor']]['name']} is recomputed but is "
                                        "no module call's output or argument")
                    g["targets"].append(a["tensor"])
                    self.regen_groups.setdefault(a["tensor"], []).append((a["after_step"], gi))
        for a in self.discards:
            if a["tensor"] not in self.regen_groups:
                problems.append(f"{p.tensors[a['tensor']]['name']} is discarded and never "
                                "recomputed")
        if problems:
            more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
            raise PlanFitError(f"{p.path}: the adapter cannot replay the plan's recomputation: "
                               + "; ".join(problems[:5]) + more)

    # --- context manager -----------------------------------------------------------------

    def __enter__(self):
        torch = self.torch
        root = self.model
        self._hooks.append(root.register_forward_pre_hook(self._root_pre))
        self._hooks.append(root.register_forward_hook(self._root_post))
        for name, m in root.named_modules():
            if name in self._planned_modules:
                self._hooks.append(m.register_forward_pre_hook(self._make_pre(name)))
                self._hooks.append(m.register_forward_hook(self._make_post(name)))
        self._hook_optimizer()
        if self.runtime is not None:
            self.runtime.bind_model(root)
            self._grad_hooks = self.runtime.hook_gradients(root)
            self._hooks.extend(self._grad_hooks or ())
        self._ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._ctx.__enter__()
        return self

    def _hook_optimizer(self):
        """Marks for time_trace around the optimizer's step: its pre and post hooks (torch >=
        2.0), else a wrapper of this optimizer's step, removed by close()."""
        opt = self.optimizer
        if hasattr(opt, "register_step_pre_hook"):
            self._hooks.append(opt.register_step_pre_hook(lambda *a: self._optimizer_mark(False)))
            self._hooks.append(opt.register_step_post_hook(lambda *a: self._optimizer_mark(True)))
            return
        own = opt.__dict__.get("step")
        inner = opt.step

        def step(*args, **kwargs):
            self._optimizer_mark(False)
            result = inner(*args, **kwargs)
            self._optimizer_mark(True)
            return result
        opt.step = step

        def unwrap():
            if opt.__dict__.get("step") is not step:
                return  # wrapped again since (an LR scheduler of torch 1.13): left as it is
            if own is not None:
                opt.step = own
            else:
                del opt.step
        self._unwrap_optimizer = unwrap

    def __exit__(self, *exc):
        self.close()
        return False

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
        self._step = None

    def reset_stats(self):
        self.stats = Stats()

    # --- streams -----------------------------------------------------------------------------

    def _cuda(self, device):
        return device.type == "cuda"

    def _copy_streams(self, device):
        s = self._streams.get(device)
        if s is None:
            torch = self.torch
            s = (torch.cuda.Stream(device=device), torch.cuda.Stream(device=device))
            self._streams[device] = s
        return s  # (device to host, host to device)

    # --- forward hooks -------------------------------------------------------------------

    def _root_pre(self, module, args):
        torch = self.torch
        self._step = None
        if not module.training or not torch.is_grad_enabled():
            return  # evaluation: nothing is saved for backward, nothing to plan
        x = _first_tensor(args)
        p = self.plan
        if x is not None and p.batch is not None and x.dim() > 0 and x.shape[0] != p.batch:
            raise BatchMismatchError(f"batch of {x.shape[0]}, the plan {p.path} was made for "
                                     f"batch {p.batch}: plan again for this batch size")
        if x is not None and self.input_tensor is not None and _nbytes(x) != self.input_tensor["bytes"]:
            raise PlanFitError(f"the input is {tuple(x.shape)} ({_nbytes(x)} B), the plan's "
                               f"{p.shapes.get(self.input_tensor['id'])} "
                               f"({self.input_tensor['bytes']} B): the plan no longer fits; "
                               "plan again for this input")
        # Parameters and buffers (and views of them) are never moved; their addresses are
        # taken each step, as the model may have moved, by _scan_state at the step's first
        # saved tensor that needs them: after its first kernel is launched.
        self._state_root, self._param_ids, self._param_ptrs = module, None, None
        self._steps += 1
        step = _Step(self, self._steps)
        if x is not None and self.input_tensor is not None:
            step.named[id(x)] = (self.input_tensor["id"], weakref.ref(x), x._version)
        if self.runtime is not None:
            self.runtime.start_training_step()  # ends one left unfinished (no optimizer step)
            if x is not None and self.input_tensor is not None:
                self.runtime.bind(self._input_id, x)
        self._step = step
        self.stats.training_steps += 1
        self._trace(-1)
        self._time(self._steps, -1)

    def _trace(self, pos):
        if self.memory_trace is None:
            return
        torch = self.torch
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return
        self.memory_trace.append({"step": self._steps, "pos": pos,
                                  "allocated": torch.cuda.memory_allocated(),
                                  "peak": torch.cuda.max_memory_allocated()})
        torch.cuda.reset_peak_memory_stats()

    def _time(self, training_step, pos):
        if self.time_trace is None:
            return
        torch = self.torch
        if torch.cuda.is_available() and torch.cuda.is_initialized() and self._on_cuda():
            mark = torch.cuda.Event(enable_timing=True)
            mark.record()
        else:
            mark = time.perf_counter_ns()
        self.time_trace.append({"step": training_step, "pos": pos, "mark": mark})

    def _on_cuda(self):
        q = next(self.model.parameters(), None)
        return q is not None and q.is_cuda

    def _optimizer_mark(self, done):
        """The optimizer's step starts after the training step's backward and ends the step."""
        last = len(self.plan.steps) - 1
        if self.runtime is not None:
            self.runtime.optimizer_boundary(self, done)
        self._time(self._steps, last if done else self.first_optimizer_step - 1)

    def time_rows(self):
        """time_trace with each mark read: [{"step", "pos", "us"}], us from an arbitrary origin
        (waits for the GPU to reach the last mark). JSON-ready, for planfile.step_times."""
        trace = self.time_trace or []
        events = [e["mark"] for e in trace if not isinstance(e["mark"], int)]
        if events:
            events[-1].synchronize()
        rows = []
        for e in trace:
            mark = e["mark"]
            us = mark / 1e3 if isinstance(mark, int) else events[0].elapsed_time(mark) * 1e3
            rows.append({"step": e["step"], "pos": e["pos"], "us": us})
        return rows

    def measured_step_times(self, skip=1):
        """Each plan step's compute time in microseconds, measured by time_trace (the median
        over its training steps after the first `skip`): {"step_us": [...]} for autovm-plan
        --step-times (autovm.plan(..., step_times=...)). planfile.step_times says how."""
        from .planfile import step_times
        return step_times(self.plan.steps, self.time_rows(), skip=skip)

    def _root_post(self, module, args, output):
        step = self._step
        if step is None:
            return
        self._boundary(step, self.last_forward_step)
        self._missed(step)
        step.forward_done = True
        self._check_memory("the forward pass")
        self._step = None

    def _missed(self, step):
        """Evictions due whose tensor PyTorch never saved under that name (the loss's
        log-probabilities, say: the loss is computed outside the model)."""
        for a in step.due:
            self.stats.missed_evictions += 1
            self.stats.missed_bytes += a["bytes"]
        step.due = []
        self.stats.missed_discards += len(step.discards_due)
        step.discards_due = []

    def _make_pre(self, name):
        def pre(module, args):
            step = self._step
            if step is None:
                return
            k = step.calls.get(name, 0)
            step.calls[name] = k + 1
            call = (name, k)
            seq = self.fwd_seq
            if step.fwd_idx >= len(seq) or seq[step.fwd_idx] != call:
                want = (f"{self._call_text(seq[step.fwd_idx])} (forward step "
                        f"{self.first_fwd[seq[step.fwd_idx]]})" if step.fwd_idx < len(seq)
                        else "no more module calls")
                raise HookOrderError(f"forward: {self._call_text(call)} ran where the plan "
                                     f"expects {want}: the model's forward does not follow the "
                                     "plan's order; plan again for this model")
            step.fwd_idx += 1
            step.current = call
            step.pending = []
            self._name_input(step, call, _first_tensor(args))
            self._boundary(step, self.first_fwd[call] - 1)
        return pre

    def _name_input(self, step, call, x):
        """Names a call's argument by identity as the plan's first input of the call, when it
        has that tensor's shape and no name yet (a view, such as a flattened one, has another
        shape and stays unnamed)."""
        tid = self.call_input.get(call)
        if tid is None or x is None or tuple(x.shape) != tuple(self.plan.shapes.get(tid, ())):
            return
        named = step.named.get(id(x))
        if named is not None and named[1]() is x and named[2] == x._version:
            return
        step.named[id(x)] = (tid, weakref.ref(x), x._version)
        e = step.live.get(id(x))  # saved already, by a functional op before this call
        if e is not None and e.tid is None and e.ref() is x and e.version == x._version:
            self._name(step, e, tid, exact=True)

    def _make_post(self, name):
        def post(module, args, output):
            step = self._step
            if step is None or step.current is None or step.current[0] != name:
                return
            call = step.current
            step.current = None
            p = self.plan
            out = _first_tensor(output)
            outs = self.call_outputs.get(call, [])
            main = p.steps[self.last_fwd[call]]["outputs"][0]
            if out is not None:
                if _nbytes(out) != p.tensors[main]["bytes"]:
                    raise PlanFitError(
                        f"{self._call_text(call)} returned {tuple(out.shape)} ({_nbytes(out)} B), "
                        f"the plan's {p.tensors[main]['name']} is {p.shapes.get(main)} "
                        f"({p.tensors[main]['bytes']} B): the plan no longer fits this model "
                        "or input; plan again")
                step.named[id(out)] = (main, weakref.ref(out), out._version)
                if self.runtime is not None and main not in self.regen_groups:
                    self.runtime.bind(main, out, made=True)
            for e in step.pending:
                if e.tid is not None:
                    continue
                t = e.ref()
                if t is not None and t is out and e.version == out._version:
                    self._name(step, e, main, exact=True)
                    continue
                for tid in outs:
                    if (tid != main and tid not in step.assigned
                            and p.tensors[tid]["bytes"] == e.nbytes
                            and p.tensors[tid]["dtype"] == _dtype_name(e.dtype)):
                        step.assigned.add(tid)
                        self._name(step, e, tid, exact=tid in self.indices_tids)
                        break
            step.pending = []
            self._boundary(step, self.last_fwd[call])
            if out is not None and out.grad_fn is not None and call in self.first_bwd:
                step.grad_calls.append(call)
                node = out.grad_fn
                hook = self._make_backward_pre(step, call)
                if hasattr(node, "register_prehook"):
                    node.register_prehook(lambda grad_outputs: hook())
                else:
                    out.register_hook(lambda grad: hook())
        return post

    def _call_text(self, call):
        name, k = call
        return f"module '{name}'" + (f" (call {k + 1})" if k else "")

    def _name(self, step, entry, tid, exact=False):
        entry.tid = tid
        entry.exact = exact
        step.by_tid.setdefault(tid, []).append(weakref.ref(entry))
        if self.runtime is not None and tid not in self.regen_groups:  # recomputed: op replay
            self.runtime.bind(tid, entry.gpu, made=tid != self._input_id)

    # --- saved tensors -------------------------------------------------------------------

    def _scan_state(self):
        """The ids and (non-empty) data pointers of the model's parameters and buffers, read
        from the modules' own dictionaries (module.parameters() and buffers() walk the same
        modules through generators and a memo set, which takes longer)."""
        mods, todo = [], [self._state_root]
        while todo:
            m = todo.pop()
            mods.append(m)
            todo.extend(c for c in m._modules.values() if c is not None)
        state = [q for m in mods for d in (m._parameters, m._buffers) for q in d.values()
                 if q is not None]
        self._param_ids = set(map(id, state))
        self._param_ptrs = {q.data_ptr() for q in state if q.numel()}

    def _pack(self, t):
        step = self._step
        if (step is None
                or not (t.is_floating_point() or (self.pool_indices and t.dtype == self._int64))
                or t.numel() == 0 or isinstance(t, self._parameter)):
            return t
        # The step's input and parameters need no scan: a first convolution saves just those,
        # so the scan runs while its kernel does, not before the step's first launch, where it
        # would keep the GPU waiting (tools/bench/step_start.py times the host's start of a
        # step).
        named = step.named.get(id(t))
        if named is None or named[0] != self._input_id or named[1]() is not t:
            if self._param_ids is None:
                self._scan_state()
            if id(t) in self._param_ids or t.data_ptr() in self._param_ptrs:
                return t
        e = step.live.get(id(t))
        if e is None or e.ref() is not t or e.version != t._version:
            e = _Entry(t)
            step.live[id(t)] = e
            named = step.named.get(id(t))
            if named is not None and named[1]() is t and named[2] == t._version:
                self._name(step, e, named[0], exact=True)
            else:
                step.pending.append(e)
        e.uses += 1
        return _Packed(e, step)

    def _unpack(self, packed):
        if not isinstance(packed, _Packed):
            return packed
        e = packed.entry
        if e.cpu is None and e.gpu is not None and e.gpu._version != e.version:
            raise AutoVMError(_MODIFIED.format(tuple(e.size)))
        if e.gpu is None and e.cpu is None:
            self._regenerate(packed.step, e, late=True)
        if e.gpu is None:
            self._prefetch(e)
            self.stats.late_prefetches += 1
        g = e.gpu
        if e.h2d is not None:
            self.torch.cuda.current_stream(e.device).wait_event(e.h2d)
            e.h2d = None
        if e.d2h is not None:  # unpacked before its eviction was released
            self.torch.cuda.current_stream(e.device).wait_event(e.d2h)
            e.d2h = None
        e.uses -= 1
        if e.uses <= 0 and e.cpu is not None:
            e.gpu = None  # the host copy stays for a second backward (retain_graph)
        return g

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
                if self._evict(e):
                    step.releasing.append((a["ready_before_step"], e))
        step.due = still
        self._discard_due(step, pos)
        keep = []
        for ready, e in step.releasing:
            if ready - 1 <= pos:
                self._release(e)
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

    @staticmethod
    def _entries(step, tid, exact=False):
        """The live entries named tid (only those matched by identity, when exact)."""
        return [e for e in (r() for r in step.by_tid.get(tid, ()))
                if e is not None and (e.exact or not exact)]

    def _discard_due(self, step, pos):
        """Discards issued by pos: each entry (matched by identity) gives up its GPU tensor
        without a copy and waits for the chain group that makes it again."""
        step.dc_i = self._issue(self.discards, step.dc_i, pos, step.discards_due)
        still = []
        for a in step.discards_due:
            entries = self._entries(step, a["tensor"], exact=True)
            if not entries:
                still.append(a)
                continue
            after = [gi for s, gi in self.regen_groups[a["tensor"]] if s >= a["after_step"]]
            for e in entries:
                if e.gpu is None or e.cpu is not None or not after:
                    continue
                if e.gpu._version != e.version:
                    raise AutoVMError(_MODIFIED.format(tuple(e.size)))
                e.gpu, e.regen = None, after[0]
                self.stats.discards += 1
        step.discards_due = still

    def _regenerate(self, step, e, late=False):
        if e.regen is None:
            raise AutoVMError(f"a saved tensor of shape {tuple(e.size)} was discarded and no "
                              "chain of the plan makes it again")
        if late and e.regen not in step.groups_run:
            self.stats.late_recomputes += 1
        self._run_group(step, e.regen)
        if e.gpu is None:
            raise AutoVMError(f"the plan's chain before step "
                              f"{self.groups[e.regen]['ready_before_step']} did not make "
                              f"{self.plan.tensors[e.tid]['name']} again")

    def _run_group(self, step, gi):
        """Runs recompute group gi on the compute stream (once per training step) when one of
        its tensors was discarded: every action in order, each from the temporaries made
        before it and the tensors autograd saved."""
        if gi in step.groups_run:
            return
        step.groups_run.add(gi)
        g = self.groups[gi]
        waiting = [e for tid in g["targets"] for e in self._entries(step, tid)
                   if e.regen == gi and e.gpu is None]
        if not waiting:
            return  # its discards were not made (missed_discards): the tensors stayed
        torch = self.torch
        temps = {}
        made = {}  # source step -> what one replay of it gave, for its other outputs
        with torch.no_grad():
            for a in g["actions"]:
                s = self.plan.steps[a["source_step"]]
                indices = a["tensor"] in self.indices_tids
                both = s["op"] == "MaxPool" and g["sources"][s["id"]] > 1
                if s["id"] not in made:  # max pooling's indices beside its output: one replay
                    args = [self._chain_input(step, tid, temps, a)
                            for tid in self._data_inputs(s)]
                    made[s["id"]] = (self._max_pool(self.step_module[s["id"]], args[0], both=True)
                                     if both else self._replay(s, args, indices=indices))
                    self.stats.replays += 1
                out = made[s["id"]][1 if indices else 0] if both else made[s["id"]]
                temps[a["tensor"]] = out
                self.stats.recomputes += 1
                self.stats.bytes_recomputed += _nbytes(out)
        for e in waiting:
            t = temps[e.tid]
            if t.size() != e.size or t.dtype != e.dtype:
                raise AutoVMError(f"recomputing {self.plan.tensors[e.tid]['name']} gave "
                                  f"{tuple(t.size())} {t.dtype}, autograd saved "
                                  f"{tuple(e.size)} {e.dtype}: the plan does not fit the model")
            if t.stride() != e.stride:
                t = torch.empty_strided(e.size, e.stride, dtype=e.dtype,
                                        device=t.device).copy_(t)
            e.gpu, e.version, e.regen = t, t._version, None

    def _data_inputs(self, s):
        """The inputs of a replayed step that are data (the first only of batch norm,
        convolution and max pooling: their parameters and statistics are read from the
        module)."""
        ins = s["inputs"]
        return ins[:2] if s["op"] == "Add" else ins[:1]

    def _chain_input(self, step, tid, temps, action):
        if tid in temps:
            return temps[tid]
        for e in self._entries(step, tid, exact=True):
            if e.gpu is None and e.cpu is None and e.regen is not None:
                self._regenerate(step, e)
            if e.gpu is None and e.cpu is not None:  # evicted, not yet back: bring it now
                self._prefetch(e)
                self.stats.late_prefetches += 1
            if e.gpu is not None:
                if e.h2d is not None:
                    self.torch.cuda.current_stream(e.device).wait_event(e.h2d)
                    e.h2d = None
                return e.gpu
        p = self.plan
        raise AutoVMError(f"recomputing {p.tensors[action['tensor']]['name']} needs "
                          f"{p.tensors[tid]['name']}, which autograd did not save under that "
                          "name: the plan does not fit this model")

    def _replay(self, s, args, indices=False):
        """Step s of the plan run again, functionally (no module hooks fire); for max pooling,
        its indices rather than its output when `indices`."""
        torch = self.torch
        F = torch.nn.functional
        op = s["op"]
        if op == "Relu":
            return F.relu(args[0])
        if op == "Add":
            return torch.add(args[0], args[1])
        m = self.step_module[s["id"]]
        if op == "MaxPool":
            return self._max_pool(m, args[0], indices)
        if op == "Conv":
            # The module's own call (padding mode included) with the same weights: backward
            # runs before the optimizer changes them. cuDNN runs the algorithm it chose for the
            # forward, which it keeps per shape, so the bits are the forward's.
            return m._conv_forward(args[0], m.weight, m.bias)
        # BatchNormalization as the module ran it (torch.nn.modules.batchnorm._BatchNorm):
        # with the batch's statistics when training (or tracking none), and no running
        # statistics, which the forward already updated once (cuDNN normalizes with the batch's
        # statistics either way; copies of the running ones cost two more kernels a replay);
        # with the running statistics, which it left alone, when frozen (eval mode).
        if m.training or (m.running_mean is None and m.running_var is None):
            return F.batch_norm(args[0], None, None, m.weight, m.bias, True, 0.0, m.eps)
        return F.batch_norm(args[0], m.running_mean, m.running_var, m.weight, m.bias, False, 0.0,
                            m.eps)

    def _max_pool(self, m, x, indices=False, both=False):
        """Max pooling as module m runs it: its output, or its int64 indices when `indices`, or
        (output, indices) when `both` (a chain that makes both runs the pooling once, as the
        planner times it: one pass over the batch).
        On CUDA, PyTorch's max_pool2d makes the indices (one per output element) even when
        nothing keeps them: for one of the two, the batch goes through in slices whose indices
        take at most _POOL_SLICE_BYTES, so the replay needs little more than the tensor it
        makes. A slice's indices are sized by its input's elements (a sample's output has about
        as many at most: PyTorch allows padding of at most half the kernel), so no pooling runs
        twice. The maximum is exact and indices count within a sample's plane, so slices give
        the same bytes."""
        torch = self.torch
        F = torch.nn.functional

        def pool(t):
            out, where = F.max_pool2d(t, m.kernel_size, m.stride, m.padding, m.dilation,
                                      ceil_mode=m.ceil_mode, return_indices=True)
            return where if indices else out
        if both:
            return F.max_pool2d(x, m.kernel_size, m.stride, m.padding, m.dilation,
                                ceil_mode=m.ceil_mode, return_indices=True)
        batch = x.shape[0] if x.dim() == 4 else 1
        n = max(1, _POOL_SLICE_BYTES // max(8 * (x.numel() // max(batch, 1)), 1))
        if n >= batch:
            return pool(x)
        first = pool(x[:n])
        out = torch.empty((batch,) + tuple(first.shape[1:]), dtype=first.dtype,
                          device=first.device)
        out[:n] = first
        for i in range(n, batch, n):
            out[i:i + n] = pool(x[i:i + n])
        return out

    def _evict(self, e):
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
        self.stats.evictions += 1
        self.stats.bytes_to_host += e.nbytes
        return True

    def _release(self, e):
        if e.gpu is None or e.cpu is None:
            return
        if e.d2h is not None:
            # The compute stream passes this point only once the copy is done, so memory the
            # caching allocator hands out again after the free below is never still being read.
            self.torch.cuda.current_stream(e.device).wait_event(e.d2h)
            e.d2h = None
        e.gpu = None

    def _prefetch(self, e):
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
        self.stats.bytes_to_device += e.nbytes

    # --- backward ------------------------------------------------------------------------

    def _make_backward_pre(self, step, call):
        # The hook lives on the autograd node, which outlives the backward pass while the
        # caller keeps the loss; a strong reference would keep the step's entries, and with them
        # every saved tensor the plan did not move, alive into the next step (PyTorch itself
        # frees saved tensors as soon as backward is done). The step is held by what autograd
        # saved (_Packed) and lives exactly as long as that.
        step_ref = weakref.ref(step)
        del step

        def hook():
            step = step_ref()
            if step is None:
                return
            if step.bwd_seq is None:
                step.bwd_seq = sorted(step.grad_calls, key=lambda c: self.first_bwd[c])
            seq = step.bwd_seq
            if step.bwd_idx >= len(seq) or seq[step.bwd_idx] != call:
                want = (f"{self._call_text(seq[step.bwd_idx])} (backward step "
                        f"{self.first_bwd[seq[step.bwd_idx]]})" if step.bwd_idx < len(seq)
                        else "no more module calls")
                raise HookOrderError(f"backward: {self._call_text(call)} ran where the plan "
                                     f"expects {want}")
            step.bwd_idx += 1
            self._boundary(step, self.first_bwd[call] - 1)
            if step.bwd_idx == len(seq):
                self._missed(step)
                self._check_memory("the backward pass")
        return hook

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
    moves the real tensors' pages, runtime_executor.py; needs allocator.install("managed")
    first); runtime_mode: "plan" or "demand_paging"; runtime_backend: "cuda", or "host" for
    tests on the CPU.
    """
    from .planfile import Plan

    if not isinstance(plan, Plan):
        raise TypeError(f"plan: an autovm.Plan (autovm.plan() or autovm.load_plan()), not "
                        f"{type(plan).__name__}")
    return Attachment(model, optimizer, plan, unrealized=unrealized, memory_limit=memory_limit,
                      executor=executor, runtime_mode=runtime_mode,
                      runtime_backend=runtime_backend)
