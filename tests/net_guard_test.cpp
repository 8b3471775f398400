// The guard that keeps traffic on this machine.
#include <gtest/gtest.h>

#include "common/net_guard.hpp"

using namespace layerstream;

TEST(NetGuard, LoopbackIsAlwaysReachableAndLocal) {
  for (auto host : {"127.0.0.1", "127.0.0.5", "localhost", "::1", "[::1]"}) {
    EXPECT_FALSE(check_directly_reachable(host)) << host;
    EXPECT_FALSE(check_local_address(host)) << host;
  }
}

TEST(NetGuard, AnAddressBehindARouterIsRefused) {
  // TEST-NET-2 (this sandbox itself sits on TEST-NET-1) and a public address:
  // never on a subnet of this machine.
  for (auto host : {"198.51.100.77", "8.8.8.8"}) {
    auto err = check_directly_reachable(host);
    ASSERT_TRUE(err) << host;
    EXPECT_NE(describe(err).find("would leave the machine"), std::string::npos);
  }
}

TEST(NetGuard, ABindAddressMustBelongToThisHost) {
  EXPECT_TRUE(check_local_address("198.51.100.77"));
}

TEST(NetGuard, ANameThatIsNotAnAddressIsRefused) {
  EXPECT_TRUE(check_directly_reachable("example.org"));
  EXPECT_TRUE(check_local_address(""));
}
