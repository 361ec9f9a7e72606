"""Where a training step meets the adapter: PyTorch's hooks.

_Hooks is a part of Attachment (adapter.py); it owns
- the forward pre hooks and hooks on the root and on each leaf module the plan has steps for
  (_register_hooks): they check the call order against the plan (HookOrderError), name the
  call's argument and outputs (matching.py) and call the plan boundary (Attachment._boundary)
  before the call's first step and after its last;
- the pre hook on each such call's autograd node: the backward's boundaries;
- the tensor hooks on a call's output and argument whose activation gradient the runtime
  executor binds (_hook_gradient);
- the saved-tensor hooks: _pack (a saved tensor -> _Entry, shared by every op that saves it;
  parameters, buffers and views of them stay as they are) and _unpack (the entry's tensor on
  the GPU again: waits for its copy back, copies it back late, or regenerates it);
- the marks for time_trace around the optimizer's step.
It assumes the model's map (matching.py), the schedule (adapter.py) and the copy backend
(Attachment.copies) are made.
"""
import weakref

from .errors import AutoVMError, BatchMismatchError, HookOrderError, PlanFitError
from .state import _MODIFIED, _Entry, _Packed, _Step, _dtype_name, _first_tensor, _nbytes


class _Hooks:
    """Attachment's hooks (see the module's docstring)."""

    def _register_hooks(self):
        """The forward hooks on the root and on the planned leaf modules, and the optimizer's
        marks; close() removes them."""
        root = self.model
        self._hooks.append(root.register_forward_pre_hook(self._root_pre))
        self._hooks.append(root.register_forward_hook(self._root_post))
        for name, m in root.named_modules():
            if name in self._planned_modules:
                self._hooks.append(m.register_forward_pre_hook(self._make_pre(name)))
                self._hooks.append(m.register_forward_hook(self._make_post(name)))
        self._hook_optimizer()

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
        self._check_precision(x)
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
        self._last_step = weakref.ref(step)
        self.stats.training_steps += 1
        self._trace(-1)
        self._time(self._steps, -1)

    def _root_post(self, module, args, output):
        step = self._step
        if step is None:
            return
        self._boundary(step, self.last_forward_step)
        self._missed(step)
        step.forward_done = True
        self._check_memory("the forward pass")
        self._step = None

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
            x = _first_tensor(args)
            self._name_input(step, call, x)
            self._hook_gradient(self.call_input.get(call), x)
            self._boundary(step, self.first_fwd[call] - 1)
        return pre

    def _hook_gradient(self, tid, t):
        """The runtime executor binds plan tensor tid's activation gradient (grad_binds) when
        autograd hands it to the backward of the op that made t: just before the step that reads
        it last, where the plan reads it remotely (matching.py, _map_gradients)."""
        gid = self.grad_binds.get(tid) if self.runtime is not None and tid is not None else None
        if gid is None or t is None or not t.requires_grad or t.grad_fn is None:
            return
        runtime = self.runtime

        def bind(grad):  # returns None: the gradient flows on unchanged
            runtime.bind(gid, grad)
        t.register_hook(bind)

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
                    raise PlanFitError(self._output_mismatch(call, out, main))
                step.named[id(out)] = (main, weakref.ref(out), out._version)
                if self.runtime is not None and main not in self.regen_groups:
                    self.runtime.bind(main, out, made=True)
                self._hook_gradient(main, out)
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

    def _call_text(self, call):
        name, k = call
        return f"module '{name}'" + (f" (call {k + 1})" if k else "")

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
        if self.runtime is not None and self.runtime.pages and e.tid is not None:
            self.runtime.require(e.tid)  # the runtime may have its pages off the device
        self.copies.wait_copy_back(e)
        self.copies.wait_copy_out(e)  # unpacked before its eviction was released
        e.uses -= 1
        if e.uses <= 0 and e.cpu is not None:
            e.gpu = None  # the host copy stays for a second backward (retain_graph)
        return g
