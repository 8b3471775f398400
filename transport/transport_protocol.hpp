// The transport's actor protocol.
//
// `submit{room, layer, peer, blocks}` is answered with `submit_done` once
// every block is delivery-complete at the target (the bytes are in decode
// memory), or with a failure and the provider's error text.
// `submit_batch{layer, peer, rooms}` is the same for several rooms of one
// forward batch in one message: each room is its own job with its own
// status, and the one `submit_batch_done` comes once every room is settled.
// `connect_peer{peer}` makes a decode endpoint reachable and is answered with
// its peer_id. Contexts only see the submit half (submit_sink); the
// libfabric transport actor and the tests' scripted transport implement it.
#pragma once

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "messages/messages.hpp"

namespace layerstream {

/// What a context talks to: submit -> submit_done, submit_batch -> submit_batch_done.
using submit_sink = caf::typed_actor<caf::replies_to<submit>::with<submit_done>,
                                     caf::replies_to<submit_batch>::with<submit_batch_done>>;

/// The whole transport: submits plus peer set-up.
using transport_actor = submit_sink::extend<caf::replies_to<connect_peer>::with<peer_id>>;

} // namespace layerstream
