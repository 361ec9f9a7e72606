// The PyTorch memory model (analysis/pytorch_memory.h) on hand-built training graphs, with the
// bytes worked out by hand from PyTorch's rules (Note [PyTorch memory model]).
#include <doctest/doctest.h>

#include "analysis/pytorch_memory.h"

using namespace autovm;

namespace {

void step(TrainingGraph& g, std::string op, Phase phase, std::vector<TensorId> in,
          std::vector<TensorId> out) {
  Step s;
  s.id = g.step_count();
  s.op = std::move(op);
  s.node = s.op + std::to_string(s.id);
  s.phase = phase;
  s.inputs = std::move(in);
  s.outputs = std::move(out);
  g.steps.push_back(s);
}

// No library workspaces and no convolution workspace: only the tensors of the graph count.
PytorchMemoryOptions bare() {
  PytorchMemoryOptions o;
  o.library_workspace_bytes = 0;
  o.cublas_workspace_bytes = 0;
  o.cublaslt_workspace_bytes = 0;
  o.conv_workspace_fraction = 0;
  o.conv_workspace_cap = 0;
  return o;
}

// Loss (its outputs as build_training_step makes them) and one optimizer step per parameter.
void finish(TrainingGraph& g, TensorId logits, const std::vector<TensorId>& params,
            const std::string& optimizer) {
  TensorId label = g.add_tensor("label", TensorKind::label, DType::i64, {1});
  TensorId loss = g.add_tensor("loss", TensorKind::activation, DType::f32, {});
  TensorId log_prob = g.add_tensor("log_prob", TensorKind::activation, DType::f32, {1, 10});
  step(g, "SoftmaxCrossEntropyLoss", Phase::loss, {logits, label}, {loss, log_prob});
  for (TensorId p : params) {
    Tensor t = g.tensor(p);
    if (optimizer == "SGDMomentum") {
      TensorId v = g.add_tensor(t.name + "/momentum", TensorKind::optimizer_state, t.dtype, t.shape);
      step(g, optimizer, Phase::optimizer, {p, v}, {p, v});
    } else if (optimizer == "Adam") {
      TensorId m = g.add_tensor(t.name + "/m", TensorKind::optimizer_state, t.dtype, t.shape);
      TensorId v = g.add_tensor(t.name + "/v", TensorKind::optimizer_state, t.dtype, t.shape);
      step(g, optimizer, Phase::optimizer, {p, m, v}, {p, m, v});
    } else {
      step(g, optimizer, Phase::optimizer, {p}, {p});
    }
  }
}

}  // namespace

TEST_CASE("the caching allocator's block sizes") {
  constexpr int64_t MiB = int64_t(1) << 20;
  CHECK(pytorch_block_bytes(0) == 0);
  CHECK(pytorch_block_bytes(1) == 512);
  CHECK(pytorch_block_bytes(512) == 512);
  CHECK(pytorch_block_bytes(513) == 1024);
  CHECK(pytorch_block_bytes(5 * MiB + 1) == 5 * MiB + 512);          // split from a 20 MiB segment
  CHECK(pytorch_block_bytes(10 * MiB) == 10 * MiB);                  // its own segment, exact
  CHECK(pytorch_block_bytes(10 * MiB + 1) == 10 * MiB + 512);        // 2 MiB - 512 left: split off
  CHECK(pytorch_block_bytes(11 * MiB + 1) == 12 * MiB);              // 1 MiB - 512 left: kept
}

