"""Which plan tensor a real tensor is. The plan names module calls by the TorchScript exporter's
node names and parameters and buffers by state_dict names; the adapter sees module calls and
the tensors autograd saves.

_Matching is a part of Attachment (adapter.py); it owns
- the model's map, made once by attach() (_map_model): parameters and buffers checked by name
  and size (ModelMismatchError); the plan's steps resolved to leaf module calls (onnx_scope,
  _resolve), giving fwd_seq, first_fwd, last_fwd, first_bwd, call_steps and step_call; the
  plan tensors matched by identity (identity_tids: each call's output and argument, the
  model's input, max pooling's indices); exporter-made constants among the plan's buffers are
  not the model's and are skipped;
- the activation gradients the runtime executor binds (_map_gradients: grad_binds);
- the plan's actions on tensors no saved tensor can be named as (_unmatched_actions,
  _check_unmatched: Attachment.unrealized, a warning or PlanFitError by the unrealized= policy);
- the precision check of each forward against the plan's options.autocast (_check_precision)
  and the text of a module output that does not fit (_output_mismatch);
- naming a step's entries (_name, _name_input) and finding them by plan tensor (_entries);
- the scan of the model's parameters and buffers once a step (_scan_state), which _pack reads
  to leave them alone.
It assumes Attachment's torch, model and plan are set.
"""
import re
import weakref

from .errors import ModelMismatchError, PlanFitError
from .state import _autocast_state, _dtype_name, _nbytes


MOVABLE_KINDS = ("activation", "input")  # what saved-tensor hooks can move
BUCKET_PREFIX = "ddp_bucket."  # DDP's gradient buckets in a --data-parallel plan (buffers)
# Buffers the exporter makes (Constant nodes' outputs, such as the ones and zeros of the
# InstanceNormalization that GroupNorm exports as): named by node, never by state_dict.
EXPORTER_CONSTANTS = ("/", "onnx::")


def _unqualified(qualified):
    """torch.onnx's scope name of a module: its name from the last non-numeric atom on
    ('layer1.0.conv1' -> 'conv1', 'layer1.0' -> 'layer1.0')."""
    atoms = qualified.split(".")
    for i in range(len(atoms) - 1, -1, -1):
        if not atoms[i].isnumeric():
            return ".".join(atoms[i:])
    return qualified


