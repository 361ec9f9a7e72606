// Contract: what plain PyTorch would allocate for the same training step. predict_pytorch_memory
// replays the training graph's forward steps, its loss and its optimizer the way eager PyTorch
// runs them (autograd, the CUDA caching allocator, cuDNN), and returns the peak that
// torch.cuda.max_memory_allocated reports over a steady step (step 2 on), so that autovm-plan
// can say whether a job fits in PyTorch before it is launched. It is a model of PyTorch's rules,
// not a table of models; Note [PyTorch memory model] in pytorch_memory.cc writes the rules out.
//
//   bytes ^                        peak (backward starts while every saved tensor is held)
//         |                 ____/\__
//         |           _____/        \____  saved tensors go as their backward nodes run;
//         |     _____/                   \___  parameter gradients accumulate
//         |____/ forward: saved tensors       \______________ optimizer
//         | persistent: parameters, buffers, optimizer state, batch, library workspaces
//         +------------------------------------------------------------------> time
//
// What a steady step starts from: parameters, buffers (with batch norm's num_batches_tracked;
// under autovm-plan --data-parallel also DDP's gradient buckets, buffers "ddp_bucket.K", one
// allocation each), optimizer state, the batch (input and labels) and library workspaces; no
// gradients (zero_grad(set_to_none=True)). Every allocation of the step counts as the block the
// caching allocator hands out for it, simulated from the cache the step before left
// (caching_allocator.h); what the step starts from, as pytorch_block_bytes. The graph must come
// from build_training_step (its loss steps
// SoftmaxCrossEntropyLoss, MeanSquaredErrorLoss or ExternalLoss; optimizer steps named SGD,
// SGDMomentum or Adam).
#pragma once

#include <cstdint>
#include <string>

#include "ir/graph.h"

namespace autovm {

struct PytorchMemoryOptions {
  // Library workspaces that PyTorch allocates through its allocator at a library's first call
  // and keeps for the process's life, so a steady step holds them from its start (measured
  // with PyTorch 2.11 on the H200, a Hopper GPU, by tools/bench/autocast_peak.py's
  // library_bytes: 32 MiB for a plain matrix product, 33 MiB more for one with a bias, which
  // runs through cuBLASLt; PyTorch sizes them by the GPU's architecture and
  // CUBLAS_WORKSPACE_CONFIG). cublas: any matrix product (MatMul, Gemm, Linear; every one's
  // backward is a plain product). cublaslt: a Gemm or Linear with a bias. Convolutions, batch
  // norm, the loss and the optimizer call neither. library_workspace_bytes: any other.
  int64_t cublas_workspace_bytes = int64_t(32) << 20;
  int64_t cublaslt_workspace_bytes = int64_t(33) << 20;
  int64_t library_workspace_bytes = 0;
  // cuDNN's convolution workspace, allocated around each convolution (forward, backward data,
  // backward filter): this fraction of the im2col matrix of the batch, at most `cap`.
  double conv_workspace_fraction = 0.0;
  int64_t conv_workspace_cap = int64_t(0);
  // Instead: each convolution's workspace tensors in the graph, forward and backward, which
  // hold what was measured (autovm-plan --conv-workspaces: training/conv_workspaces.h).
  bool conv_workspace_of_graph = false;
};

struct PytorchMemoryEstimate {
  int64_t peak_bytes = 0;           // predicted torch.cuda.max_memory_allocated of a steady step
  std::string peak_phase;           // "forward", "loss", "backward" or "optimizer"
  std::string peak_at;              // the node (or op) running when the peak is reached
  int64_t persistent_bytes = 0;     // parameters, buffers, optimizer state, library workspaces
  int64_t batch_bytes = 0;          // input and labels
  int64_t saved_bytes = 0;          // activations autograd holds at the end of forward (each
                                    // as pytorch_block_bytes, not the block it got)
  int64_t end_forward_bytes = 0;    // allocated once the loss is computed
  int64_t forward_peak_bytes = 0;   // the peak of forward and loss
  int64_t backward_peak_bytes = 0;
  int64_t optimizer_peak_bytes = 0;
  int64_t gradient_bytes = 0;       // parameter gradients at the end of backward
};

// The bytes the CUDA caching allocator counts for a request of `bytes`: 0 for 0; a multiple of
// 512; and for requests of 10 MiB or more, which get a segment of their own rounded up to
// 2 MiB, the whole segment when the rest (at most 1 MiB) is too small to split off.
int64_t pytorch_block_bytes(int64_t bytes);

PytorchMemoryEstimate predict_pytorch_memory(const TrainingGraph& graph,
                                             const PytorchMemoryOptions& options = {});

}  // namespace autovm
