#include "common/net_guard.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

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

} // namespace

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
