// Contract: a small streaming JSON writer. Deterministic: numbers are written in
// the shortest form that reads back exactly (fmt's "{}"), non-finite doubles as null, strings
// escaped per RFC 8259. The caller is responsible for structure (commas are inserted by
// `key`/`value` within an object or array). With a sink, the text is handed over in pieces of
// about a megabyte at line ends, so a large document never sits in memory whole.
//
// Rows of a long array may be formatted by other writers (on other threads) and appended in
// order: each starts with begin_rows(first) instead of begin_array(), writes its rows as the
// array's own writer would, and is appended with rows(); the text is the same byte for byte.
#pragma once

#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
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
  explicit JsonWriter(Sink sink = nullptr) : sink_(std::move(sink)) { buf_.grow_to(size_t(64) << 10, 0); }

  void newline() {
    put('\n');
    if (sink_ && used_ >= kPiece) flush();
  }
  // Hands what is buffered to the sink.
  void flush() {
    if (!sink_ || used_ == 0) return;
    sink_(std::string_view(buf_.data(), used_));
    used_ = 0;
  }

  // Starts a writer for rows in the middle of an array; `first`: no row comes before them.
  void begin_rows(bool first) { first_.push_back(first); }
  // Appends the rows `part` formatted (see begin_rows) to the array being written.
  void rows(const JsonWriter& part) {
    if (part.used_ == 0) return;
    if (!first_.empty()) first_.back() = false;
    if (sink_) {  // handed over whole: no copy
      flush();
      sink_(std::string_view(part.buf_.data(), part.used_));
    } else {
      put(std::string_view(part.buf_.data(), part.used_));
    }
  }
  // Makes room for `bytes` of text, allocated now (on the calling thread).
  void reserve(size_t bytes) {
    if (buf_.size() < bytes) buf_.grow_to(bytes, used_);
  }
  // Forgets the text and the structure written so far (to reuse the buffer).
  void clear() {
    used_ = 0;
    first_.clear();
    after_key_ = false;
  }

  JsonWriter& key(std::string_view k) {
    comma();
    string_literal(k);
    put(':');
    after_key_ = true;
    return *this;
  }
  // A key given as a string literal is copied as is, quotes and colon in one go: it must need
  // no escaping (every key of the plan's schema is plain ASCII).
  template <size_t N>
  JsonWriter& key(const char (&k)[N]) {
    static_assert(N >= 1);
    comma();
    char* p = room(N + 2);
    p[0] = '"';
    std::memcpy(p + 1, k, N - 1);
    p[N] = '"';
    p[N + 1] = ':';
    used_ += N + 2;
    after_key_ = true;
    return *this;
  }
  void value(std::string_view s) { comma(); string_literal(s); }
  void value(const char* s) { value(std::string_view(s)); }
  void value(bool b) { comma(); put(b ? "true" : "false"); }
  void value(int64_t v) { comma(); integer(v); }
  void value(int v) { value(static_cast<int64_t>(v)); }
  void value(double v) {
    comma();
    if (!std::isfinite(v)) {
      put("null");
    } else if (v == std::floor(v) && std::fabs(v) < 9e15) {
      integer(static_cast<int64_t>(v));
    } else {
      char* p = room(32);  // fmt's shortest form of a double is at most 24 characters
      used_ += static_cast<size_t>(fmt::format_to(p, FMT_COMPILE("{}"), v) - p);
    }
  }
  void null() { comma(); put("null"); }
  template <typename T>
  void array(const std::vector<T>& values) {
    begin_array();
    for (const T& v : values) value(static_cast<std::conditional_t<std::is_integral_v<T>, int64_t, T>>(v));
    end_array();
  }

 private:
  static constexpr size_t kPiece = size_t(1) << 20;  // bytes handed to the sink at a time

  // The text is written straight into buf_[0, used_): a plan of a million tensors is hundreds
  // of megabytes, so appending must cost little more than the copy.
  char* room(size_t n) {  // where the next n bytes go
    if (buf_.size() - used_ < n) grow(n);
    return buf_.data() + used_;
  }
  [[gnu::noinline]] void grow(size_t n) { buf_.grow_to(std::max(2 * buf_.size(), used_ + n), used_); }
  void put(char c) {
    *room(1) = c;
    ++used_;
  }
  void put(std::string_view s) {
    std::memcpy(room(s.size()), s.data(), s.size());
    used_ += s.size();
  }
  void open(char c) { comma(); put(c); first_.push_back(true); }
  void close(char c) { put(c); first_.pop_back(); }
  void comma() {
    if (after_key_) { after_key_ = false; return; }
    if (!first_.empty()) {
      if (!first_.back()) put(',');
      first_.back() = false;
    }
  }
  // Integers as fmt's "{}" writes them: plain decimal.
  void integer(int64_t v) {
    constexpr size_t kMax = 20;  // "-9223372036854775808"
    char* p = room(kMax);
    used_ += static_cast<size_t>(std::to_chars(p, p + kMax, v).ptr - p);
  }
  static bool needs_escape(std::string_view s) {
    for (char ch : s)
      if (ch == '"' || ch == '\\' || static_cast<unsigned char>(ch) < 0x20) return true;
    return false;
  }
  void string_literal(std::string_view s) {
    if (!needs_escape(s)) {  // the common case: copied as is
      char* p = room(s.size() + 2);
      p[0] = '"';
      std::memcpy(p + 1, s.data(), s.size());
      p[s.size() + 1] = '"';
      used_ += s.size() + 2;
      return;
    }
    put('"');
    for (char ch : s) {
      auto c = static_cast<unsigned char>(ch);
      switch (c) {
        case '"': put("\\\""); break;
        case '\\': put("\\\\"); break;
        case '\n': put("\\n"); break;
        case '\r': put("\\r"); break;
        case '\t': put("\\t"); break;
        default:
          if (c < 0x20) used_ += fmt::format_to_n(room(6), 6, "\\u{:04x}", c).size;
          else put(ch);
      }
    }
    put('"');
  }

  Sink sink_;
  // Text storage that, unlike std::vector<char>, does not zero what it allocates.
  class Buffer {
   public:
    char* data() { return data_.get(); }
    const char* data() const { return data_.get(); }
    size_t size() const { return size_; }
    void grow_to(size_t size, size_t keep) {  // keeps the first `keep` bytes
      std::unique_ptr<char[]> bigger(new char[size]);
      if (keep) std::memcpy(bigger.get(), data_.get(), keep);
      data_ = std::move(bigger);
      size_ = size;
    }

   private:
    std::unique_ptr<char[]> data_;
    size_t size_ = 0;
  };
  Buffer buf_;
  size_t used_ = 0;
  std::vector<char> first_;  // per open object or array: nothing written in it yet
  bool after_key_ = false;
};

}  // namespace autovm