// x: input [1024] f32 (4096 B); w: [256] (1024 B); w2: [10, 1024] (40960 B); b2: [10] (512 B).
//   Conv(x, w) -> a [1024]        saves x (held anyway)
//   Relu(a) -> r                  in place: a is read by nothing else; saves r (= a's storage)
//   Gemm(r, w2, b2) -> logits     saves r; logits [1, 10]: 40 B -> a 512 B block
//   loss                          log_prob 512 + total_weight 512 (saved) + loss 512; logits go
TEST_CASE("conv, in-place relu, linear and loss with momentum, by hand") {
  TrainingGraph g;
  TensorId x = g.add_tensor("x", TensorKind::input, DType::f32, {1024});
  TensorId w = g.add_tensor("w", TensorKind::parameter, DType::f32, {256});
  TensorId a = g.add_tensor("a", TensorKind::activation, DType::f32, {1024});
  TensorId r = g.add_tensor("r", TensorKind::activation, DType::f32, {1024});
  TensorId w2 = g.add_tensor("w2", TensorKind::parameter, DType::f32, {10, 1024});
  TensorId b2 = g.add_tensor("b2", TensorKind::parameter, DType::f32, {10});
  TensorId logits = g.add_tensor("logits", TensorKind::activation, DType::f32, {1, 10});
  step(g, "Conv", Phase::forward, {x, w}, {a});
  step(g, "Relu", Phase::forward, {a}, {r});
  step(g, "Gemm", Phase::forward, {r, w2, b2}, {logits});
  finish(g, logits, {w, w2, b2}, "SGDMomentum");

  PytorchMemoryEstimate e = predict_pytorch_memory(g, bare());
  // Persistent: parameters 1024 + 40960 + 512 and as much momentum = 84992; batch 4096 + 512.
  CHECK(e.persistent_bytes == 84992);
  CHECK(e.batch_bytes == 4608);
  // Start 89600; + a 4096 (r shares it) + logits 512 + loss's three 512 blocks - logits.
  CHECK(e.forward_peak_bytes == 95744);
  CHECK(e.end_forward_bytes == 95232);
  CHECK(e.saved_bytes == 4096 + 512 + 512);  // r, log_prob, total_weight
  // Backward: d_loss and the loss gradients come and go (peak 96256); the loss's saved tensors
  // go (94720). Gemm: dr 4096, dw2 40960, db2 512 -> 140288; d_logits goes (139776); r is still
  // saved by Relu. Relu: da 4096 -> 143872, the peak; then dr and r go. Conv: dw 1024.
  CHECK(e.backward_peak_bytes == 143872);
  CHECK(e.peak_bytes == 143872);
  CHECK(e.peak_phase == "backward");
  CHECK(e.peak_at == "Relu1");
  CHECK(e.gradient_bytes == 1024 + 40960 + 512);
  // Momentum updates in place: the optimizer starts from the end of backward.
  CHECK(e.optimizer_peak_bytes == 89600 + 512 + 42496);

  SUBCASE("a library workspace is held from the start") {
    PytorchMemoryOptions o = bare();
    o.library_workspace_bytes = 1 << 20;
    CHECK(predict_pytorch_memory(g, o).peak_bytes == 143872 + (1 << 20));
  }
  SUBCASE("a Gemm with a bias holds cuBLAS's and cuBLASLt's workspaces") {
    PytorchMemoryOptions o = bare();
    o.cublas_workspace_bytes = 1 << 20;
    o.cublaslt_workspace_bytes = 3 << 20;
    PytorchMemoryEstimate w = predict_pytorch_memory(g, o);
    CHECK(w.persistent_bytes == 84992 + (4 << 20));
    CHECK(w.peak_bytes == 143872 + (4 << 20));
  }
}

TEST_CASE("Adam's foreach update allocates one list the size of the parameters") {
  TrainingGraph g;
  TensorId x = g.add_tensor("x", TensorKind::input, DType::f32, {1, 1024});
  TensorId w = g.add_tensor("w", TensorKind::parameter, DType::f32, {10, 1024});
  TensorId logits = g.add_tensor("logits", TensorKind::activation, DType::f32, {1, 10});
  step(g, "Gemm", Phase::forward, {x, w}, {logits});
  finish(g, logits, {w}, "Adam");
  PytorchMemoryEstimate e = predict_pytorch_memory(g, bare());
  // Persistent: w 40960 + two moments 81920; batch 4096 + 512. After backward: + loss 512 +
  // dw 40960 (x needs no gradient). The update adds sqrt(v): 40960 more.
  int64_t end_backward = 122880 + 4608 + 512 + 40960;
  CHECK(e.optimizer_peak_bytes == end_backward + 40960);
  CHECK(e.peak_bytes == end_backward + 40960);
  CHECK(e.peak_phase == "optimizer");

  SUBCASE("a Gemm without a bias holds cuBLAS's workspace only") {
    PytorchMemoryOptions o = bare();
    o.cublas_workspace_bytes = 1 << 20;
    o.cublaslt_workspace_bytes = 3 << 20;
    CHECK(predict_pytorch_memory(g, o).peak_bytes == end_backward + 40960 + (1 << 20));
  }
}

