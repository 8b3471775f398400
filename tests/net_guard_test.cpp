// The guard that keeps traffic on this machine.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include "common/net_guard.hpp"

using namespace layerstream;

namespace {

bool mentions(const caf::error& err, const std::string& text) {
  return describe(err).find(text) != std::string::npos;
}

/// A fake /run/netns and two fake namespace files, so that the test-host
/// check can be driven both ways without privileges.
struct fake_namespaces {
  std::string dir;
  netns_paths inside_host; // self is /run/netns/lstest-t1-h3
  netns_paths in_root;     // self is init's namespace
  netns_paths unnamed;     // self is some namespace nobody named

  fake_namespaces() {
    char tmpl[] = "/tmp/net_guard_test.XXXXXX";
    dir = mkdtemp(tmpl);
    mkdir((dir + "/netns").c_str(), 0700);
    touch(dir + "/init");
    touch(dir + "/other");
    touch(dir + "/netns/lstest-t1-h3");
    touch(dir + "/netns/lstest-t1-br");
    // A namespace named like something else but not a test host: refused.
    link((dir + "/other").c_str(), (dir + "/netns/prod-a").c_str());
    inside_host = {dir + "/netns/lstest-t1-h3", dir + "/init", dir + "/netns"};
    in_root = {dir + "/init", dir + "/init", dir + "/netns"};
    unnamed = {dir + "/other", dir + "/init", dir + "/netns"};
  }
  ~fake_namespaces() { std::system(("rm -rf '" + dir + "'").c_str()); }
  static void touch(const std::string& path) { std::ofstream{path} << "ns"; }
};

/// A non-loopback IPv4 address of this network stack, or "".
std::string own_ipv4() {
  ifaddrs* raw = nullptr;
  if (getifaddrs(&raw) != 0)
    return "";
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> list{raw, freeifaddrs};
  for (auto* i = raw; i != nullptr; i = i->ifa_next)
    if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET) {
      char buf[INET_ADDRSTRLEN];
      auto* a = &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr;
      if ((ntohl(a->s_addr) >> 24) != 127 && inet_ntop(AF_INET, a, buf, sizeof(buf)))
        return buf;
    }
  return "";
}

} // namespace

TEST(NetGuard, LoopbackIsAlwaysReachableAndLocal) {
  fake_namespaces ns;
  for (auto host : {"127.0.0.1", "127.0.0.5", "localhost", "::1", "[::1]"}) {
    EXPECT_FALSE(check_directly_reachable(host)) << host;
    EXPECT_FALSE(check_local_address(host)) << host;
    // Even in the root namespace, in scope test.
    EXPECT_FALSE(check_connect(host, network_scope::test, ns.in_root)) << host;
    EXPECT_FALSE(check_bind(host, network_scope::test, ns.in_root)) << host;
  }
}

TEST(NetGuard, AnAddressBehindARouterIsRefused) {
  // TEST-NET-2 (this sandbox itself sits on TEST-NET-1) and a public address:
  // never on a subnet of this machine.
  fake_namespaces ns;
  for (auto host : {"198.51.100.77", "8.8.8.8"}) {
    auto err = check_directly_reachable(host);
    ASSERT_TRUE(err) << host;
    EXPECT_TRUE(mentions(err, "would leave the machine")) << describe(err);
    // Inside a test host too: only its own subnet is reachable.
    EXPECT_TRUE(mentions(check_connect(host, network_scope::test, ns.inside_host),
                         "would leave the machine"));
  }
}

/// fi_getname bytes of an IP provider (tcp, net, sockets) at `ip`:`port`.
std::vector<uint8_t> sockaddr_name(const char* ip, uint16_t port) {
  std::vector<uint8_t> out;
  if (std::strchr(ip, ':') == nullptr) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    inet_pton(AF_INET, ip, &sa.sin_addr);
    out.resize(sizeof(sa));
    std::memcpy(out.data(), &sa, sizeof(sa));
  } else {
    sockaddr_in6 sa{};
    sa.sin6_family = AF_INET6;
    sa.sin6_port = htons(port);
    inet_pton(AF_INET6, ip, &sa.sin6_addr);
    out.resize(sizeof(sa));
    std::memcpy(out.data(), &sa, sizeof(sa));
  }
  return out;
}

TEST(NetGuard, APeersFabricAddressIsCheckedLikeAConnection) {
  fake_namespaces ns;
  // Loopback fabric peers pass in scope test, even from the root namespace.
  EXPECT_FALSE(
      check_fabric_address(sockaddr_name("127.0.0.1", 5000), network_scope::test, ns.in_root));
  EXPECT_FALSE(check_fabric_address(sockaddr_name("::1", 5000), network_scope::test, ns.in_root));
  // An address off the machine, as a decode's transfer_info could carry it, is refused.
  for (auto host : {"198.51.100.77", "8.8.8.8", "2001:db8::1"}) {
    auto err = check_fabric_address(sockaddr_name(host, 5000), network_scope::test, ns.inside_host);
    EXPECT_TRUE(mentions(err, "fabric peer at")) << host << ": " << describe(err);
  }
  // A deployment trusts its peers.
  EXPECT_FALSE(check_fabric_address(sockaddr_name("198.51.100.77", 5000), network_scope::deployment,
                                    ns.in_root));
  // shm names a local region (a string): nothing to check.
  const std::string shm = "fi_shm://12345";
  EXPECT_FALSE(check_fabric_address({shm.begin(), shm.end()}, network_scope::test, ns.in_root));
}

