// Pass: the PyTorch memory model (pytorch_memory.h).
//
// Note [PyTorch memory model]
// ===========================
// Rationale: a plan made for PyTorch must hold in PyTorch, and "will this fit?" must be
// answerable before a job is launched. The compiler's own training graph keeps what ITS backward
// needs; PyTorch keeps what autograd saves, which differs op by op. So this pass replays the
// forward steps with PyTorch's rules and derives PyTorch's backward from them, counting every
// allocation as the caching allocator does.
//
// Approach: a reference-counted replay over storages.
//   - A storage lives while something holds it: the Python variable of a forward value (until
//     its last forward reader has run), a backward node that saved it (until that node has
//     run), a gradient waiting for its consumer, or a parameter's .grad (to the end).
//   - Forward, per op (what autograd saves; parameters and buffers are held anyway):
//       Conv, ConvTranspose  save their input; cuDNN workspace around the call
//       BatchNormalization   saves its input, save_mean and save_invstd ([C] each)
//       Relu                 saves its output; IN PLACE (torchvision's inplace=True) when the
//                            input is an activation that no later op reads and no node saved
//                            (autograd would refuse it otherwise): no new storage
//       Clip (ReLU6)         in place under the same condition, but hardtanh's backward reads
//                            its input, so autograd saves a copy of the input (#95432)
//       Add                  saves nothing; in place under the same condition (`out += x`)
//       MaxPool              saves its input and the int64 indices (the output's shape)
//       AveragePool          saves its input (avg_pool2d and the adaptive pool's general case)
//       GlobalAveragePool    saves nothing (PyTorch runs it as mean over H, W)
//       Gemm, Linear         save their input A (torch's linear: addmm)
//       Cast                 saves nothing; under autocast, a parameter's copy is also held by
//                            autocast's weight cache until the forward pass ends, and a
//                            convolution or linear layer saves the copy it read
//       Dropout              saves its mask (bool, 1 byte an element: native_dropout)
//       Concat, views        save nothing
//       Slice, Split         views of their input (narrow, chunk): no storage or node of their
//                            own; a reader that saves one keeps the whole input, and its
//                            gradient is counted at the input's size
//       Expand               a view of its input (expand, expand_as: F.normalize's divisor)
//                            in the same way; the reader's full-size gradient, which
//                            ExpandBackward sums to the input's shape at once, is counted at
//                            the input's size
//       Instance/GroupNorm   save input and the statistics (their gradient rule's needs)
//       ScaledDotProductAttention  (fused, flash or memory-efficient kernel) saves q, k, v, its
//                            output and the f32 logsumexp; never the [.., Lq, Lk] matrices;
//                            its backward allocates dq, dk, dv (the kernels' f32 row sums and
//                            flash's f32 dq accumulator, transient, are not modelled)
//       Pad read only by a pooling op: no op of its own (PyTorch pools with padding)
//       any other op         saves what the compiler's gradient rule needs for the inputs
//                            that require a gradient (x * c saves c, a constant, not x)
//     Cross-entropy is log_softmax (saves its output, the scores' shape) then nll_loss (a
//     scalar loss and a saved scalar total_weight); the scores go as soon as the loss exists.
//     mse_loss saves its input; an external loss holds its workspace while it runs and keeps
//     the outputs it reads. Each output's loss term gets its gradient in backward in turn.
//   - Backward runs the forward ops in reverse (autograd's order by sequence number). Each node
//     allocates the gradients of its inputs that require one (Conv: input, weight, bias, with a
//     cuDNN workspace after each of data and filter; a view as gradient is first copied to a
//     contiguous tensor), then releases its incoming gradients and its saved tensors. Add hands
//     the same gradient to both inputs; Concat hands out slices (views) of its gradient, which
//     keep the whole gradient alive. A second gradient for a value accumulates in place when
//     the first is a whole tensor held by no one else (or the new one is), else into a new
//     tensor (autograd's InputBuffer). A parameter's first gradient becomes its .grad.
//   - The optimizer (torch.optim, foreach on CUDA): SGD and momentum update in place; Adam
//     allocates one tensor list the size of the parameters (sqrt of the second moment).
//   - Every allocation counts as the block the caching allocator hands out for it, as
//     max_memory_allocated does, simulated over the step's requests in order from the cache
//     the step before left (caching_allocator.h): a block can be up to 1 MiB larger than asked,
//     by what is free when the request comes. Parameters, buffers, optimizer state, the batch
//     and library workspaces, which live in segments made before the step, count as
//     pytorch_block_bytes(size), outside that simulation.
//
// Limitations: cuDNN picks algorithms (and their workspaces) at run time, so the workspace is
// an estimate (PytorchMemoryOptions); only the ops above follow PyTorch exactly.
#include "analysis/pytorch_memory.h"

