"""Recomputation: a discarded saved tensor made again by replaying the ops of its plan chain
(plans made with autovm-plan --recompute-ops, a subset of REPLAYABLE_OPS).

_Replay is a part of Attachment (adapter.py); it owns
- the plan's recompute actions in groups, one per (after_step, ready_before_step), checked
  once against what the adapter can find (_schedule_recomputes: groups, regen_groups,
  step_module; PlanFitError when a chain reads a tensor not matched by identity);
- the discards issued at a boundary (_discard_due: an entry gives up its GPU tensor, no copy);
- running a group on the compute stream, once a training step (_run_group), at its boundary or
  late, at unpack (_regenerate); each op in its functional form (_replay, _max_pool) from the
  temporaries made before it and the tensors autograd saved (_chain_input).
It assumes the model's map (matching.py) and Attachment's kept, discards, stats, copies and
_prefetch (the copy backend's copy back, counted) are set.
"""
import collections

from .errors import AutoVMError, PlanFitError
from .state import _MODIFIED, _nbytes


# ONNX ops the adapter can run again from what autograd saved (autovm-plan --recompute-ops).
REPLAYABLE_OPS = ("Add", "BatchNormalization", "Conv", "MaxPool", "Relu")
_POOL_SLICE_BYTES = 64 << 20  # max pooling's replay: int64 indices of one slice of the batch


class _Replay:
    """Attachment's recomputation (see the module's docstring)."""

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
        weight_casts = self._weight_casts()
        for gi, g in enumerate(self.groups):
            made = set()
            for a in g["actions"]:
                s = p.steps[a["source_step"]]
                for tid in s["inputs"]:
                    if (p.tensors[tid]["kind"] in ("parameter", "buffer") or tid in made
                            or tid in weight_casts):
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

    def _weight_casts(self):
        """Plan tensors that are autocast's cast copies of a parameter (a Cast step of
        parameters only, under --autocast): a chain reads the module's parameter instead, which
        the replay's autocast casts again, as the forward did (_replay_autocast)."""
        p = self.plan
        out = set()
        for s in p.steps:
            if s["op"] == "Cast" and s["inputs"] and all(
                    p.tensors[t]["kind"] == "parameter" for t in s["inputs"]):
                out.update(s["outputs"])
        return out

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
        with torch.no_grad(), self._replay_autocast(waiting[0].device):
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

    def _replay_autocast(self, device):
        """The plan's autocast (options.autocast) on `device` for a chain, which may run in
        backward, outside the script's autocast: a convolution then casts its weights as the
        forward did (the same rounding, so the same bits) and runs the same low-precision
        kernel. No autocast for an fp32 plan (a chain run inside the script's forward stays
        fp32 too)."""
        torch = self.torch
        ac = self.plan.options.get("autocast")
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(ac)
        return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)

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
                self.copies.wait_copy_back(e)
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

        # MaxPool1d/2d/3d: the functional form of the module's own dimensions.
        dims = (3 if isinstance(m, torch.nn.MaxPool3d)
                else 1 if isinstance(m, torch.nn.MaxPool1d) else 2)
        max_pool = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[dims - 1]

        def pool(t):
            out, where = max_pool(t, m.kernel_size, m.stride, m.padding, m.dilation,
                                  ceil_mode=m.ceil_mode, return_indices=True)
            return where if indices else out
        if both:
            return max_pool(x, m.kernel_size, m.stride, m.padding, m.dilation,
                            ceil_mode=m.ceil_mode, return_indices=True)
        batch = x.shape[0] if x.dim() == dims + 2 else 1
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