TEST(NetGuard, AnIpFabricAddressOfTheWrongSizeIsRefusedNotWavedThrough) {
  fake_namespaces ns;
  // An off-machine AF_INET name padded by 4 bytes, or cut short: the
  // provider would still read a sockaddr_in from it, so neither may pass as
  // "not an IP name", in either scope.
  for (auto scope : {network_scope::test, network_scope::deployment}) {
    auto padded = sockaddr_name("8.8.8.8", 5000);
    padded.resize(padded.size() + 4);
    EXPECT_TRUE(mentions(check_fabric_address(padded, scope, ns.in_root), "expected 16"));
    auto cut = sockaddr_name("127.0.0.1", 5000);
    cut.resize(8);
    EXPECT_TRUE(mentions(check_fabric_address(cut, scope, ns.in_root), "expected 16"));
    auto v6 = sockaddr_name("::1", 5000);
    v6.resize(v6.size() - 1);
    EXPECT_TRUE(mentions(check_fabric_address(v6, scope, ns.in_root), "AF_INET6"));
    EXPECT_TRUE(mentions(check_fabric_address({2}, scope, ns.in_root), "too short"));
  }
}

TEST(NetGuard, ABindAddressMustBelongToThisHost) {
  fake_namespaces ns;
  EXPECT_TRUE(check_local_address("198.51.100.77"));
  // A real cluster still binds only to its own addresses.
  EXPECT_TRUE(check_bind("198.51.100.77", network_scope::deployment, ns.in_root));
}

TEST(NetGuard, ANameThatIsNotAnAddressIsRefused) {
  fake_namespaces ns;
  EXPECT_TRUE(check_directly_reachable("example.org"));
  EXPECT_TRUE(check_local_address(""));
  EXPECT_TRUE(check_connect("example.org", network_scope::test, ns.inside_host));
}

TEST(NetGuard, TestHostNamesAreThoseTheHostsScriptMakes) {
  for (auto name : {"lstest-p123-h0", "lstest-try-h12"})
    EXPECT_TRUE(is_test_host_name(name)) << name;
  for (auto name : {"lstest-p123-br", "lstest--h1", "lstest-x-h", "lstest-x-h1a", "prod-h1", "",
                    "xlstest-a-h1"})
    EXPECT_FALSE(is_test_host_name(name)) << name;
}

TEST(NetGuard, ATestHostIsRecognisedByItsNamespaceIdentity) {
  fake_namespaces ns;
  auto host = current_test_host(ns.inside_host);
  ASSERT_TRUE(host) << describe(host.error());
  EXPECT_EQ(*host, "lstest-t1-h3");
  auto root = current_test_host(ns.in_root);
  ASSERT_FALSE(root);
  EXPECT_TRUE(mentions(root.error(), "root network namespace")) << describe(root.error());
  // Named, but not with a test host's name: not a test host.
  auto other = current_test_host(ns.unnamed);
  ASSERT_FALSE(other);
  EXPECT_TRUE(mentions(other.error(), "not a test host")) << describe(other.error());
  netns_paths missing = ns.inside_host;
  missing.self = ns.dir + "/no-such-file";
  EXPECT_FALSE(current_test_host(missing));
}

TEST(NetGuard, AConnectedSubnetIsReachableOnlyFromInsideATestHost) {
  auto own = own_ipv4();
  if (own.empty())
    GTEST_SKIP() << "this network stack has no IPv4 address besides loopback";
  fake_namespaces ns;
  EXPECT_FALSE(check_connect(own, network_scope::test, ns.inside_host));
  EXPECT_FALSE(check_bind(own, network_scope::test, ns.inside_host));
  for (const auto& outside : {ns.in_root, ns.unnamed}) {
    auto err = check_connect(own, network_scope::test, outside);
    ASSERT_TRUE(err) << own;
    EXPECT_TRUE(mentions(err, "refusing to connect to " + own)) << describe(err);
    EXPECT_TRUE(mentions(err, "cluster.network = \"deployment\"")) << describe(err);
    EXPECT_TRUE(mentions(check_bind(own, network_scope::test, outside), "refusing to bind"));
  }
}

TEST(NetGuard, ADeploymentTrustsItsConfiguredAddresses) {
  fake_namespaces ns;
  EXPECT_FALSE(check_connect("198.51.100.77", network_scope::deployment, ns.in_root));
  auto own = own_ipv4();
  if (!own.empty()) {
    EXPECT_FALSE(check_bind(own, network_scope::deployment, ns.in_root));
  }
}

// This process's real namespace. ctest runs it outside any test host; the
// cluster tests run it again inside one with LS_EXPECT_TEST_HOST=<its name>
// (tests/cluster/guard.sh), so both answers are checked against the kernel.
TEST(NetGuard, ThisProcessIsInATestHostExactlyWhenExpected) {
  const char* expected = std::getenv("LS_EXPECT_TEST_HOST");
  auto host = current_test_host();
  auto own = own_ipv4();
  if (expected != nullptr) {
    ASSERT_TRUE(host) << describe(host.error());
    EXPECT_EQ(*host, expected);
    ASSERT_FALSE(own.empty()) << "a test host has an address on its veth";
    EXPECT_FALSE(check_connect(own, network_scope::test));
    EXPECT_FALSE(check_bind(own, network_scope::test));
  } else {
    ASSERT_FALSE(host) << "unexpectedly inside test host " << *host;
    if (!own.empty()) {
      EXPECT_TRUE(mentions(check_connect(own, network_scope::test), "refusing to connect"));
      EXPECT_TRUE(mentions(check_bind(own, network_scope::test), "refusing to bind"));
    }
  }
}