#include <algorithm>
#include <optional>
#include <string>
#include <unordered_map>

#include "analysis/caching_allocator.h"
#include "training/gradient_rules.h"

namespace autovm {
namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

bool is_persistent(TensorKind k) {
  return k == TensorKind::parameter || k == TensorKind::buffer ||
         k == TensorKind::optimizer_state || k == TensorKind::input || k == TensorKind::label;
}

// Storages with reference counts, the bytes allocated and their peak. Each storage's bytes
// are the block the caching allocator gives it (caching_allocator.h), from `cache`, which a
// step before this one has left as it left it.
class Allocator {
 public:
  explicit Allocator(CachingAllocator& cache) : cache_(cache) {}
  int alloc(int64_t bytes) {
    int handle = bytes > 0 ? cache_.allocate(bytes) : -1;
    int64_t b = handle >= 0 ? cache_.block_bytes(handle) : 0;
    blocks_.push_back({b, 1, handle, bytes});
    current_ += b;
    note(current_);
    return static_cast<int>(blocks_.size()) - 1;
  }
  void ref(int s) { blocks_[size_t(s)].refs++; }
  void unref(int s) {
    Block& b = blocks_[size_t(s)];
    if (--b.refs != 0) return;
    current_ -= b.bytes;
    if (b.handle >= 0) cache_.free(b.handle);
  }
  int refs(int s) const { return blocks_[size_t(s)].refs; }
  int64_t bytes(int s) const { return blocks_[size_t(s)].bytes; }
  // The request's own block (pytorch_block_bytes): what a storage holds, whatever block it got.
  int64_t asked_bytes(int s) const { return pytorch_block_bytes(blocks_[size_t(s)].asked); }
  // Memory held only while one call runs (a workspace).
  void transient(int64_t bytes) {
    if (bytes <= 0) return;
    int handle = cache_.allocate(bytes);
    note(current_ + cache_.block_bytes(handle));
    cache_.free(handle);
  }
  void add_persistent(int64_t bytes) { current_ += bytes; note(current_); }
  int64_t current() const { return current_; }

  void start_phase(std::string phase) {
    phase_ = std::move(phase);
    phase_peak_ = current_;
  }
  void at(std::string label) { label_ = std::move(label); }
  int64_t phase_peak() const { return phase_peak_; }
  int64_t peak() const { return peak_; }
  const std::string& peak_phase() const { return peak_phase_; }
  const std::string& peak_at() const { return peak_at_; }

 private:
  void note(int64_t v) {
    phase_peak_ = std::max(phase_peak_, v);
    if (v > peak_) {
      peak_ = v;
      peak_phase_ = phase_;
      peak_at_ = label_;
    }
  }
  struct Block {
    int64_t bytes;
    int refs;
    int handle;     // in cache_; -1 for 0 bytes
    int64_t asked;  // the request
  };
  CachingAllocator& cache_;
  std::vector<Block> blocks_;
  int64_t current_ = 0, peak_ = 0, phase_peak_ = 0;
  std::string phase_, label_, peak_phase_, peak_at_;
};

// A gradient on its way: a storage and whether it is a slice of a larger one.
struct Grad {
  int storage = -1;
  bool view = false;
};

class Replay {
 public:
  Replay(const TrainingGraph& g, const PytorchMemoryOptions& o, CachingAllocator& cache)
      : g_(g), o_(o), n_(g.tensors.size()), rep_(n_), uses_left_(n_, 0), requires_grad_(n_, false),
        handle_(n_, -1), grad_(n_), has_param_grad_(n_, false), a_(cache) {
    for (size_t t = 0; t < n_; ++t) rep_[t] = static_cast<TensorId>(t);
  }