TEST_CASE("a graph without matrix products holds no cuBLAS workspace") {
  TrainingGraph g;
  TensorId x = g.add_tensor("x", TensorKind::input, DType::f32, {1, 2, 4, 4});
  TensorId w = g.add_tensor("w", TensorKind::parameter, DType::f32, {10, 2, 4, 4});
  TensorId c = g.add_tensor("c", TensorKind::activation, DType::f32, {1, 10, 1, 1});
  TensorId logits = g.add_tensor("logits", TensorKind::activation, DType::f32, {1, 10});
  step(g, "Conv", Phase::forward, {x, w}, {c});
  step(g, "Flatten", Phase::forward, {c}, {logits});
  finish(g, logits, {w}, "SGD");
  PytorchMemoryOptions o = bare();
  o.cublas_workspace_bytes = 1 << 20;
  o.cublaslt_workspace_bytes = 3 << 20;
  CHECK(predict_pytorch_memory(g, o).persistent_bytes == predict_pytorch_memory(g, bare()).persistent_bytes);
  CHECK(predict_pytorch_memory(g, PytorchMemoryOptions{}).persistent_bytes ==
        predict_pytorch_memory(g, bare()).persistent_bytes);
}

// x [1, 2, 16, 16] (2048 B) -> Conv(w [4, 2, 1, 1]) -> c [1, 4, 16, 16] (4096 B)
//   -> BatchNormalization -> y (4096), mean, inv_std ([4]: 512 B blocks each); running stats
//   -> Relu (in place on y) -> MaxPool -> p [1, 4, 8, 8] (1024 B) + int64 indices (2048 B)
//   -> Gemm (p seen as [1, 256]) -> logits
// Saved at the end of forward: c (batch norm's input), mean, inv_std, y (relu's output and
// the pool's input), indices, p (the linear's input), log_prob, total_weight.
TEST_CASE("batch norm and max pooling save what PyTorch saves") {
  TrainingGraph g;
  TensorId x = g.add_tensor("x", TensorKind::input, DType::f32, {1, 2, 16, 16});
  TensorId w = g.add_tensor("w", TensorKind::parameter, DType::f32, {4, 2, 1, 1});
  TensorId c = g.add_tensor("c", TensorKind::activation, DType::f32, {1, 4, 16, 16});
  TensorId scale = g.add_tensor("scale", TensorKind::parameter, DType::f32, {4});
  TensorId bias = g.add_tensor("bias", TensorKind::parameter, DType::f32, {4});
  TensorId rmean = g.add_tensor("rmean", TensorKind::buffer, DType::f32, {4});
  TensorId rvar = g.add_tensor("rvar", TensorKind::buffer, DType::f32, {4});
  TensorId y = g.add_tensor("y", TensorKind::activation, DType::f32, {1, 4, 16, 16});
  TensorId mean = g.add_tensor("mean", TensorKind::activation, DType::f32, {4});
  TensorId inv_std = g.add_tensor("inv_std", TensorKind::activation, DType::f32, {4});
  TensorId r = g.add_tensor("r", TensorKind::activation, DType::f32, {1, 4, 16, 16});
  TensorId p = g.add_tensor("p", TensorKind::activation, DType::f32, {1, 4, 8, 8});
  TensorId fw = g.add_tensor("fw", TensorKind::parameter, DType::f32, {10, 256});
  TensorId logits = g.add_tensor("logits", TensorKind::activation, DType::f32, {1, 10});
  step(g, "Conv", Phase::forward, {x, w}, {c});
  step(g, "BatchNormalization", Phase::forward, {c, scale, bias, rmean, rvar}, {y, mean, inv_std, rmean, rvar});
  step(g, "Relu", Phase::forward, {y}, {r});
  step(g, "MaxPool", Phase::forward, {r}, {p});
  step(g, "Gemm", Phase::forward, {p, fw}, {logits});
  finish(g, logits, {w, scale, bias, fw}, "SGD");

  PytorchMemoryEstimate e = predict_pytorch_memory(g, bare());
  CHECK(e.saved_bytes == 4096 + 512 + 512 + 4096 + 2048 + 1024 + 512 + 512);
  // Parameters: w 32 B, scale and bias 16 B, fw 10240 B: 512 * 3 + 10240; running stats 2 * 512
  // and num_batches_tracked 512; no optimizer state.
  CHECK(e.persistent_bytes == 3 * 512 + 10240 + 3 * 512);
  // The end of forward holds the batch, the saved tensors and the loss.
  CHECK(e.end_forward_bytes == e.persistent_bytes + e.batch_bytes + e.saved_bytes + 512);
}

