// A failed room's decode pages and the writes that may still land in them:
// one prefill rank and a decode node in this process, real actors and a real
// libfabric endpoint (tcp;ofi_rxm on 127.0.0.1). The decode target stops
// making progress while its endpoint stays open (a stalled decode process),
// so the prefill engine's writes are posted and never delivery-complete. The
// room must fail with writes_in_flight, and decode must keep its pages: the
// writes could still land.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "common/log.hpp"
#include "config/loader.hpp"
#include "node/nodes.hpp"

using namespace layerstream;
using namespace std::chrono_literals;

namespace {

struct quiet_config : caf::actor_system_config {
  quiet_config() {
    layerstream::add_message_types(*this);
    set("logger.verbosity", caf::atom("quiet"));
  }
};

/// The receiver's answer to `msg`, or the error it got (unknown_room for a
/// forgotten room, a timeout if none came).
template <class Answer, class Message>
caf::expected<Answer> ask(caf::scoped_actor& self, const receiver_actor& rx, Message msg) {
  caf::expected<Answer> out{make_error(lserr::timeout, "no answer")};
  self->request(rx, 30s, std::move(msg))
      .receive([&](Answer& a) { out = std::move(a); }, [&](caf::error& e) { out = std::move(e); });
  return out;
}

/// The scripted run on a started cluster; its scoped actor ends with it.
void run_stalled_room(caf::actor_system& sys, local_cluster& cluster) {
  caf::scoped_actor self{sys};
  auto& rx = cluster.decode->receiver;

  // A first room completes: the connection is up and the path works.
  auto first = ask<room_result>(self, rx, open_room{1, 64});
  ASSERT_TRUE(static_cast<bool>(first)) << describe(first.error());
  ASSERT_FALSE(first->status) << describe(first->status);
  ask<caf::ok_atom>(self, rx, close_room{1});

  // Decode stalls: its endpoint stays open, nothing it receives completes.
  cluster.decode->target->stall_for_test();
  auto second = ask<room_result>(self, rx, open_room{2, 256});
  ASSERT_TRUE(static_cast<bool>(second)) << describe(second.error());
  EXPECT_TRUE(is(second->status, lserr::writes_in_flight)) << describe(second->status);
  EXPECT_NE(describe(second->status).find("prefill rank 0"), std::string::npos)
      << describe(second->status);

  // The prefill rank keeps room 2's 16 src pages out of its pool too (a
  // write it gave up on may still read them); room 1's came back.
  scheduler_stats prefill_stats;
  self->request(cluster.prefill[0]->scheduler, 30s, stats_query{})
      .receive([&](scheduler_stats& s) { prefill_stats = s; },
               [&](caf::error& e) { ADD_FAILURE() << "no prefill stats: " << describe(e); });
  EXPECT_EQ(prefill_stats.pages_total - prefill_stats.pages_free, 16u);
  EXPECT_EQ(prefill_stats.rooms_open, 0u);

  // Closed, the failed room is still known and its 16 pages stay taken: a
  // room needing 20 of the pool's 32 pages finds only 16 free.
  auto closed = ask<caf::ok_atom>(self, rx, close_room{2});
  EXPECT_TRUE(static_cast<bool>(closed)) << describe(closed.error());
  auto held = ask<room_status>(self, rx, room_status_query{2});
  ASSERT_TRUE(static_cast<bool>(held)) << "the failed room was forgotten (its pages released) "
                                          "while the prefill rank could still write: "
                                       << describe(held.error());
  EXPECT_EQ(to_string(held->state), "failed");
  EXPECT_NE(held->reason.find("its 16 pages stay held"), std::string::npos) << held->reason;
  auto third = ask<room_result>(self, rx, open_room{3, 320});
  ASSERT_TRUE(static_cast<bool>(third)) << describe(third.error());
  EXPECT_TRUE(is(third->status, lserr::bad_input)) << describe(third->status);
  EXPECT_NE(
      describe(third->status)
          .find("20 pages asked, the pool has 16 besides held pages; 16 pages are held by 1 failed "
                "room that a prefill rank may still write into"),
      std::string::npos)
      << describe(third->status);
}

} // namespace

TEST(HeldPages, AStalledDecodeLinkFailsTheRoomWithWritesInFlightAndDecodeKeepsItsPages) {
  log::set_level("off"); // the failures are expected
  auto cfg = std::get<deployment_config>(load_config_string(embedded_demo_config(), "demo.toml"));
  cfg.model.layers = 4;
  cfg.model.layer_compute = 1ms;
  // The prefill engine gives up on the stalled writes at submit; decode's
  // own deadline comes later. Generous: the first, healthy room must finish
  // within submit under a loaded sanitizer run too.
  cfg.timeouts.submit = 10s;
  cfg.timeouts.room = 60s;
  cfg.decode.pool_pages = 32;
  auto err = validate_for(cfg, config_role::demo, "held pages");
  ASSERT_FALSE(err) << err->to_string();

  quiet_config scfg;
  caf::actor_system sys{scfg};
  local_cluster cluster;
  ASSERT_FALSE(cluster.start(sys, cfg)) << "cluster did not start";
  run_stalled_room(sys, cluster);
  cluster.stop(sys); // after the scoped actor is gone: stop waits for every actor
}