  PytorchMemoryEstimate run();

 private:
  const Tensor& T(TensorId t) const { return g_.tensor(t); }
  TensorId rep(TensorId t) const { return t == kNoTensor ? kNoTensor : rep_[size_t(t)]; }
  TensorId in(const Step& s, size_t i) const { return i < s.inputs.size() ? rep(s.inputs[i]) : kNoTensor; }
  TensorId out(const Step& s, size_t i) const { return i < s.outputs.size() ? s.outputs[i] : kNoTensor; }
  bool rg(TensorId t) const { return t != kNoTensor && requires_grad_[size_t(t)]; }
  bool is_activation(TensorId t) const { return t != kNoTensor && !is_persistent(T(t).kind); }

  void prepare();
  void forward_step(size_t k);
  void loss_step(const Step& s);
  void backward_step(size_t k);
  void save(size_t k, TensorId t);
  void deliver(TensorId t, Grad gr);
  int64_t conv_workspace(const Step& s, bool backward) const;

  const TrainingGraph& g_;
  const PytorchMemoryOptions& o_;
  size_t n_;
  std::vector<TensorId> rep_;          // the tensor whose storage a tensor is (fused Pad, views)
  std::vector<int> uses_left_;         // forward and loss steps still to read it, by rep
  std::vector<bool> requires_grad_;
  std::vector<int> handle_;            // storage of an activation, by rep (-1: persistent)
  std::vector<std::optional<Grad>> grad_;  // pending gradient of an activation
  std::vector<bool> has_param_grad_;
  std::unordered_map<std::string, int64_t> grad_workspace_;  // by node: its backward step's

