// Einsum equations (contract in einsum.h).
#include "model/einsum.h"

#include <algorithm>
#include <cctype>

#include "util/error.h"

namespace autovm::model {
namespace {

[[noreturn]] void refuse(ErrorKind kind, std::string_view equation, const std::string& why) {
  throw Error(kind, "equation '" + std::string(equation) + "' " + why);
}

bool is_label(char ch) { return std::isalpha(static_cast<unsigned char>(ch)) != 0; }

// One term: labels only, each at most once.
std::string parse_term(std::string_view equation, std::string_view term, bool output) {
  std::string labels;
  for (char ch : term) {
    if (ch == ' ') continue;
    if (ch == '.')
      refuse(ErrorKind::unsupported, equation, "uses an ellipsis; AutoVM plans Einsum with a label for every axis");
    if (!is_label(ch)) refuse(ErrorKind::invalid_model, equation, std::string("has '") + ch + "', which is not a label (a-z, A-Z)");
    if (labels.find(ch) != std::string::npos) {
      if (output) refuse(ErrorKind::invalid_model, equation, std::string("repeats label '") + ch + "' in its output");
      refuse(ErrorKind::unsupported, equation,
             std::string("repeats label '") + ch + "' within one operand (a diagonal); AutoVM does not plan that");
    }
    labels += ch;
  }
  return labels;
}

}  // namespace

EinsumEquation parse_einsum(std::string_view equation) {
  EinsumEquation e;
  const size_t arrow = equation.find("->");
  const std::string_view lhs = equation.substr(0, arrow);
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    e.inputs.push_back(parse_term(equation, lhs.substr(start, comma == std::string_view::npos ? lhs.npos : comma - start), false));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (e.inputs.size() != 2)
    refuse(ErrorKind::unsupported, equation, "has " + std::to_string(e.inputs.size()) + " operands; AutoVM plans Einsum of two");
  if (arrow != std::string_view::npos) {
    e.output = parse_term(equation, equation.substr(arrow + 2), true);
    for (char ch : e.output) {
      if (e.inputs[0].find(ch) == std::string::npos && e.inputs[1].find(ch) == std::string::npos)
        refuse(ErrorKind::invalid_model, equation, std::string("has output label '") + ch + "', which no operand has");
    }
  } else {
    const std::string both = e.inputs[0] + e.inputs[1];
    for (char ch : both)
      if (std::count(both.begin(), both.end(), ch) == 1) e.output += ch;
    std::sort(e.output.begin(), e.output.end());
  }
  return e;
}

std::map<char, int64_t> einsum_extents(const EinsumEquation& e, const std::vector<const Shape*>& shapes) {
  const std::string equation = e.inputs[0] + "," + e.inputs[1] + "->" + e.output;
  if (shapes.size() != e.inputs.size())
    refuse(ErrorKind::invalid_model, equation, "has " + std::to_string(e.inputs.size()) + " operands but the node has " +
                                                   std::to_string(shapes.size()) + " inputs");
  std::map<char, int64_t> extents;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::string& term = e.inputs[i];
    const Shape& s = *shapes[i];
    if (term.size() != s.size())
      refuse(ErrorKind::invalid_model, equation, "names " + std::to_string(term.size()) + " axes for operand " + std::to_string(i) +
                                                     ", which has rank " + std::to_string(s.size()));
    for (size_t a = 0; a < term.size(); ++a) {
      auto [it, fresh] = extents.emplace(term[a], s[a]);
      if (!fresh && it->second != s[a])
        refuse(ErrorKind::invalid_model, equation, std::string("gives label '") + term[a] + "' extents " +
                                                       std::to_string(it->second) + " and " + std::to_string(s[a]));
    }
  }
  return extents;
}

Shape einsum_output_shape(const EinsumEquation& e, const std::map<char, int64_t>& extents) {
  Shape out;
  for (char ch : e.output) out.push_back(extents.at(ch));
  return out;
}

double einsum_flops(const std::map<char, int64_t>& extents) {
  double combinations = 1;
  for (const auto& [label, extent] : extents) combinations *= static_cast<double>(extent);
  return 2 * combinations;
}

}  // namespace autovm::model
