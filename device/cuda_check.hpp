// The C boundary to the CUDA runtime: one family of check helpers, like
// transport/fabric/fabric_check.hpp for libfabric.
//
// A failed CUDA call becomes a layerstream error (lserr::event_failed for
// event calls, the code the caller names otherwise) whose text names the
// call, cudaGetErrorString's text, the code and file:line, e.g.
//   "cudaEventSynchronize(ev) failed: an illegal memory access was
//   encountered (700) at cuda_event.cpp:40"
// Only CUDA_RETURN_IF_ERROR returns from the calling function; CUDA_CHECK
// only produces the error value. Built only with the CUDA runtime.
#pragma once

#include <string>

#include "common/error.hpp"

namespace layerstream::cuda {

/// The error for a failed CUDA call `call` (its source text) that returned
/// `rc` (a cudaError_t, != cudaSuccess) at file:line.
caf::error call_error(lserr code, const char* call, int rc, const char* file, int line);

/// cudaGetErrorString's text for `rc`.
std::string error_text(int rc);

} // namespace layerstream::cuda

/// Evaluates `call` (a cudaError_t); on failure returns (from the enclosing
/// function, which returns caf::error or caf::expected<T>) an error with `code`.
#define CUDA_RETURN_IF_ERROR(code, call)                                                           \
  do {                                                                                             \
    const int ls_cuda_rc_ = static_cast<int>(call);                                                \
    if (ls_cuda_rc_ != 0)                                                                          \
      return ::layerstream::cuda::call_error(code, #call, ls_cuda_rc_, __FILE__, __LINE__);        \
  } while (false)

/// Evaluates `call`; yields a caf::error with `code` (empty on success). Never returns.
#define CUDA_CHECK(code, call)                                                                     \
  [&]() -> caf::error {                                                                            \
    const int ls_cuda_rc_ = static_cast<int>(call);                                                \
    return ls_cuda_rc_ != 0                                                                        \
               ? ::layerstream::cuda::call_error(code, #call, ls_cuda_rc_, __FILE__, __LINE__)     \
               : caf::error{};                                                                     \
  }()
