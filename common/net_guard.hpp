// Where a process may connect or bind: checked before any socket or fabric
// endpoint is opened.
//
// Test traffic must stay on this machine. From the root namespace the test
// hosts' private subnet (and this sandbox's own eth0 subnet) is routed off
// the machine, so "directly connected" alone proves nothing there. The rule:
//  - loopback is always allowed;
//  - scope `test` (the default, `cluster.network = "test"`): any other address
//    only inside a test host, i.e. a network namespace made by
//    tests/cluster/hosts.sh, and only on a subnet directly connected there.
//    A test host is recognised by identity, not by name alone: the file
//    /proc/self/ns/net must be the same namespace (device and inode) as a
//    /run/netns/lstest-<id>-h<i> entry, and must not be init's namespace;
//  - scope `deployment` (`cluster.network = "deployment"`): a real cluster
//    whose config says so explicitly; its addresses are trusted.
// A server binds only to one of this host's own addresses in either scope.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace layerstream {

enum class network_scope { test, deployment };

/// The files the test-host check reads; tests point them elsewhere.
struct netns_paths {
  std::string self = "/proc/self/ns/net";
  /// init's namespace: the root one (in a container, the container's).
  std::string init = "/proc/1/ns/net";
  /// Where `ip netns add` keeps its named namespaces.
  std::string named_dir = "/run/netns";
};

/// Names of test-host namespaces: "lstest-" ID "-h" INDEX (tests/cluster/hosts.sh).
bool is_test_host_name(const std::string& name);

/// The name of the test host this process runs in, or an error saying why
/// this is not one.
caf::expected<std::string> current_test_host(const netns_paths& paths = {});

/// May this process connect to `host` (an IP literal or "localhost")?
caf::error check_connect(const std::string& host, network_scope scope,
                         const netns_paths& paths = {});

/// The socket address family an fi_getname name starts with (AF_UNSPEC when
/// it is too short to hold one; shm's string name gives whatever its first
/// bytes read as).
int fabric_name_family(const std::vector<uint8_t>& name);

/// The size of the sockaddr an IP name of `family` must have (sockaddr_in
/// for AF_INET, sockaddr_in6 for AF_INET6), 0 for any other family. A
/// provider reads an IP name as that sockaddr whatever its length, so a name
/// of another size must be refused before it reaches fi_av_insert.
size_t ip_name_size(int family);

/// May this process write to the fabric endpoint named `name` (fi_getname
/// bytes from a peer's transfer_info)? An IP provider's name (tcp, net,
/// sockets) is a sockaddr_in or sockaddr_in6: its address must pass
/// check_connect. Any other name (shm: a local region's name) is local by
/// construction and passes.
caf::error check_fabric_address(const std::vector<uint8_t>& name, network_scope scope,
                                const netns_paths& paths = {});

/// May this process bind to `host`? It must be one of its own addresses, and
/// outside loopback in scope `test` only inside a test host.
caf::error check_bind(const std::string& host, network_scope scope, const netns_paths& paths = {});

/// `host` is loopback or on a directly connected subnet of this network stack.
caf::error check_directly_reachable(const std::string& host);

/// `host` is one of this network stack's own addresses.
caf::error check_local_address(const std::string& host);

} // namespace layerstream
