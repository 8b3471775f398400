// The C boundary to libfabric: one family of check helpers.
//
// Every libfabric call whose return code matters goes through one of these.
// They turn a negative return code into a layerstream error (lserr::fabric_error)
// whose text names the call, fi_strerror's text, the code and file:line, e.g.
//   "fi_domain(fabric_.get(), info_, &raw, nullptr) failed: Invalid argument (-22) at
//   endpoint.cpp:88"
// Only FI_RETURN_IF_ERROR returns from the calling function; FI_CHECK only
// produces the error value and leaves the control flow to the caller.
#pragma once

#include "common/error.hpp"

namespace layerstream::fabric {

/// The error for a failed libfabric call `call` (its source text) that
/// returned `rc` (< 0) at file:line.
caf::error call_error(const char* call, long rc, const char* file, int line);

/// libfabric's text for a (positive or negative) error number.
std::string strerror_text(long rc);

} // namespace layerstream::fabric

/// Evaluates `call`; on a negative result returns (from the enclosing
/// function, which returns caf::error or caf::expected<T>) the error.
#define FI_RETURN_IF_ERROR(call)                                                                   \
  do {                                                                                             \
    const long ls_fi_rc_ = static_cast<long>(call);                                                \
    if (ls_fi_rc_ < 0)                                                                             \
      return ::layerstream::fabric::call_error(#call, ls_fi_rc_, __FILE__, __LINE__);              \
  } while (false)

/// Evaluates `call`; yields a caf::error (empty on success). Never returns.
#define FI_CHECK(call)                                                                             \
  [&]() -> caf::error {                                                                            \
    const long ls_fi_rc_ = static_cast<long>(call);                                                \
    return ls_fi_rc_ < 0 ? ::layerstream::fabric::call_error(#call, ls_fi_rc_, __FILE__, __LINE__) \
                         : caf::error{};                                                           \
  }()
