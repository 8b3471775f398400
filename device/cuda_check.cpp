#include "device/cuda_check.hpp"

#include <cstring>

#include <cuda_runtime_api.h>

namespace layerstream::cuda {

std::string error_text(int rc) {
  return cudaGetErrorString(static_cast<cudaError_t>(rc));
}

caf::error call_error(lserr code, const char* call, int rc, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  std::string what = call;
  what += " failed: ";
  what += error_text(rc);
  what += " (" + std::to_string(rc) + ") at ";
  what += base != nullptr ? base + 1 : file;
  what += ":" + std::to_string(line);
  return make_error(code, std::move(what));
}

} // namespace layerstream::cuda
