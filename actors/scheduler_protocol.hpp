// The prefill scheduler's public protocol: what a decode rank talks to over
// the control plane (published with caf-io on the prefill rank's host:port).
//
//   transfer_info -> kv_ready   a request and where its KV goes; answered once
//                               this rank's writes for the room are all
//                               delivery-complete (after the last chunk), or
//                               with the reason it failed
#pragma once

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "messages/messages.hpp"

namespace layerstream {

using scheduler_actor = caf::typed_actor<caf::replies_to<transfer_info>::with<kv_ready>>;

} // namespace layerstream
