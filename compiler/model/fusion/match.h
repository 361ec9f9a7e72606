// Contract: what the fusion patterns (fusion.h) ask of a model while they search it. A
// `Matcher` indexes the running (not folded) nodes: the readers of each value, counting a graph
// output as a reader, so that a pattern can require an intermediate to have its one reader
// inside the pattern. Patterns then call `fuse`, which records a fused node in place of the
// pattern's last node and marks the others removed; `apply` rewrites the model once every
// pattern has run (removed nodes dropped, producers renumbered).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/model.h"

namespace autovm::model::fusion {

class Matcher {
 public:
  explicit Matcher(Model& m);

  const Model& model() const { return m_; }
  size_t node_count() const { return m_.nodes.size(); }
  // Node `i` when it runs, has op `op` and no pattern took it yet; nullptr otherwise.
  const Node* node(size_t i, const char* op) const;
  // The running, untaken node of op `op` that produces value `v` and its index; nullptr otherwise.
  const Node* producer(int v, const char* op, size_t* index = nullptr) const;
  // The operand of the two-input node `n` that a node of op `op` produces with `n` as its one
  // reader: that producer (its value in *value, its index in *index); nullptr otherwise.
  const Node* sole_operand(const Node& n, const char* op, int* value, size_t* index) const;
  // Readers of `v` among the running nodes, plus one when `v` is a graph output.
  int readers(int v) const { return v < 0 ? 0 : readers_[size_t(v)]; }
  // The value of `v` when it is a known constant with one element.
  std::optional<double> scalar(int v) const;
  // The input of `n` other than `v` (n has two inputs, one of them v), or -1.
  static int other_input(const Node& n, int v);

  // Replaces node `last` with `fused` and removes the nodes `removed`.
  void fuse(size_t last, Node fused, const std::vector<size_t>& removed);
  // Gives value `v` a new shape, for a pattern that rewrites the node producing it (the value
  // must be read by that pattern alone).
  void set_shape(int v, Shape shape) { m_.values[size_t(v)].shape = std::move(shape); }
  // Rewrites the model: fused nodes in place, removed ones dropped.
  void apply();

 private:
  void count_readers();

  Model& m_;
  std::vector<int> readers_;
  std::vector<bool> taken_;
  std::vector<bool> removed_;
  std::vector<std::optional<Node>> replacement_;
};

// A node of op `op` named as `last`, writing `last`'s first output from `inputs`.
Node fused_node(const Node& last, const char* op, std::vector<int> inputs, Attributes attrs = {});

// The patterns, one file each; each returns how many it fused.
int fuse_silu(Matcher&);
int fuse_gelu(Matcher&);
int fuse_hard_swish(Matcher&);
int fuse_mish(Matcher&);
int fuse_layer_norm(Matcher&);
int fuse_linear(Matcher&);
int fuse_attention(Matcher&);

// Whether `value` is within a relative 1e-5 of `expected` (exported constants are float32).
bool near(std::optional<double> value, double expected);

}  // namespace autovm::model::fusion
