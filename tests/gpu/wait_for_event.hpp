// The GPU tests' one way to wait for a device event: bounded, so a layer
// that never completes fails the test instead of hanging it.
#pragma once

#include <chrono>
#include <future>
#include <memory>

#include "common/error.hpp"
#include "device/event.hpp"

namespace layerstream::test {

/// Waits up to `limit` for `ev`; its outcome, or a timeout error.
inline caf::error wait_for(const event_ptr& ev,
                           std::chrono::seconds limit = std::chrono::seconds(10)) {
  auto done = std::make_shared<std::promise<caf::error>>();
  auto fut = done->get_future();
  ev->on_complete([done](const caf::error& err) { done->set_value(err); });
  if (fut.wait_for(limit) != std::future_status::ready)
    return make_error(lserr::timeout,
                      "event did not complete in " + std::to_string(limit.count()) + " s");
  return fut.get();
}

} // namespace layerstream::test