  std::vector<StepIndex> forward_;     // forward steps that run in PyTorch, in order
  std::vector<bool> node_;             // by position in forward_: autograd records a node
  std::vector<std::vector<int>> saved_;  // by position in forward_: storages the node holds
  std::vector<std::vector<int>> loss_saved_;
  std::vector<int> autocast_cache_;    // storages of the weights' cast copies, to end of forward  // by loss step: storages its backward holds
  Allocator a_;
  int64_t gradient_bytes_ = 0;
};

void Replay::prepare() {
  std::vector<int> readers(n_, 0);
  std::vector<StepIndex> reader(n_, -1);
  for (const Step& s : g_.steps) {
    if (s.phase != Phase::forward && s.phase != Phase::loss) continue;
    for (TensorId t : s.inputs) {
      readers[size_t(t)]++;
      reader[size_t(t)] = s.id;
    }
  }
  for (const Step& s : g_.steps) {
    if (s.phase != Phase::forward) continue;
    // Slices, splits and expansions are views of their input in PyTorch (narrow, chunk,
    // expand): no storage and no backward node of their own; their readers hold and save the
    // input's storage.
    if ((s.op == "Slice" || s.op == "Split" || s.op == "Expand") && !s.inputs.empty() && !s.outputs.empty()) {
      for (TensorId o : s.outputs) rep_[size_t(o)] = rep(s.inputs[0]);
      continue;
    }
    if (s.op == "Pad" && !s.inputs.empty() && s.outputs.size() == 1) {
      TensorId o = s.outputs[0];
      if (readers[size_t(o)] == 1) {
        const std::string& next = g_.step(reader[size_t(o)]).op;
        if (next == "AveragePool" || next == "MaxPool") {
          rep_[size_t(o)] = rep(s.inputs[0]);
          continue;
        }
      }
    }
    forward_.push_back(s.id);
  }
  for (const Tensor& t : g_.tensors)
    if (t.kind == TensorKind::parameter) requires_grad_[size_t(t.id)] = true;
  for (const Step& s : g_.steps)
    if (s.phase == Phase::backward && s.workspace != kNoTensor) grad_workspace_[s.node] = T(s.workspace).bytes;
  node_.assign(forward_.size(), false);
  saved_.assign(forward_.size(), {});
  for (size_t k = 0; k < forward_.size(); ++k) {
    const Step& s = g_.step(forward_[k]);
    bool any = false;
    for (TensorId t : s.inputs) any = any || rg(rep(t));
    node_[k] = any;
    for (size_t i = 0; i < s.outputs.size(); ++i) {
      TensorId o = s.outputs[i];
      bool side = i > 0 && (s.op == "BatchNormalization" || s.op == "LayerNormalization" ||
                            s.op == "InstanceNormalization" || s.op == "GroupNormalization" ||
                            s.op == "Dropout" || s.op == "MaxPool" ||
                            s.op == "ScaledDotProductAttention");
      requires_grad_[size_t(o)] = T(o).kind == TensorKind::activation ? any && !side && is_floating(T(o).dtype)
                                                                        : requires_grad_[size_t(o)];
    }
  }
  std::vector<bool> runs(g_.steps.size(), false);
  for (StepIndex s : forward_) runs[size_t(s)] = true;
  for (const Step& s : g_.steps) {
    if (s.phase != Phase::loss && !runs[size_t(s.id)]) continue;
    std::vector<TensorId> seen;
    for (TensorId t : s.inputs) {
      TensorId r = rep(t);
      if (std::find(seen.begin(), seen.end(), r) != seen.end()) continue;
      seen.push_back(r);
      uses_left_[size_t(r)]++;
    }
  }
}

int64_t Replay::conv_workspace(const Step& s, bool backward) const {
  if (o_.conv_workspace_of_graph) {
    if (!backward) return s.workspace == kNoTensor ? 0 : T(s.workspace).bytes;
    auto it = grad_workspace_.find(s.node);
    return it == grad_workspace_.end() ? 0 : it->second;
  }
  // Over the output grid for Conv (weight [Cout, ...]); over the input grid for ConvTranspose,
  // whose weight is [Cin, ...] (col2im): grid elements / channels x weight elements / channels.
  TensorId w = in(s, 1), grid = s.op == "ConvTranspose" ? in(s, 0) : out(s, 0);
  if (w == kNoTensor || grid == kNoTensor || T(w).shape.empty() || T(w).shape[0] <= 0) return 0;
  int64_t channels = T(w).shape[0];
  double im2col = double(element_count(T(grid).shape) / channels) * double(element_count(T(w).shape) / channels) *
                  double(element_size(T(grid).dtype));
  return std::min<int64_t>(o_.conv_workspace_cap, int64_t(o_.conv_workspace_fraction * im2col));
}

void Replay::save(size_t k, TensorId t) {
  if (t == kNoTensor || handle_[size_t(t)] < 0) return;  // persistent: held anyway
  a_.ref(handle_[size_t(t)]);
  saved_[k].push_back(handle_[size_t(t)]);
}

void Replay::forward_step(size_t k) {
  const Step& s = g_.step(forward_[k]);
  const std::string& op = s.op;
  a_.at(s.node.empty() ? op : s.node);
  TensorId x = in(s, 0), y = out(s, 0);

  bool in_place = (op == "Relu" || op == "Clip" || op == "Add") && is_activation(x) && y != kNoTensor &&
                  handle_[size_t(x)] >= 0 && uses_left_[size_t(x)] == 1 &&
                  a_.refs(handle_[size_t(x)]) == 1 && T(x).bytes == T(y).bytes;
  int indices = -1;
  for (size_t i = 0; i < s.outputs.size(); ++i) {
    TensorId o = s.outputs[i];
    if (!is_activation(o)) continue;  // batch norm's running statistics: updated in place
    if (i == 0 && in_place) {
      handle_[size_t(o)] = handle_[size_t(x)];
      a_.ref(handle_[size_t(o)]);
    } else {
      handle_[size_t(o)] = a_.alloc(T(o).bytes);
    }
  }
  if (op == "MaxPool" && node_[k] && s.outputs.size() < 2 && y != kNoTensor)
    indices = a_.alloc(element_count(T(y).shape) * element_size(DType::i64));
  const bool conv = op == "Conv" || op == "ConvTranspose";
  if (conv) a_.transient(conv_workspace(s, false));

  // Autocast's weight cache holds a parameter's low-precision copy to the end of forward.
  if (op == "Cast" && x != kNoTensor && T(x).kind == TensorKind::parameter && is_activation(y)) {
    a_.ref(handle_[size_t(y)]);
    autocast_cache_.push_back(handle_[size_t(y)]);
  }

  if (node_[k]) {
    if (conv || op == "Gemm" || op == "Linear") {
      save(k, x);
      save(k, in(s, 1));  // under autocast, the weight's cast copy (a parameter is held anyway)
    } else if (op == "AveragePool") {
      save(k, x);
    } else if (op == "BatchNormalization") {
      save(k, x);
      save(k, out(s, 1));
      save(k, out(s, 2));
    } else if (op == "Relu") {
      save(k, y);
    } else if (op == "Clip") {
      // hardtanh's backward reads its input: in place (ReLU6(inplace=True)), autograd saves a
      // copy of the input made before the op overwrites it (pytorch/pytorch#95432).
      if (in_place) saved_[k].push_back(a_.alloc(T(x).bytes));
      else save(k, x);
    } else if (op == "MaxPool") {
      save(k, x);
      if (indices >= 0) {
        a_.ref(indices);
        saved_[k].push_back(indices);
      } else {
        save(k, out(s, 1));
      }
    } else if (op == "Dropout") {
      save(k, out(s, 1));
    } else if (op == "GlobalAveragePool" || op == "Add" || op == "Concat" || op == "Pad") {
      // nothing
    } else if (const training::GradientRule* rule = training::find_gradient_rule(op)) {
      // Autograd saves a tensor only for the gradients it will compute (should_compute_output):
      // x * c with c a constant keeps c, not x. An input the step does not list (x * x) counts
      // as needing its gradient.
      for (size_t d = 0; d < rule->needs.size(); ++d) {
        const TensorId target = d < rule->differentiable.size() ? in(s, size_t(rule->differentiable[d])) : kNoTensor;
        if (target != kNoTensor && !rg(target)) continue;
        for (const training::Ref& r : rule->needs[d]) save(k, r.output ? out(s, size_t(r.index)) : in(s, size_t(r.index)));
      }
    }
  }
  if (indices >= 0) a_.unref(indices);

  std::vector<TensorId> seen;
  for (TensorId t : s.inputs) {
    TensorId r = rep(t);
    if (std::find(seen.begin(), seen.end(), r) != seen.end()) continue;
    seen.push_back(r);
    if (handle_[size_t(r)] >= 0 && --uses_left_[size_t(r)] == 0) a_.unref(handle_[size_t(r)]);
  }
  for (TensorId o : s.outputs)
    if (is_activation(o) && uses_left_[size_t(o)] == 0) a_.unref(handle_[size_t(o)]);
}

void Replay::loss_step(const Step& s) {
  a_.at("loss");
  TensorId logits = in(s, 0);
  std::vector<int>& saved = loss_saved_.emplace_back();
  if (s.op == "SoftmaxCrossEntropyLoss") {
    saved.push_back(a_.alloc(T(logits).bytes));  // log_softmax: saved by itself and by nll_loss
    saved.push_back(a_.alloc(4));                // nll_loss: total_weight, saved
    a_.alloc(4);                                 // the loss, held by the training loop
  } else {
    // mse_loss saves its input (the target is held anyway); an external loss's memory is its
    // workspace, held while it runs, and its autograd keeps the outputs it reads.
    if (s.workspace != kNoTensor) a_.transient(T(s.workspace).bytes);
    for (TensorId t : s.inputs) {
      TensorId r = rep(t);
      if (is_activation(r) && handle_[size_t(r)] >= 0) {
        a_.ref(handle_[size_t(r)]);
        saved.push_back(handle_[size_t(r)]);
      }
    }
    a_.alloc(4);  // the loss
  }
  for (TensorId t : s.inputs) {
    TensorId r = rep(t);
    if (is_activation(r) && handle_[size_t(r)] >= 0 && --uses_left_[size_t(r)] == 0) a_.unref(handle_[size_t(r)]);
  }
}

void Replay::deliver(TensorId t, Grad gr) {
  const Tensor& tt = T(t);
  if (tt.kind == TensorKind::parameter) {
    if (has_param_grad_[size_t(t)]) {
      a_.unref(gr.storage);  // accumulated into .grad in place
    } else {
      has_param_grad_[size_t(t)] = true;
      gradient_bytes_ += a_.bytes(gr.storage);
    }
    return;
  }
  if (!rg(t)) {
    a_.unref(gr.storage);
    return;
  }
  auto& pending = grad_[size_t(t)];
  if (!pending) {
    pending = gr;
  } else if (!pending->view && a_.refs(pending->storage) == 1) {
    a_.unref(gr.storage);
  } else if (!gr.view && a_.refs(gr.storage) == 1) {
    a_.unref(pending->storage);
    pending = gr;
  } else {
    int sum = a_.alloc(tt.bytes);
    a_.unref(pending->storage);
    a_.unref(gr.storage);
    pending = Grad{sum, false};
  }
}

void Replay::backward_step(size_t k) {
  if (!node_[k]) return;
  const Step& s = g_.step(forward_[k]);
  const std::string& op = s.op;
  std::vector<Grad> incoming;
  for (TensorId o : s.outputs)
    if (is_activation(o) && grad_[size_t(o)]) {
      incoming.push_back(*grad_[size_t(o)]);
      grad_[size_t(o)].reset();
    }
  if (incoming.empty()) return;
  a_.at(s.node.empty() ? op : s.node);
  TensorId x = in(s, 0), y = out(s, 0);
  std::vector<std::pair<TensorId, Grad>> produced;
  auto make = [&](TensorId t) {
    if (rg(t)) produced.push_back({t, Grad{a_.alloc(T(t).bytes), false}});
  };
  auto share = [&](TensorId t, bool view) {
    if (!rg(t)) return;
    a_.ref(incoming[0].storage);
    produced.push_back({t, Grad{incoming[0].storage, view || incoming[0].view}});
  };
  int copy = -1;
  const bool conv = op == "Conv" || op == "ConvTranspose";
  if ((conv || op == "BatchNormalization") && incoming[0].view) copy = a_.alloc(T(y).bytes);

  if (conv) {
    int64_t ws = conv_workspace(s, true);
    make(x);
    if (rg(x)) a_.transient(ws);
    make(in(s, 1));
    a_.transient(ws);
    make(in(s, 2));
  } else if (op == "Add") {
    for (size_t i = 0; i < 2; ++i) {
      TensorId t = i < s.inputs.size() ? in(s, i) : x;  // Add(x, x): inputs deduplicated
      if (t != kNoTensor && T(t).bytes == T(y).bytes) share(t, false);
      else make(t);
    }
  } else if (op == "Concat") {
    for (TensorId t : s.inputs) share(rep(t), true);
  } else if (op == "BatchNormalization" || op == "LayerNormalization" || op == "Gemm" || op == "Linear") {
    for (size_t i = 0; i < 3; ++i) make(in(s, i));
  } else {
    const training::GradientRule* rule = training::find_gradient_rule(op);
    if (rule && !rule->differentiable.empty()) {
      for (int i : rule->differentiable) make(in(s, size_t(i)));
    } else {
      for (TensorId t : s.inputs) make(rep(t));
    }
  }
  if (copy >= 0) a_.unref(copy);
  for (const Grad& gr : incoming) a_.unref(gr.storage);
  for (int st : saved_[k]) a_.unref(st);
  saved_[k].clear();
  for (const auto& [t, gr] : produced) deliver(t, gr);
}

PytorchMemoryEstimate Replay::run() {
  PytorchMemoryEstimate e;
  prepare();
  // A steady step starts with the persistent tensors and the batch, and no gradients.
  int64_t batch_norms = 0;
  bool products = false, biased_products = false;
  for (const Step& s : g_.steps) {
    if (s.phase != Phase::forward) continue;
    if (s.op == "BatchNormalization") batch_norms++;
    bool gemm = s.op == "Gemm" || s.op == "Linear";
    products = products || gemm || s.op == "MatMul" || s.op == "Einsum";
    biased_products = biased_products || (gemm && s.inputs.size() >= 3);
  }
  int64_t libraries = o_.library_workspace_bytes;
  if (products) libraries += o_.cublas_workspace_bytes;
  if (biased_products) libraries += o_.cublaslt_workspace_bytes;
  for (const Tensor& t : g_.tensors) {
    if (!is_persistent(t.kind)) continue;
    int64_t b = pytorch_block_bytes(t.bytes);
    if (t.kind == TensorKind::input || t.kind == TensorKind::label) e.batch_bytes += b;
    else e.persistent_bytes += b;
  }
  e.persistent_bytes += batch_norms * pytorch_block_bytes(8) + libraries;
  a_.start_phase("forward");
  a_.at("start");
  a_.add_persistent(e.persistent_bytes + e.batch_bytes);

  for (size_t k = 0; k < forward_.size(); ++k) forward_step(k);
  std::vector<const Step*> losses;
  for (const Step& s : g_.steps)
    if (s.phase == Phase::loss) losses.push_back(&s);
  for (const Step* s : losses) loss_step(*s);
  for (int st : autocast_cache_) a_.unref(st);  // autocast exits
  e.forward_peak_bytes = a_.phase_peak();
  e.end_forward_bytes = a_.current();
  {
    std::vector<int> held;
    for (const auto& list : saved_) held.insert(held.end(), list.begin(), list.end());
    for (const auto& list : loss_saved_) held.insert(held.end(), list.begin(), list.end());
    std::sort(held.begin(), held.end());
    held.erase(std::unique(held.begin(), held.end()), held.end());
    for (int st : held) e.saved_bytes += a_.asked_bytes(st);
  }

  a_.start_phase("backward");
  for (size_t k = 0; k < losses.size(); ++k) {
    const Step& loss = *losses[k];
    a_.at("loss");
    int d_loss = a_.alloc(4);
    if (loss.op == "SoftmaxCrossEntropyLoss") {
      TensorId logits = rep(loss.inputs[0]);
      int d_log_prob = a_.alloc(T(logits).bytes);  // nll_loss_backward
      a_.unref(d_loss);
      int d_logits = a_.alloc(T(logits).bytes);    // log_softmax_backward
      a_.unref(d_log_prob);
      deliver(logits, Grad{d_logits, false});
    } else {
      // mse_loss_backward, or the external loss's backward: one gradient per output it read.
      a_.unref(d_loss);
      for (TensorId t : loss.inputs) {
        TensorId r = rep(t);
        if (is_activation(r)) deliver(r, Grad{a_.alloc(T(r).bytes), false});
      }
    }
    for (int st : loss_saved_[k]) a_.unref(st);
  }
  for (size_t k = forward_.size(); k-- > 0;) backward_step(k);
  e.backward_peak_bytes = a_.phase_peak();
  e.gradient_bytes = gradient_bytes_;

  a_.start_phase("optimizer");
  a_.at("optimizer");
  bool adam = false;
  for (const Step& s : g_.steps) adam = adam || (s.phase == Phase::optimizer && s.op == "Adam");
  if (adam) {
    int64_t temp = 0;  // torch._foreach_sqrt of the second moments: one tensor per parameter
    for (const Tensor& t : g_.tensors)
      if (t.kind == TensorKind::parameter && has_param_grad_[size_t(t.id)]) temp += pytorch_block_bytes(t.bytes);
    a_.add_persistent(temp);
    a_.add_persistent(-temp);
  }
  e.optimizer_peak_bytes = a_.phase_peak();
  e.peak_bytes = a_.peak();
  e.peak_phase = a_.peak_phase();
  e.peak_at = a_.peak_at();
  return e;
}

}  // namespace

int64_t pytorch_block_bytes(int64_t bytes) {
  if (bytes <= 0) return 0;
  constexpr int64_t kBlock = 512, kSmall = kMiB, kLargeSegment = 10 * kMiB, kRoundLarge = 2 * kMiB;
  int64_t rounded = (bytes + kBlock - 1) / kBlock * kBlock;
  if (rounded >= kLargeSegment) {
    int64_t segment = (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
    if (segment - rounded <= kSmall) return segment;
  }
  return rounded;
}

PytorchMemoryEstimate predict_pytorch_memory(const TrainingGraph& graph,
                                             const PytorchMemoryOptions& options) {
  // A steady step finds the cache's segments as the step before it left them: one step
  // is replayed first, everything it allocated freed (zero_grad(set_to_none=True) included),
  // then the step that is predicted.
  CachingAllocator cache;
  Replay(graph, options, cache).run();
  cache.free_all();
  return Replay(graph, options, cache).run();
}

}  // namespace autovm