// Two branches concatenated: the gradients Concat hands back are slices of its gradient, which
// live until both branches have used them; a's second gradient (from Relu) is a whole tensor
// of its own, so the slice is dropped into it and the concat's gradient goes.
//   x [1, 4] -> Gemm(w1 [1024, 4]) -> a [1, 1024] (4096 B)
//   a -> Relu -> b   (out of place: a is also read by Concat)
//   Concat(a, b) -> c [1, 2048] (8192 B) -> Gemm(wf [10, 2048]: 81920 B) -> logits
TEST_CASE("Concat's gradients are views of its gradient") {
  TrainingGraph g;
  TensorId x = g.add_tensor("x", TensorKind::input, DType::f32, {1, 4});
  TensorId w1 = g.add_tensor("w1", TensorKind::parameter, DType::f32, {1024, 4});
  TensorId a = g.add_tensor("a", TensorKind::activation, DType::f32, {1, 1024});
  TensorId b = g.add_tensor("b", TensorKind::activation, DType::f32, {1, 1024});
  TensorId c = g.add_tensor("c", TensorKind::activation, DType::f32, {1, 2048});
  TensorId wf = g.add_tensor("wf", TensorKind::parameter, DType::f32, {10, 2048});
  TensorId logits = g.add_tensor("logits", TensorKind::activation, DType::f32, {1, 10});
  step(g, "Gemm", Phase::forward, {x, w1}, {a});
  step(g, "Relu", Phase::forward, {a}, {b});
  step(g, "Concat", Phase::forward, {a, b}, {c});
  step(g, "Gemm", Phase::forward, {c, wf}, {logits});
  finish(g, logits, {w1, wf}, "SGD");
  PytorchMemoryEstimate e = predict_pytorch_memory(g, bare());
  const int64_t start = 16384 + 81920 + 512 + 512;  // w1, wf; x, label
  // Forward: a goes after Concat; b stays (Relu saved it), c stays (the Gemm saved it).
  CHECK(e.saved_bytes == 4096 + 8192 + 512 + 512);
  CHECK(e.end_forward_bytes == start + 4096 + 8192 + 3 * 512);
  // Backward: after the loss, start + b + c + loss + d_logits = start + 13312.
  //   Gemm: dc 8192 + dwf 81920 -> start + 103424, the peak; d_logits and c go (94720).
  //   Concat: slices of dc for a and b. Relu: da 4096 (98816); dc's slice for b and b go
  //   (94720); da takes a's slice in place, and dc goes (86528). Gemm: dw1 16384 (102912).
  CHECK(e.backward_peak_bytes == start + 103424);
  CHECK(e.peak_at == "Gemm3");
  CHECK(e.gradient_bytes == 16384 + 81920);
  CHECK(e.optimizer_peak_bytes == start + 86528 + 16384 - 4096);  // da went with w1's node
}

