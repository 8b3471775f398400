#include "actors/notifier.hpp"

#include <caf/send.hpp>

namespace layerstream {

layer_notifier::layer_notifier(manager_actor manager, event_source& events, stream_handle stream)
    : manager_(std::move(manager)), events_(events), stream_(stream) {
  // nop
}

void layer_notifier::operator()(uint32_t layer) {
  caf::anon_send(manager_, layer_end{layer, events_.record(stream_)});
}

} // namespace layerstream
