// Where a process may connect or bind: checked before any socket or fabric
// endpoint is opened.
//
// Test traffic must stay on this machine: loopback, or the private subnet of
// a test host (a network namespace) that the test made itself. From the root
// namespace such a subnet is routed off the machine, so "directly connected"
// is the rule: an address passes only if it is loopback or lies in the
// subnet of one of this host's own interfaces (no router in between).
#pragma once

#include <string>

#include "common/error.hpp"

namespace layerstream {

/// `host` (an IPv4/IPv6 literal or "localhost") is loopback or on a directly
/// connected subnet of this host. Otherwise an error saying why.
caf::error check_directly_reachable(const std::string& host);

/// `host` is one of this host's own addresses (what a server may bind to).
caf::error check_local_address(const std::string& host);

} // namespace layerstream