// In-place ops need an input nobody saved; ReLU6 (Clip) in place saves a copy of its input.
//   Conv(x, w) -> a [1, 1024] (4096 B)
//   Clip(a) -> c            in place (a is read by nothing else, saved by no one); saves a copy
//   Conv(c, w2) -> d         saves c
//   Add(c, d) -> e           NOT in place: c is saved by the second Conv; e is new
//   Gemm(e, wf) -> logits    saves e
TEST_CASE("ReLU6 in place saves a copy; an input some node saved is not updated in place") {
  TrainingGraph g;
  TensorId x = g.add_tensor("x", TensorKind::input, DType::f32, {1, 1024});
  TensorId w = g.add_tensor("w", TensorKind::parameter, DType::f32, {1});
  TensorId a = g.add_tensor("a", TensorKind::activation, DType::f32, {1, 1024});
  TensorId c = g.add_tensor("c", TensorKind::activation, DType::f32, {1, 1024});
  TensorId w2 = g.add_tensor("w2", TensorKind::parameter, DType::f32, {1});
  TensorId d = g.add_tensor("d", TensorKind::activation, DType::f32, {1, 1024});
  TensorId e = g.add_tensor("e", TensorKind::activation, DType::f32, {1, 1024});
  TensorId wf = g.add_tensor("wf", TensorKind::parameter, DType::f32, {10, 1024});
  TensorId logits = g.add_tensor("logits", TensorKind::activation, DType::f32, {1, 10});
  step(g, "Conv", Phase::forward, {x, w}, {a});
  step(g, "Clip", Phase::forward, {a}, {c});
  step(g, "Conv", Phase::forward, {c, w2}, {d});
  step(g, "Add", Phase::forward, {c, d}, {e});
  step(g, "Gemm", Phase::forward, {e, wf}, {logits});
  finish(g, logits, {w, w2, wf}, "SGD");
  PytorchMemoryEstimate est = predict_pytorch_memory(g, bare());
  // Saved: the copy 4096, c (= a) 4096, e 4096, log_prob 512, total_weight 512.
  CHECK(est.saved_bytes == 3 * 4096 + 2 * 512);
  // Held at the end of forward: those and the loss; d went after the Add.
  CHECK(est.end_forward_bytes == est.persistent_bytes + est.batch_bytes + 3 * 4096 + 3 * 512);
}

// x [1, 4, 8, 8] (1024 B) -> ConvTranspose(w [4, 2, 2, 2], stride 2) -> y [1, 2, 16, 16] (2048 B)
//   -> InstanceNormalization(s, b [2]) -> n (2048 B), mean and inv_std ([1, 2]: 512 B blocks)
//   -> the loss over n (log_prob 2048 B).
// Persistent: w, s, b at 512 B each; batch: x 1024 + label 512. Start 3072.
TEST_CASE("transposed convolution and instance norm save what PyTorch saves") {
  TrainingGraph g;
  TensorId x = g.add_tensor("x", TensorKind::input, DType::f32, {1, 4, 8, 8});
  TensorId w = g.add_tensor("w", TensorKind::parameter, DType::f32, {4, 2, 2, 2});
  TensorId y = g.add_tensor("y", TensorKind::activation, DType::f32, {1, 2, 16, 16});
  TensorId s = g.add_tensor("s", TensorKind::parameter, DType::f32, {2});
  TensorId b = g.add_tensor("b", TensorKind::parameter, DType::f32, {2});
  TensorId n = g.add_tensor("n", TensorKind::activation, DType::f32, {1, 2, 16, 16});
  TensorId mean = g.add_tensor("mean", TensorKind::activation, DType::f32, {1, 2});
  TensorId inv_std = g.add_tensor("inv_std", TensorKind::activation, DType::f32, {1, 2});
  step(g, "ConvTranspose", Phase::forward, {x, w}, {y});
  step(g, "InstanceNormalization", Phase::forward, {y, s, b}, {n, mean, inv_std});
  finish(g, n, {w, s, b}, "SGD");

  PytorchMemoryEstimate e = predict_pytorch_memory(g, bare());
  CHECK(e.persistent_bytes == 1536);
  CHECK(e.batch_bytes == 1536);
  // Saved: y, mean, inv_std (instance norm), log_prob, total_weight; x is held anyway.
  CHECK(e.saved_bytes == 2048 + 512 + 512 + 2048 + 512);
  // Forward: + y, n, mean, inv_std (5120), + the loss's log_prob, total_weight and loss (3072);
  // then n goes.
  CHECK(e.forward_peak_bytes == 3072 + 5120 + 3072);
  CHECK(e.end_forward_bytes == 3072 + 5120 + 3072 - 2048);
  // The loss's gradients: d_loss, d_log_prob, then d_logits while d_log_prob is held.
  CHECK(e.backward_peak_bytes == 9216 + 512 + 2048 + 2048 - 512);
  CHECK(e.gradient_bytes == 3 * 512);

  SUBCASE("the workspace is over the input grid: 256 / 4 x 32 / 4 floats (2048 B), times 8") {
    PytorchMemoryOptions o = bare();
    o.conv_workspace_fraction = 8;
    o.conv_workspace_cap = int64_t(1) << 30;
    PytorchMemoryEstimate ws = predict_pytorch_memory(g, o);
    // Forward: 3072 + y 2048 + 16384 around the call. Backward, at the transposed convolution:
    // persistent and batch 3072, loss 512, dy 2048, ds and db 1024, + dw 512 + 16384 around
    // the filter gradient (x needs none). A Conv would take its workspace over y's grid: 4x.
    CHECK(ws.forward_peak_bytes == 3072 + 2048 + 16384);
    CHECK(ws.backward_peak_bytes == 6656 + 512 + 16384);
    CHECK(ws.peak_at == "ConvTranspose0");
  }
}

