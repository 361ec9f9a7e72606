#include "emit/plan_json.h"

#include <algorithm>
#include <future>

#include "emit/json_writer.h"
#include "util/parallel.h"

namespace autovm {
namespace {

std::string_view name(ActionKind k) {
  switch (k) {
    case ActionKind::prefetch: return "prefetch";
    case ActionKind::evict: return "evict";
    case ActionKind::discard: return "discard";
    case ActionKind::recompute: return "recompute";
    case ActionKind::advise: return "advise";
    case ActionKind::read_remote: return "read_remote";
  }
  return "prefetch";
}

void write_by_kind(JsonWriter& w, const BytesByKind& b) {
  w.begin_object();
  for (int k = 0; k < kTensorKindCount; ++k) w.key(name(static_cast<TensorKind>(k))).value(b[static_cast<size_t>(k)]);
  w.end_object();
}

// Writes rows [0, count) of the array just begun, `row(w, i)` writing row i. A long array is
// formatted in blocks, two at a time: one on this thread, the next on a second one; both are
// written in order, so the text is the same as one writer's. Both buffers are allocated here,
// from the main heap: memory the second thread allocated would come from a fresh arena of its
// own, with a page fault per 4 KiB.
template <typename Row>
void write_rows(JsonWriter& w, size_t count, const Row& row) {
  constexpr size_t kBlock = size_t(1) << 13;           // rows
  constexpr size_t kBlockBytes = kBlock * 512;          // a row is 80-300 bytes
  if (count <= kBlock) {
    for (size_t i = 0; i < count; ++i) row(w, i);
    return;
  }
  JsonWriter mine, theirs;
  mine.reserve(kBlockBytes);
  theirs.reserve(kBlockBytes);
  auto format = [&](JsonWriter& part, size_t begin) {
    part.clear();
    part.begin_rows(begin == 0);
    for (size_t i = begin; i < std::min(count, begin + kBlock); ++i) row(part, i);
  };
  for (size_t begin = 0; begin < count; begin += 2 * kBlock) {
    std::future<void> next;  // joined before `theirs` is read, or on the way out of an exception
    if (begin + kBlock < count)
      next = async_or_deferred([&, b = begin + kBlock] { format(theirs, b); });
    format(mine, begin);
    w.rows(mine);
    if (next.valid()) {
      next.get();
      w.rows(theirs);
    }
  }
}

}  // namespace

PlanStatistics compute_statistics(const Plan& plan) {
  PlanStatistics s;
  const TrainingGraph& g = plan.training.graph;
  for (const Tensor& t : g.tensors) {
    s.bytes_by_kind[static_cast<size_t>(t.kind)] += t.bytes;
    if (t.kind == TensorKind::parameter) s.parameter_count += element_count(t.shape);
  }
  for (const Step& st : g.steps) {
    s.steps_by_phase[static_cast<int>(st.phase)] += 1;
    s.total_flops += st.flops;
  }
  return s;
}

std::string plan_to_json(const Plan& plan) {
  std::string out;
  write_plan_json(plan, [&](std::string_view piece) { out += piece; });
  return out;
}

void write_plan_json(const Plan& plan, const std::function<void(std::string_view)>& sink) {
  const TrainingGraph& g = plan.training.graph;
  const PlanStatistics stats = compute_statistics(plan);
  JsonWriter w(sink);
  w.begin_object();
  w.newline();
  w.key("schema_version").value(kPlanSchemaVersion);
  w.key("generator").value("autovm-plan " AUTOVM_VERSION);
  w.key("execution_model").value("autovm-1");
  w.newline();

  const ModelIdentity& m = plan.model;
  w.key("model").begin_object();
  w.key("file").value(m.file);
  w.key("sha256").value(m.sha256);
  w.key("file_bytes").value(m.file_bytes);
  w.key("ir_version").value(m.ir_version);
  w.key("opset").value(m.opset);
  w.key("producer").value(m.producer);
  w.key("input").begin_object();
  w.key("name").value(m.input_name);
  w.key("dtype").value(name(m.input_dtype));
  w.key("shape").array(m.input_shape);
  w.end_object();
  w.key("batch").value(m.batch);
  w.key("classes").value(m.classes);
  w.key("looks_like_inference_export").value(plan.training.looks_like_inference_export);
  w.end_object();
  w.newline();

  const PlanOptions& o = plan.options;
  w.key("options").begin_object();
  w.key("budget_bytes").value(o.budget_bytes);
  w.key("batch").value(m.batch);
  w.key("optimizer").value(training::name(o.optimizer));
  w.key("conv_workspace_limit_bytes").value(o.conv_workspace_limit);
  if (!o.conv_workspaces_file.empty())  // --conv-workspaces: how many convolutions matched
  {
    w.key("conv_workspaces_measured").value(plan.training.conv_workspaces_measured);
    // Each workspace cut to fit (plan/workspace_fit.h): its entry in the file, its step's
    // phase, the bytes planned and the bytes measured.
    w.key("conv_workspaces_cut").begin_array();
    for (const auto& mw : plan.training.measured_workspaces) {
      if (!mw.cut) continue;
      w.begin_object();
      w.key("entry").value(mw.entry);
      w.key("phase").value(mw.backward ? "backward" : "forward");
      w.key("bytes").value(plan.training.graph.tensor(mw.tensor).bytes);
      w.key("measured_bytes").value(mw.measured_bytes);
      w.end_object();
    }
    w.end_array();
  }
  w.key("alignment_bytes").value(o.alignment);
  w.key("device").value(plan.device);
  w.key("mechanism").value(plan.mechanism);
  w.key("recompute").value(o.allow_recompute);
  if (o.allow_recompute && !o.recompute_ops.all()) {  // --recompute-ops
    w.key("recompute_ops").begin_array();
    for (const std::string& op : o.recompute_ops.ops) w.value(op);
    w.end_array();
  }
  if (!o.movable.all()) {  // --movable: the kinds the plan may take off the GPU
    w.key("movable").begin_array();
    for (int k = 0; k < kTensorKindCount; ++k)
      if (o.movable.has(TensorKind(k))) w.value(name(TensorKind(k)));
    w.end_array();
  }
  if (o.movable.last_use_bits & ~o.movable.bits) {  // --movable-at-last-use
    w.key("movable_at_last_use").begin_array();
    for (int k = 0; k < kTensorKindCount; ++k)
      if (o.movable.at_last_use_only(TensorKind(k))) w.value(name(TensorKind(k)));
    w.end_array();
  }
  if (o.pool_indices) w.key("pool_indices").value(true);  // --pool-indices
  if (o.loss != training::Loss::cross_entropy) w.key("loss").value(training::name(o.loss));  // --loss
  if (o.autocast != training::Autocast::none) w.key("autocast").value(training::name(o.autocast));
  if (plan.training.data_parallel.enabled) {  // autovm-plan --data-parallel
    const training::DataParallelOptions& dp = plan.training.data_parallel;
    int64_t bucket_bytes = 0;
    for (TensorId t : plan.training.gradient_buckets) bucket_bytes += g.tensor(t).bytes;
    w.key("data_parallel").begin_object();
    w.key("bucket_cap_bytes").value(dp.bucket_cap_bytes);
    w.key("first_bucket_bytes").value(dp.first_bucket_bytes);
    w.key("buckets").value(static_cast<int64_t>(plan.training.gradient_buckets.size()));
    w.key("bucket_bytes").value(bucket_bytes);
    w.end_object();
  }
  w.end_object();
  w.newline();

  w.key("tensors").begin_array();
  write_rows(w, g.tensors.size(), [&](JsonWriter& w, size_t i) {
    const Tensor& t = g.tensors[i];
    w.newline();
    w.begin_object();
    w.key("id").value(t.id);
    w.key("name").value(t.name);
    w.key("kind").value(name(t.kind));
    w.key("dtype").value(name(t.dtype));
    w.key("shape").array(t.shape);
    w.key("bytes").value(t.bytes);
    w.key("offset").value(plan.arena.offset[static_cast<size_t>(t.id)]);
    if (!t.aliases.empty()) {
      w.key("aliases").begin_array();
      for (const auto& a : t.aliases) w.value(a);
      w.end_array();
    }
    w.end_object();
  });
  w.end_array();
  w.newline();

  w.key("steps").begin_array();
  write_rows(w, g.steps.size(), [&](JsonWriter& w, size_t i) {
    const Step& s = g.steps[i];
    w.newline();
    w.begin_object();
    w.key("id").value(s.id);
    w.key("op").value(s.op);
    w.key("phase").value(name(s.phase));
    w.key("node").value(s.node);
    w.key("inputs").array(s.inputs);
    w.key("outputs").array(s.outputs);
    w.key("workspace");
    if (s.workspace == kNoTensor) w.null();
    else w.value(s.workspace);
    w.key("flops").value(s.flops);
    w.key("bytes_touched").value(s.bytes_touched);
    w.key("live_bytes").value(plan.timeline.total[size_t(s.id)]);
    if (s.reserve_bytes > 0) w.key("reserve_bytes").value(s.reserve_bytes);  // --reserve
    auto at = [](const std::vector<double>& v, StepIndex i) { return size_t(i) < v.size() ? v[size_t(i)] : 0.0; };
    if (!plan.compute_us.empty()) {
      w.key("compute_us").value(at(plan.compute_us, s.id));
      w.key("start_us").value(at(plan.start_us, s.id));
      w.key("end_us").value(at(plan.end_us, s.id));
      w.key("stall_us").value(at(plan.stall_us, s.id));
    }
    w.end_object();
  });
  w.end_array();
  w.newline();

  w.key("lifetimes").begin_array();
  write_rows(w, plan.lifetimes.size(), [&](JsonWriter& w, size_t i) {
    const Lifetime& l = plan.lifetimes[i];
    w.newline();
    w.begin_object();
    w.key("tensor").value(static_cast<int64_t>(i));
    w.key("first").value(l.first);
    w.key("last").value(l.last);
    w.key("persistent").value(l.persistent);
    w.key("uses").array(l.uses);
    w.end_object();
  });
  w.end_array();
  w.newline();

  w.key("actions").begin_array();
  write_rows(w, plan.actions.size(), [&](JsonWriter& w, size_t i) {
    const Action& a = plan.actions[i];
    w.newline();
    w.begin_object();
    w.key("kind").value(name(a.kind));
    w.key("tensor").value(a.tensor);
    w.key("bytes").value(a.bytes);
    w.key("after_step").value(a.after_step);
    w.key("ready_before_step").value(a.ready_before_step);
    if (a.kind == ActionKind::recompute) w.key("source_step").value(a.source_step);
    if (!a.mechanism.empty()) w.key("mechanism").value(a.mechanism);
    if (!a.advice.empty()) w.key("advice").value(a.advice);
    w.key("issue_us").value(a.issue_us);
    w.key("ready_us").value(a.ready_us);
    w.end_object();
  });
  w.end_array();
  w.newline();

  const MemoryTimeline& tl = plan.timeline;
  w.key("statistics").begin_object();
  w.newline();
  w.key("tensor_count").value(static_cast<int64_t>(g.tensors.size()));
  w.key("step_count").value(g.step_count());
  w.key("steps_by_phase").begin_object();
  for (int p = 0; p < 4; ++p) w.key(name(static_cast<Phase>(p))).value(stats.steps_by_phase[p]);
  w.end_object();
  w.key("parameter_count").value(stats.parameter_count);
  w.key("parameter_bytes").value(stats.bytes_by_kind[static_cast<size_t>(TensorKind::parameter)]);
  w.key("bytes_by_kind");
  write_by_kind(w, stats.bytes_by_kind);
  w.key("total_flops").value(stats.total_flops);
  w.newline();
  w.key("peak_bytes").value(tl.peak_bytes);
  w.key("peak_step").value(tl.peak_step);
  w.key("peak_by_kind");
  write_by_kind(w, tl.peak_by_kind);
  std::vector<TensorId> largest(tl.peak_tensors.begin(),
                               tl.peak_tensors.begin() + std::min<size_t>(tl.peak_tensors.size(), 32));
  w.key("peak_tensors").array(largest);
  w.newline();
  w.key("arena_bytes").value(plan.arena.size);
  w.key("arena_fragmentation_bytes").value(plan.arena.size - tl.peak_bytes);
  w.key("fits_budget").value(plan.prediction.fits);
  w.key("over_budget_bytes").value(tl.peak_bytes > o.budget_bytes ? tl.peak_bytes - o.budget_bytes : int64_t(0));
  w.newline();
  auto write_prediction = [&](const Prediction& p) {
    w.begin_object();
    w.key("policy").value(p.policy);
    w.key("fits").value(p.fits);
    w.key("step_time_us").value(p.step_time_us);
    w.key("compute_us").value(p.compute_us);
    w.key("stall_us").value(p.stall_us);
    w.key("recompute_us").value(p.recompute_us);
    w.key("bytes_to_host").value(p.bytes_to_host);
    w.key("bytes_to_device").value(p.bytes_to_device);
    w.key("resident_peak_bytes").value(p.resident_peak_bytes);
  };
  if (!plan.compute_us.empty()) {
    w.key("prediction");
    write_prediction(plan.prediction);
    w.key("no_swap_step_time_us").value(plan.no_swap_step_time_us);
    w.key("bound_us").value(plan.bound_us);
    w.key("bound_critical_step").value(plan.bound_critical_step);
    w.key("bound_must_move_bytes").value(plan.bound_must_move_bytes);
    w.end_object();
    w.newline();
    w.key("baselines").begin_array();
    for (const Prediction& b : plan.baselines) {
      w.newline();
      write_prediction(b);
      w.key("calibrated").value(b.calibrated);
      w.end_object();
    }
    w.end_array();
    w.newline();
  }
  w.end_object();
  w.newline();
  if (plan.pytorch_memory) {
    const PytorchMemoryEstimate& pt = *plan.pytorch_memory;
    w.key("pytorch_memory").begin_object();
    w.key("model").value("pytorch-eager-1");
    w.key("peak_allocated_bytes").value(pt.peak_bytes);
    w.key("peak_phase").value(pt.peak_phase);
    w.key("peak_at").value(pt.peak_at);
    w.key("fits_budget").value(pt.peak_bytes <= o.budget_bytes);
    w.key("persistent_bytes").value(pt.persistent_bytes);
    w.key("batch_bytes").value(pt.batch_bytes);
    w.key("saved_bytes").value(pt.saved_bytes);
    w.key("end_forward_bytes").value(pt.end_forward_bytes);
    w.key("forward_peak_bytes").value(pt.forward_peak_bytes);
    w.key("backward_peak_bytes").value(pt.backward_peak_bytes);
    w.key("optimizer_peak_bytes").value(pt.optimizer_peak_bytes);
    w.key("gradient_bytes").value(pt.gradient_bytes);
    w.end_object();
    w.newline();
  }
  w.end_object();
  w.newline();
  w.flush();
}

}  // namespace autovm
