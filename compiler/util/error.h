// Contract: the one error type of the compiler. Every failure caused by external input (a model,
// options, a file) is thrown as autovm::Error with a category that maps to a documented exit code
// of autovm-plan, and a message that names the thing and says what to do. Our own invariants use
// assert(), never Error.
#pragma once

#include <stdexcept>
#include <string>

namespace autovm {

enum class ErrorKind {
  usage = 2,              // bad command line or option value
  unreadable = 3,         // model file missing or unreadable
  invalid_model = 4,      // not ONNX, truncated, malformed, inconsistent shapes
  unsupported = 5,        // ops the planner does not know
  infeasible = 6,         // the training step cannot fit the budget
  output = 7,             // the plan could not be written
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message) : std::runtime_error(std::move(message)), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  int exit_code() const { return static_cast<int>(kind_); }

 private:
  ErrorKind kind_;
};

}  // namespace autovm
