// ScaledDotProductAttention: MatMul(Dropout?(Softmax(s * MatMul(q * a, Transpose(k0) * b))), v),
// the attention that torch.nn.MultiheadAttention and F.scaled_dot_product_attention compute, as
// the TorchScript exporter writes it (a, b and s optional scalar Mul or Div, the softmax over the
// last axis, no mask; a dropout of known ratio whose mask nothing reads). In training PyTorch 2
// runs it as one fused kernel (flash attention for 16-bit inputs; memory-efficient attention for
// f32, which flash does not take), which never materialises the [..., Lq, Lk] score and
// probability matrices. By
// derivatives.yaml, _scaled_dot_product_efficient_attention returns (output, log_sumexp,
// philox_seed, philox_offset) and its backward reads query, key, value, output, log_sumexp and
// the philox scalars; _scaled_dot_product_flash_attention returns (output, logsumexp, cum_seq_q,
// cum_seq_k, max_q, max_k, rng_state, unused, debug_attn_mask) and its backward reads query,
// key, value, output, logsumexp and the rng state. So autograd keeps q, k, v, the output and
// an f32 logsumexp ([B, H, Lq]; the memory-efficient kernel pads Lq to a multiple of 32), and
// a few scalars, where the decomposition keeps the probabilities for its second MatMul.
//
// The fused node reads K [..., Lk, d], not K transposed: the key's Transpose is rewritten to
// the permutation that yields K (and dropped when that is the identity). Its attribute `scale`
// is the product of the scalars, applied to Q K^T; `dropout` the probability the kernel drops
// with (0: none, or a Dropout that does not train). The kernels draw their dropout from a
// philox seed and offset (the scalars above): no mask is kept.
#include "model/fusion/match.h"

namespace autovm::model::fusion {
namespace {

const Shape* shape(const Matcher& g, int v) {
  if (v < 0 || !g.model().values[size_t(v)].shape_known) return nullptr;
  return &g.model().values[size_t(v)].shape;
}

// `v` when no Mul or Div by a scalar constant produces it for this pattern alone; else that
// node's other input, with its factor multiplied into *scale and the node added to *removed.
int unscale(const Matcher& g, int v, double* scale, std::vector<size_t>* removed) {
  if (g.readers(v) != 1) return v;
  size_t index = 0;
  if (const Node* mul = g.producer(v, "Mul", &index); mul && mul->inputs.size() == 2) {
    for (size_t k = 0; k < 2; ++k) {
      const std::optional<double> c = g.scalar(mul->inputs[k]);
      if (c && *c != 0 && !g.scalar(mul->inputs[1 - k])) {
        *scale *= *c;
        removed->push_back(index);
        return mul->inputs[1 - k];
      }
    }
  }
  if (const Node* div = g.producer(v, "Div", &index); div && div->inputs.size() == 2) {
    const std::optional<double> c = g.scalar(div->inputs[1]);
    if (c && *c != 0 && !g.scalar(div->inputs[0])) {
      *scale /= *c;
      removed->push_back(index);
      return div->inputs[0];
    }
  }
  return v;
}

// The probability a Dropout node drops with while training (0 when it is the identity); false
// when its ratio or training mode is not a known constant. The rule of training/forward.cc: a
// ratio of 0 drops nothing, and before opset 12 a Dropout node exists only to be applied.
bool dropout_ratio(const Matcher& g, const Node& n, double* ratio) {
  const auto known = [&](size_t k) -> const std::optional<ConstValue>* {
    if (k >= n.inputs.size() || n.inputs[k] < 0) return nullptr;
    return &g.model().values[size_t(n.inputs[k])].value;
  };
  *ratio = n.attr_f("ratio", 0.5);
  if (const auto* r = known(1)) {
    if (!*r || (*r)->floats.empty()) return false;
    *ratio = (*r)->floats[0];
  }
  bool training = g.model().opset < 12;
  if (const auto* t = known(2)) {
    if (!*t || (*t)->ints.empty()) return false;
    training = (*t)->ints[0] != 0;
  }
  if (!training || *ratio <= 0) *ratio = 0;
  return *ratio < 1;
}

bool is_identity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != int64_t(i)) return false;
  return true;
}

}  // namespace

