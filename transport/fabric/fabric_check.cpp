#include "transport/fabric/fabric_check.hpp"

#include <cstring>
#include <string>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

namespace layerstream::fabric {

std::string strerror_text(long rc) {
  const int code = static_cast<int>(rc < 0 ? -rc : rc);
  return fi_strerror(code);
}

caf::error call_error(const char* call, long rc, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  std::string what = call;
  what += " failed: ";
  what += strerror_text(rc);
  what += " (" + std::to_string(rc) + ") at ";
  what += base != nullptr ? base + 1 : file;
  what += ":" + std::to_string(line);
  return make_error(lserr::fabric_error, std::move(what));
}

} // namespace layerstream::fabric
