// notifier: what the forward thread calls after each layer's KV write.
//
// It does exactly two things: record ONE event on the compute stream and
// send ONE layer_end{layer, event} to the manager. It never blocks, never
// waits for the device, allocates nothing per active request, and touches
// no actor state (the fan-out to contexts happens in the manager).
// Thread contract: one forward thread calls it; it is not shared.
#pragma once

#include "actors/manager.hpp"
#include "device/event.hpp"

namespace layerstream {

class layer_notifier {
 public:
  layer_notifier(manager_actor manager, event_source& events, stream_handle stream = 0);

  /// Layer `layer`'s KV write has been enqueued on the compute stream.
  void operator()(uint32_t layer);

 private:
  manager_actor manager_;
  event_source& events_;
  stream_handle stream_;
};

} // namespace layerstream