def onnx_scope(name, uncalled=()):
    """The TorchScript exporter's node-name scope of module `name` ('' is the root):
    'layer1.0.conv1' -> '/layer1/layer1.0/conv1'. The exporter opens a scope per module call,
    so the modules named in `uncalled` (those without a forward, ModuleList and ModuleDict:
    never called themselves) have none: 'convs.0.0' with 'convs' a ModuleList -> '/convs.0/convs.0.0'."""
    if not name:
        return ""
    parts = name.split(".")
    prefixes = (".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return "".join("/" + _unqualified(q) for q in prefixes if q not in uncalled)


class _Matching:
    """Attachment's map of the model and naming of saved tensors (see the module's
    docstring)."""

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
            if t["kind"] == "buffer" and t["name"].startswith(EXPORTER_CONSTANTS):
                continue  # a constant the exporter made (GroupNorm's InstanceNorm scale)
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
        # Modules without a forward of their own (ModuleList, ModuleDict) are never called;
        # a subclass with one (torchvision's IntermediateLayerGetter) is.
        unimplemented = self.torch.nn.Module.forward
        uncalled = {n for n, m in modules.items() if type(m).forward is unimplemented}
        by_scope = {onnx_scope(n, uncalled): n for n in modules if n}
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
            tid = self._first_argument(c)
            if tid is not None:
                self.call_input[c] = tid
                self.identity_tids.add(tid)
        if self.input_tensor is not None:
            self.identity_tids.add(self.input_tensor["id"])
        # Max pooling's int64 indices (plans made with autovm-plan --pool-indices): the only
        # int64 tensor a max pooling call saves, so matched to the call's indices exactly.
        self.pool_indices = bool(p.options.get("pool_indices"))
        self.indices_tids = {p.steps[sid]["outputs"][1] for sid in self.step_call
                             if p.steps[sid]["op"] == "MaxPool"
                             and len(p.steps[sid]["outputs"]) > 1}
        self.identity_tids |= self.indices_tids

    def _first_argument(self, call):
        """The plan tensor that is the call's argument: the first movable input of its steps
        that none of its steps makes (under --autocast a convolution's steps begin with the
        casts of its weights, and its argument is the convolution's or the input cast's)."""
        p, made = self.plan, set()
        for sid in self.call_steps.get(call, ()):
            for t in p.steps[sid]["inputs"]:
                if t not in made and p.tensors[t]["kind"] in MOVABLE_KINDS:
                    return t
            made.update(p.steps[sid]["outputs"])
        return None

    def _map_gradients(self):
        """self.grad_binds: {plan tensor: its activation gradient's plan tensor} for the
        tensors the adapter names by identity at a module call (its output, or its argument)
        whose gradient the plan moves. The runtime executor binds such a gradient when autograd
        hands it to the backward of the op that made the tensor (a tensor hook): the step that
        reads it last is then about to run, which is where the plan may read it remotely
        (autovm-plan --movable-at-last-use). Gradients of other tensors are not reachable."""
        p = self.plan
        moved = {a["tensor"] for a in p.actions if a["kind"] in ("evict", "read_remote")}
        ids = {t["name"]: t["id"] for t in p.tensors if t["kind"] == "activation_grad"}
        named = {p.steps[self.last_fwd[c]]["outputs"][0] for c in self.fwd_seq}
        named.update(self.call_input.values())
        self.grad_binds = {}
        for tid in sorted(named):
            gid = ids.get("grad/" + p.tensors[tid]["name"])
            if gid is not None and gid in moved:
                self.grad_binds[tid] = gid

    def _unmatched_actions(self):
        """The plan's evictions and discards of activations that no saved tensor can ever be
        named as: not a module call's output or argument, not among the outputs of a call's
        steps (matched by size), not the input. The loss's tensors (the script computes its loss
        outside the model) and what a functional op makes and no module reads are such. Each is
        (kind, tensor kind, name, bytes), as Attachment.unrealized lists them."""
        p = self.plan
        named = set(self.identity_tids)
        for outs in self.call_outputs.values():
            named.update(outs)
        # Activation gradients the runtime executor could bind (Attachment._at_last_use) but
        # does not reach: not a module call's output or argument.
        bound_grads = set(getattr(self, "grad_binds", {}).values())
        return [(a["kind"], p.tensors[a["tensor"]]["kind"], p.tensors[a["tensor"]]["name"],
                 a["bytes"]) for a in p.actions
                if a["kind"] in ("evict", "discard")
                and ((p.tensors[a["tensor"]]["kind"] in MOVABLE_KINDS and a["tensor"] not in named)
                     or (self._at_last_use(a, p.tensors[a["tensor"]])
                         and a["tensor"] not in bound_grads))]

    def _check_unmatched(self, unrealized, warning):
        """Adds the plan's actions on tensors the adapter cannot name (_unmatched_actions) to
        self.unrealized: PlanFitError under unrealized='error', else the warning to give (with
        `warning`, the one about tensors the adapter cannot move, if any)."""
        missing = self._unmatched_actions()
        if not missing:
            return warning
        self.unrealized.extend(missing)
        total = sum(m[3] for m in missing)
        names = ", ".join(sorted({m[2] for m in missing})[:6])
        msg = (f"{self.plan.path}: the plan evicts or discards activations (or activation "
               f"gradients) that the adapter cannot find among the tensors PyTorch saves (or "
               f"hands to a module's backward) ({len(missing)} actions, "
               f"{total / 1e6:.3f} MB: {names}); they stay on the GPU, so PyTorch's memory "
               "exceeds the plan's")
        if unrealized == "error":
            raise PlanFitError(msg + " (attach(..., unrealized='warn') runs it anyway)")
        if unrealized == "ignore":
            return warning
        return f"{warning}; {msg}" if warning else msg

    def _check_precision(self, x):
        """PlanFitError when the forward's autocast (on the input's device) is not the plan's
        options.autocast: every tensor would have another size than the plan's."""
        torch = self.torch
        if x is None:
            return
        on, dtype = _autocast_state(torch, x.device.type)
        names = {torch.bfloat16: "bf16", torch.float16: "fp16"}
        have = names.get(dtype, _dtype_name(dtype)) if on else None
        want = self.plan.options.get("autocast") or None
        if have == want:
            return
        runs = (f"under torch.autocast('{x.device.type}', dtype={dtype})" if have
                else "without torch.autocast")
        made = f"for autocast {want}" if want else "for fp32 training (no autocast)"
        fix = repr(have) if have else "False"
        raise PlanFitError(f"the forward runs {runs}, the plan {self.plan.path} was made {made}: "
                           f"plan with autovm.plan(..., autocast={fix}) (autovm-plan "
                           "--autocast), or train as the plan says")

    def _output_mismatch(self, call, out, tid):
        """The PlanFitError text for a module call whose output is not the plan's tensor."""
        p = self.plan
        t = p.tensors[tid]
        text = (f"{self._call_text(call)} returned {tuple(out.shape)} {_dtype_name(out.dtype)} "
                f"({_nbytes(out)} B), the plan's {t['name']} is {p.shapes.get(tid)} "
                f"{t['dtype']} ({t['bytes']} B): the plan no longer fits this model or input; "
                "plan again")
        ac = p.options.get("autocast")
        if ac and _dtype_name(out.dtype) != t["dtype"]:
            text += (f" (the plan applies CUDA autocast's op lists for {ac}; this op ran in "
                     f"{_dtype_name(out.dtype)} here: autocast on this device sorts it otherwise, "
                     "as torch 1.13's CPU autocast runs ConvTranspose in float32)")
        return text

    @staticmethod
    def _resolve(scope, by_scope):
        if scope in by_scope:
            return (by_scope[scope], 0)
        head, _, last = scope.rpartition("/")
        m = re.match(r"^(.*)_(\d+)$", last)
        if m and f"{head}/{m.group(1)}" in by_scope:
            return (by_scope[f"{head}/{m.group(1)}"], int(m.group(2)))
        return None

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

    def _name(self, step, entry, tid, exact=False):
        entry.tid = tid
        entry.exact = exact
        step.by_tid.setdefault(tid, []).append(weakref.ref(entry))
        if self.runtime is not None and tid not in self.regen_groups:  # recomputed: op replay
            self.runtime.bind(tid, entry.gpu, made=tid != self._input_id)

    @staticmethod
    def _entries(step, tid, exact=False):
        """The live entries named tid (only those matched by identity, when exact)."""
        return [e for e in (r() for r in step.by_tid.get(tid, ()))
                if e is not None and (e.exact or not exact)]

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