int fuse_attention(Matcher& g) {
  int fused = 0;
  for (size_t i = 0; i < g.node_count(); ++i) {
    const Node* mm_pv = g.node(i, "MatMul");
    if (!mm_pv || mm_pv->inputs.size() != 2 || mm_pv->outputs.empty()) continue;
    int p = mm_pv->inputs[0];
    const int v = mm_pv->inputs[1];
    std::vector<size_t> removed;
    size_t index = 0;
    double dropout = 0;
    if (const Node* drop = g.producer(p, "Dropout", &index)) {  // on the probabilities, mask unread
      if (g.readers(p) != 1 || drop->inputs.empty() || !dropout_ratio(g, *drop, &dropout) ||
          (drop->outputs.size() > 1 && g.readers(drop->outputs[1]) != 0))
        continue;
      removed.push_back(index);
      p = drop->inputs[0];
    }
    const Node* softmax = g.producer(p, "Softmax", &index);
    if (!softmax || g.readers(p) != 1 || softmax->inputs.size() != 1) continue;
    const Shape* ps = shape(g, p);
    if (!ps || ps->size() < 3) continue;
    const int64_t rank = int64_t(ps->size());
    int64_t axis = softmax->attr_i("axis", g.model().opset < 13 ? 1 : -1);
    if (axis < 0) axis += rank;
    if (axis != rank - 1) continue;  // before opset 13 the last axis coerces to the same rows
    removed.push_back(index);
    double scale = 1;
    const int scores = unscale(g, softmax->inputs[0], &scale, &removed);
    const Node* mm_qk = g.producer(scores, "MatMul", &index);
    if (!mm_qk || g.readers(scores) != 1 || mm_qk->inputs.size() != 2) continue;
    removed.push_back(index);
    const int q = unscale(g, mm_qk->inputs[0], &scale, &removed);
    const int kt = unscale(g, mm_qk->inputs[1], &scale, &removed);
    size_t t_index = 0;
    const Node* transpose = g.producer(kt, "Transpose", &t_index);
    if (!transpose || g.readers(kt) != 1 || transpose->inputs.size() != 1) continue;
    std::vector<int64_t> perm = transpose->attr_ints("perm");
    if (perm.size() != size_t(rank)) continue;
    std::swap(perm[size_t(rank - 2)], perm[size_t(rank - 1)]);  // K = K^T with its last two axes swapped
    const int k0 = transpose->inputs[0];
    const Shape *qs = shape(g, q), *kts = shape(g, kt), *vs = shape(g, v);
    if (!qs || !kts || !vs || qs->size() != size_t(rank) || kts->size() != size_t(rank) ||
        vs->size() != size_t(rank))
      continue;
    const Shape batch(qs->begin(), qs->end() - 2);
    if (Shape(kts->begin(), kts->end() - 2) != batch || Shape(vs->begin(), vs->end() - 2) != batch ||
        kts->at(size_t(rank - 2)) != qs->back() || kts->back() != vs->at(size_t(rank - 2)))
      continue;
    Shape k_shape = *kts;
    std::swap(k_shape[size_t(rank - 2)], k_shape[size_t(rank - 1)]);
    int k = kt;
    if (is_identity(perm)) {
      k = k0;
      removed.push_back(t_index);
    } else {
      Node t = *transpose;
      Attributes::Map perm_attr;
      perm_attr["perm"].kind = Attribute::Kind::ints;
      perm_attr["perm"].ints = perm;
      t.attrs = perm_attr;
      g.set_shape(kt, k_shape);
      g.fuse(t_index, std::move(t), {});
    }
    Attributes::Map attrs;
    attrs["scale"].kind = Attribute::Kind::f;
    attrs["scale"].f = scale;
    attrs["dropout"].kind = Attribute::Kind::f;
    attrs["dropout"].f = dropout;
    g.fuse(i, fused_node(*mm_pv, "ScaledDotProductAttention", {q, k, v}, attrs), removed);
    fused++;
  }
  return fused;
}

}  // namespace autovm::model::fusion
