#include "common/net_guard.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <cstring>
#include <memory>

namespace layerstream {

namespace {

struct parsed {
  bool v6 = false;
  in_addr v4{};
  in6_addr v6addr{};
};

bool parse(const std::string& host, parsed& out) {
  std::string h = host == "localhost" ? "127.0.0.1" : host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']')
    h = h.substr(1, h.size() - 2);
  if (inet_pton(AF_INET, h.c_str(), &out.v4) == 1)
    return true;
  if (inet_pton(AF_INET6, h.c_str(), &out.v6addr) == 1) {
    out.v6 = true;
    return true;
  }
  return false;
}

bool is_loopback(const parsed& p) {
  if (p.v6)
    return IN6_IS_ADDR_LOOPBACK(&p.v6addr);
  return (ntohl(p.v4.s_addr) >> 24) == 127;
}

/// Calls `f(address, netmask)` for every IPv4 address of this host's interfaces.
template <class F>
bool for_each_ipv4(F f) {
  ifaddrs* raw = nullptr;
  if (getifaddrs(&raw) != 0)
    return false;
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> list{raw, freeifaddrs};
  for (auto* i = raw; i != nullptr; i = i->ifa_next)
    if (i->ifa_addr != nullptr && i->ifa_netmask != nullptr && i->ifa_addr->sa_family == AF_INET)
      if (f(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr,
            reinterpret_cast<sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr))
        return true;
  return false;
}

bool is_loopback_host(const std::string& host) {
  parsed p;
  return parse(host, p) && is_loopback(p);
}

/// Why the addresses of a test configuration are refused outside a test host.
std::string outside_hint(const caf::error& why) {
  return message_of(why) +
         "; test traffic goes only to loopback or between test hosts "
         "(tests/cluster/hosts.sh); a real cluster must say so with cluster.network = "
         "\"deployment\"";
}

} // namespace

bool is_test_host_name(const std::string& name) {
  static constexpr const char prefix[] = "lstest-";
  if (name.rfind(prefix, 0) != 0)
    return false;
  auto h = name.rfind("-h");
  if (h == std::string::npos || h < sizeof(prefix) || h + 2 == name.size())
    return false;
  for (size_t i = h + 2; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9')
      return false;
  return true;
}

caf::expected<std::string> current_test_host(const netns_paths& paths) {
  struct stat self {};
  if (stat(paths.self.c_str(), &self) != 0)
    return make_error(lserr::bad_input, "cannot tell which network namespace this is: stat(" +
                                            paths.self + "): " + std::strerror(errno));
  struct stat init {};
  // Unreadable without privileges: then the named entry alone decides.
  if (stat(paths.init.c_str(), &init) == 0 && init.st_dev == self.st_dev &&
      init.st_ino == self.st_ino)
    return make_error(lserr::bad_input,
                      "this process runs in the root network namespace, not in a test host");
  std::unique_ptr<DIR, int (*)(DIR*)> dir{opendir(paths.named_dir.c_str()), closedir};
  if (dir != nullptr) {
    while (auto* entry = readdir(dir.get())) {
      std::string name = entry->d_name;
      if (!is_test_host_name(name))
        continue;
      struct stat named {};
      if (stat((paths.named_dir + "/" + name).c_str(), &named) == 0 &&
          named.st_dev == self.st_dev && named.st_ino == self.st_ino)
        return name;
    }
  }
  return make_error(lserr::bad_input, "this process's network namespace is not a test host (no " +
                                          paths.named_dir + "/lstest-<id>-h<i> is it)");
}

caf::error check_connect(const std::string& host, network_scope scope, const netns_paths& paths) {
  if (auto err = check_directly_reachable(host); err && scope == network_scope::test)
    return err; // not an address, or not even on a subnet of this stack
  if (scope == network_scope::deployment || is_loopback_host(host))
    return caf::none;
  auto where = current_test_host(paths);
  if (!where)
    return make_error(lserr::bad_input,
                      "refusing to connect to " + host + ": " + outside_hint(where.error()));
  return caf::none;
}

int fabric_name_family(const std::vector<uint8_t>& name) {
  sa_family_t family = AF_UNSPEC;
  if (name.size() >= sizeof(family))
    std::memcpy(&family, name.data(), sizeof(family));
  return family;
}

size_t ip_name_size(int family) {
  switch (family) {
  case AF_INET:
    return sizeof(sockaddr_in);
  case AF_INET6:
    return sizeof(sockaddr_in6);
  default:
    return 0;
  }
}

caf::error check_fabric_address(const std::vector<uint8_t>& name, network_scope scope,
                                const netns_paths& paths) {
  if (name.size() < sizeof(sa_family_t))
    return make_error(lserr::bad_input, "fabric peer address of " + std::to_string(name.size()) +
                                            " bytes: too short to be any address");
  const int family = fabric_name_family(name);
  // An IP name of another size is refused, not waved through as "not IP".
  if (const size_t want = ip_name_size(family); want != 0 && name.size() != want)
    return make_error(lserr::bad_input, "fabric peer address of " + std::to_string(name.size()) +
                                            " bytes with family " +
                                            (family == AF_INET ? "AF_INET" : "AF_INET6") +
                                            ": expected " + std::to_string(want));
  char text[INET6_ADDRSTRLEN] = {};
  if (family == AF_INET) {
    sockaddr_in sa{};
    std::memcpy(&sa, name.data(), sizeof(sa));
    inet_ntop(AF_INET, &sa.sin_addr, text, sizeof(text));
  } else if (family == AF_INET6) {
    sockaddr_in6 sa{};
    std::memcpy(&sa, name.data(), sizeof(sa));
    inet_ntop(AF_INET6, &sa.sin6_addr, text, sizeof(text));
  } else {
    return caf::none; // not an IP name (shm's is a string): nothing to place
  }
  if (auto err = check_connect(text, scope, paths))
    return make_error(lserr::bad_input,
                      "fabric peer at " + std::string{text} + ": " + message_of(err));
  return caf::none;
}

caf::error check_bind(const std::string& host, network_scope scope, const netns_paths& paths) {
  if (auto err = check_local_address(host))
    return err;
  if (scope == network_scope::deployment || is_loopback_host(host))
    return caf::none;
  auto where = current_test_host(paths);
  if (!where)
    return make_error(lserr::bad_input,
                      "refusing to bind to " + host + ": " + outside_hint(where.error()));
  return caf::none;
}

caf::error check_directly_reachable(const std::string& host) {
  parsed p;
  if (!parse(host, p))
    return make_error(lserr::bad_input, "'" + host + "' is not an IP address (or localhost)");
  if (is_loopback(p))
    return caf::none;
  if (!p.v6 && for_each_ipv4([&](in_addr_t addr, in_addr_t mask) {
        return (addr & mask) == (p.v4.s_addr & mask) && mask != 0;
      }))
    return caf::none;
  return make_error(lserr::bad_input,
                    "refusing to connect to " + host +
                        ": not loopback and not on a directly connected subnet of this host "
                        "(from here it would leave the machine)");
}

caf::error check_local_address(const std::string& host) {
  parsed p;
  if (!parse(host, p))
    return make_error(lserr::bad_input, "'" + host + "' is not an IP address (or localhost)");
  if (is_loopback(p))
    return caf::none;
  if (!p.v6 && for_each_ipv4([&](in_addr_t addr, in_addr_t) { return addr == p.v4.s_addr; }))
    return caf::none;
  return make_error(lserr::bad_input,
                    "refusing to bind to " + host + ": not an address of this host");
}

} // namespace layerstream
