// The Matcher of the fusion patterns (match.h).
#include "model/fusion/match.h"

#include <cmath>

namespace autovm::model::fusion {

Matcher::Matcher(Model& m)
    : m_(m), taken_(m.nodes.size(), false),
      removed_(m.nodes.size(), false), replacement_(m.nodes.size()) {
  count_readers();
}

void Matcher::count_readers() {
  readers_.assign(m_.values.size(), 0);
  for (const Node& n : m_.nodes) {
    if (n.folded) continue;
    for (int v : n.inputs)
      if (v >= 0) readers_[size_t(v)]++;
  }
  for (int v : m_.outputs)
    if (v >= 0) readers_[size_t(v)]++;
}

const Node* Matcher::node(size_t i, const char* op) const {
  if (i >= m_.nodes.size() || taken_[i]) return nullptr;
  const Node& n = m_.nodes[i];
  return !n.folded && n.domain.empty() && n.op == op ? &n : nullptr;
}

const Node* Matcher::producer(int v, const char* op, size_t* index) const {
  if (v < 0) return nullptr;
  int p = m_.values[size_t(v)].producer;
  if (p < 0) return nullptr;
  const Node* n = node(size_t(p), op);
  if (n && index) *index = size_t(p);
  return n;
}

const Node* Matcher::sole_operand(const Node& n, const char* op, int* value, size_t* index) const {
  if (n.inputs.size() != 2) return nullptr;
  for (int v : n.inputs) {
    const Node* p = producer(v, op, index);
    if (p && readers(v) == 1) {
      *value = v;
      return p;
    }
  }
  return nullptr;
}

std::optional<double> Matcher::scalar(int v) const {
  if (v < 0) return std::nullopt;
  const auto& val = m_.values[size_t(v)].value;
  if (!val || val->size() != 1) return std::nullopt;
  if (!val->floats.empty()) return val->floats[0];
  if (!val->ints.empty()) return double(val->ints[0]);
  return std::nullopt;
}

int Matcher::other_input(const Node& n, int v) {
  if (n.inputs.size() != 2) return -1;
  if (n.inputs[0] == v) return n.inputs[1];
  if (n.inputs[1] == v) return n.inputs[0];
  return -1;
}

void Matcher::fuse(size_t last, Node fused, const std::vector<size_t>& removed) {
  taken_[last] = true;
  replacement_[last] = std::move(fused);
  for (size_t r : removed) {
    taken_[r] = true;
    removed_[r] = true;
  }
}

void Matcher::apply() {
  std::vector<Node> nodes;
  nodes.reserve(m_.nodes.size());
  for (size_t i = 0; i < m_.nodes.size(); ++i) {
    if (removed_[i]) continue;
    nodes.push_back(replacement_[i] ? std::move(*replacement_[i]) : std::move(m_.nodes[i]));
  }
  m_.nodes = std::move(nodes);
  for (Value& v : m_.values)
    if (v.source == ValueSource::node_output) v.producer = -1;
  for (size_t i = 0; i < m_.nodes.size(); ++i)
    for (int o : m_.nodes[i].outputs)
      if (o >= 0) m_.values[size_t(o)].producer = int(i);
  taken_.assign(m_.nodes.size(), false);
  removed_.assign(m_.nodes.size(), false);
  replacement_.assign(m_.nodes.size(), std::nullopt);
  count_readers();
}

Node fused_node(const Node& last, const char* op, std::vector<int> inputs, Attributes attrs) {
  Node f;
  f.op = op;
  f.name = last.name;
  f.inputs = std::move(inputs);
  f.outputs = {last.outputs.empty() ? -1 : last.outputs[0]};
  f.attrs = std::move(attrs);
  return f;
}

bool near(std::optional<double> value, double expected) {
  return value && std::abs(*value - expected) <= 1e-5 * std::abs(expected);
}

}  // namespace autovm::model::fusion
