// Contract: a small streaming JSON writer into a string. Deterministic: numbers are written in
// the shortest form that reads back exactly (fmt's "{}"), non-finite doubles as null, strings
// escaped per RFC 8259. The caller is responsible for structure (commas are inserted by
// `key`/`value` within an object or array). With a sink, the text is handed over in pieces of
// about a megabyte at line ends, so a large document never sits in memory whole.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace autovm {

class JsonWriter {
 public:
  void begin_object() { open('{'); }
  void end_object() { close('}'); }
  void begin_array() { open('['); }
  void end_array() { close(']'); }
  using Sink = std::function<void(std::string_view)>;
  explicit JsonWriter(Sink sink = nullptr) : sink_(std::move(sink)) {}

  void newline() {
    out_ += '\n';
    if (sink_ && out_.size() >= (1u << 20)) flush();
  }
  // Hands what is buffered to the sink.
  void flush() {
    if (!sink_ || out_.empty()) return;
    sink_(out_);
    out_.clear();
  }

  JsonWriter& key(std::string_view k) {
    comma();
    string_literal(k);
    out_ += ':';
    after_key_ = true;
    return *this;
  }
  void value(std::string_view s) { comma(); string_literal(s); }
  void value(const char* s) { value(std::string_view(s)); }
  void value(bool b) { comma(); out_ += b ? "true" : "false"; }
  void value(int64_t v) { comma(); fmt::format_to(std::back_inserter(out_), "{}", v); }
  void value(int v) { value(static_cast<int64_t>(v)); }
  void value(double v) {
    comma();
    if (!std::isfinite(v)) out_ += "null";
    else if (v == std::floor(v) && std::fabs(v) < 9e15) fmt::format_to(std::back_inserter(out_), "{}", static_cast<int64_t>(v));
    else fmt::format_to(std::back_inserter(out_), "{}", v);
  }
  void null() { comma(); out_ += "null"; }
  template <typename T>
  void array(const std::vector<T>& values) {
    begin_array();
    for (const T& v : values) value(static_cast<std::conditional_t<std::is_integral_v<T>, int64_t, T>>(v));
    end_array();
  }

 private:
  void open(char c) { comma(); out_ += c; first_.push_back(true); }
  void close(char c) { out_ += c; first_.pop_back(); }
  void comma() {
    if (after_key_) { after_key_ = false; return; }
    if (!first_.empty()) {
      if (!first_.back()) out_ += ',';
      first_.back() = false;
    }
  }
  void string_literal(std::string_view s) {
    out_ += '"';
    for (char ch : s) {
      auto c = static_cast<unsigned char>(ch);
      switch (c) {
        case '"': out_ += "\\\""; break;
        case '\\': out_ += "\\\\"; break;
        case '\n': out_ += "\\n"; break;
        case '\r': out_ += "\\r"; break;
        case '\t': out_ += "\\t"; break;
        default:
          if (c < 0x20) fmt::format_to(std::back_inserter(out_), "\\u{:04x}", c);
          else out_ += ch;
      }
    }
    out_ += '"';
  }

  Sink sink_;
  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace autovm