// Under bf16 autocast: x [1, 1024] f32 (4096 B) and w [10, 1024] f32 (40960 B) are cast to bf16
// copies xc (2048 B) and wc (20480 B), which the linear layer saves; autocast's cache holds wc
// to the end of forward too. Persistent 40960; batch 4096 + 512. Start 45568.
TEST_CASE("autocast: the weight's cast copy is saved, and its gradient cast back to fp32") {
  TrainingGraph g;
  TensorId x = g.add_tensor("x", TensorKind::input, DType::f32, {1, 1024});
  TensorId w = g.add_tensor("w", TensorKind::parameter, DType::f32, {10, 1024});
  TensorId xc = g.add_tensor("xc", TensorKind::activation, DType::bf16, {1, 1024});
  TensorId wc = g.add_tensor("wc", TensorKind::activation, DType::bf16, {10, 1024});
  TensorId logits = g.add_tensor("logits", TensorKind::activation, DType::bf16, {1, 10});
  step(g, "Cast", Phase::forward, {x}, {xc});
  step(g, "Cast", Phase::forward, {w}, {wc});
  step(g, "Gemm", Phase::forward, {xc, wc}, {logits});
  finish(g, logits, {w}, "SGD");

  PytorchMemoryEstimate e = predict_pytorch_memory(g, bare());
  // Forward: + xc 2048, wc 20480, logits 512, the loss's three 512 blocks; logits go.
  CHECK(e.forward_peak_bytes == 45568 + 2048 + 20480 + 512 + 1536);
  CHECK(e.end_forward_bytes == 45568 + 2048 + 20480 + 1536);
  CHECK(e.saved_bytes == 2048 + 20480 + 512 + 512);  // xc, wc, log_prob, total_weight
  // Backward: the loss's gradients (70656 at most), then its saved tensors go (69120);
  // the linear layer: d wc 20480 (xc needs none) -> 89600, then d_logits, xc, wc go (66560);
  // the cast's backward: dw 40960 (fp32) -> 107520, the peak; then d wc goes.
  CHECK(e.backward_peak_bytes == 107520);
  CHECK(e.peak_at == "Cast1");
  CHECK(e.gradient_bytes == 40960);
}

// x: input [1024]; w: [256]; a = Conv(x, w) [1024] f32 (4096 B).
//   s1, s2 = Slice(a) [512] each: views of a, no storage of their own
//   Gemm(s2, w2, b2) -> logits     saves s2, that is a's whole storage (4096), not 2048 B
TEST_CASE("a slice is a view: a reader that saves it keeps the whole input") {
  TrainingGraph g;
  TensorId x = g.add_tensor("x", TensorKind::input, DType::f32, {1024});
  TensorId w = g.add_tensor("w", TensorKind::parameter, DType::f32, {256});
  TensorId a = g.add_tensor("a", TensorKind::activation, DType::f32, {1024});
  TensorId s1 = g.add_tensor("s1", TensorKind::activation, DType::f32, {512});
  TensorId s2 = g.add_tensor("s2", TensorKind::activation, DType::f32, {512});
  TensorId w2 = g.add_tensor("w2", TensorKind::parameter, DType::f32, {10, 512});
  TensorId b2 = g.add_tensor("b2", TensorKind::parameter, DType::f32, {10});
  TensorId logits = g.add_tensor("logits", TensorKind::activation, DType::f32, {1, 10});
  step(g, "Conv", Phase::forward, {x, w}, {a});
  step(g, "Slice", Phase::forward, {a}, {s1});
  step(g, "Slice", Phase::forward, {a}, {s2});
  step(g, "Gemm", Phase::forward, {s2, w2, b2}, {logits});
  finish(g, logits, {w, w2, b2}, "SGD");

  PytorchMemoryEstimate e = predict_pytorch_memory(g, bare());
  CHECK(e.saved_bytes == 4096 + 512 + 512);  // a (through s2), log_prob, total_weight
  // Start: parameters 1024 + 20480 + 512, batch 4096 + 512 = 26624; + a 4096, no slice storage;
  // + logits 512 + the loss's three 512 blocks, then logits go.
  CHECK(e.end_forward_bytes == 26624 + 4096 + 3 * 512);
}

