// Contract: how a C entry point runs its body. guard() turns rt::Error into its status and any
// other exception into AUTOVM_ERR_OUT_OF_MEMORY (std::bad_alloc) or AUTOVM_ERR_BACKEND, keeping
// the message for autovm_last_error() (per thread). Nothing throws past a guard.
#pragma once

#include <new>
#include <stdexcept>

#include "autovm/autovm.h"
#include "plan.h"

namespace autovm::rt {

void set_last_error(const char* message) noexcept;
const char* last_error() noexcept;

template <typename F>
autovm_status guard(F&& body) noexcept {
  try {
    body();
    return AUTOVM_OK;
  } catch (const Error& e) {
    set_last_error(e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    set_last_error("out of host memory");
    return AUTOVM_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(e.what());
    return AUTOVM_ERR_BACKEND;
  } catch (...) {
    set_last_error("unknown internal error");
    return AUTOVM_ERR_BACKEND;
  }
}

}  // namespace autovm::rt