TEST_CASE("a product saves each operand only for the other's gradient (x * c keeps no x)") {
  TrainingGraph g;
  TensorId x = g.add_tensor("x", TensorKind::input, DType::f32, {1024});
  TensorId w = g.add_tensor("w", TensorKind::parameter, DType::f32, {256});
  TensorId c = g.add_tensor("c", TensorKind::buffer, DType::f32, {});  // a scale, no gradient
  TensorId q = g.add_tensor("q", TensorKind::parameter, DType::f32, {1024});
  TensorId a = g.add_tensor("a", TensorKind::activation, DType::f32, {1024});
  TensorId m = g.add_tensor("m", TensorKind::activation, DType::f32, {1024});
  TensorId n = g.add_tensor("n", TensorKind::activation, DType::f32, {1024});
  TensorId w2 = g.add_tensor("w2", TensorKind::parameter, DType::f32, {10, 1024});
  TensorId b2 = g.add_tensor("b2", TensorKind::parameter, DType::f32, {10});
  TensorId logits = g.add_tensor("logits", TensorKind::activation, DType::f32, {1, 10});
  step(g, "Conv", Phase::forward, {x, w}, {a});
  step(g, "Mul", Phase::forward, {a, c}, {m});  // keeps c (held anyway), not a
  step(g, "Mul", Phase::forward, {m, q}, {n});  // q's gradient needs m, m's needs q
  step(g, "Gemm", Phase::forward, {n, w2, b2}, {logits});
  finish(g, logits, {w, q, w2, b2}, "SGD");

  PytorchMemoryEstimate e = predict_pytorch_memory(g, bare());
  CHECK(e.saved_bytes == 4096 + 4096 + 512 + 512);  // m, n, log_prob, total_weight
}

// x: input [1024]; w: [256]; a = Conv(x, w) [1024] f32 (4096 B); n = ReduceL2(a) [1] (512 B);
// e = Expand(n) [1024], a view of n (expand_as); d = Div(a, e) [1024] saves a and e, that is
// n's storage (512 B), not 4096 B.
TEST_CASE("an expansion is a view: a reader that saves it keeps only the small input") {
  TrainingGraph g;
  TensorId x = g.add_tensor("x", TensorKind::input, DType::f32, {1024});
  TensorId w = g.add_tensor("w", TensorKind::parameter, DType::f32, {256});
  TensorId a = g.add_tensor("a", TensorKind::activation, DType::f32, {1024});
  TensorId n = g.add_tensor("n", TensorKind::activation, DType::f32, {1});
  TensorId e = g.add_tensor("e", TensorKind::activation, DType::f32, {1024});
  TensorId d = g.add_tensor("d", TensorKind::activation, DType::f32, {1024});
  TensorId w2 = g.add_tensor("w2", TensorKind::parameter, DType::f32, {10, 1024});
  TensorId b2 = g.add_tensor("b2", TensorKind::parameter, DType::f32, {10});
  TensorId logits = g.add_tensor("logits", TensorKind::activation, DType::f32, {1, 10});
  step(g, "Conv", Phase::forward, {x, w}, {a});
  step(g, "ReduceL2", Phase::forward, {a}, {n});  // saves a and n
  step(g, "Expand", Phase::forward, {n}, {e});
  step(g, "Div", Phase::forward, {a, e}, {d});    // saves a and e (= n)
  step(g, "Gemm", Phase::forward, {d, w2, b2}, {logits});
  finish(g, logits, {w, w2, b2}, "SGD");

  PytorchMemoryEstimate e_ = predict_pytorch_memory(g, bare());
  CHECK(e_.saved_bytes == 4096 + 512 + 4096 + 512 + 512);  // a, n, d, log_prob, total_weight
  // Start: parameters 1024 + 40960 + 512, batch 4096 + 512 = 47104; + a 4096, n 512, no
  // storage for e, d 4096; + logits 512 + the loss's three 512 blocks, then logits go.
  CHECK(e_.end_forward_bytes == 47104 + 4096 + 512 + 4096 + 3 * 512);
}
