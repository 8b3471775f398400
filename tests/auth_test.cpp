// Control-plane authentication (node/auth.hpp): the HMAC handshake and the
// gate's refusals, with a real actor system (no network: one node).
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include "common/error.hpp"
#include "node/auth.hpp"

using namespace layerstream;

namespace {

struct auth_system_config : caf::actor_system_config {
  auth_system_config() { layerstream::add_message_types(*this); }
};

const std::string token = "the-cluster-token-for-tests";
constexpr auto timeout = std::chrono::seconds(5);

/// Answers every transfer_info with kv_ready{room, cp_rank, ok, bytes = room * 10}.
/// (It takes an argument: CAF 0.17 spawning a function without arguments
/// dereferences a null argument tuple, which UBSan reports.)
scheduler_actor::behavior_type fake_scheduler(uint32_t cp_rank) {
  return {[cp_rank](transfer_info& info) {
    return kv_ready{info.room, cp_rank, {}, info.room * 10};
  }};
}

/// Never answers a transfer_info (a stalled or overloaded rank): the
/// promise is dropped undelivered, which CAF 0.17 does not report.
scheduler_actor::behavior_type silent_scheduler(scheduler_actor::pointer self, uint32_t) {
  return {[self](transfer_info&) -> caf::result<kv_ready> {
    return self->make_response_promise<kv_ready>();
  }};
}

struct AuthTest : ::testing::Test {
  auth_system_config cfg;
  caf::actor_system sys{cfg};
  scheduler_actor scheduler = sys.spawn(fake_scheduler, uint32_t{7});
  gate_actor gate;
  caf::scoped_actor self{sys};
  /// Decode's sender of proofs; every session here watches it.
  auth_presence presence{sys};

  AuthTest() { gate = spawn_gate(scheduler, "rank 0"); }
  ~AuthTest() override {
    self->send_exit(gate, caf::exit_reason::user_shutdown);
    self->send_exit(scheduler, caf::exit_reason::user_shutdown);
  }

  /// A gate with the test's token in front of `to`, rank 1 of 2.
  gate_actor spawn_gate(const scheduler_actor& to, std::string name,
                        caf::timespan session_timeout = gate_config{}.session_timeout) {
    gate_config g;
    g.token = token;
    g.scheduler = to;
    g.name = std::move(name);
    g.session_timeout = session_timeout;
    g.rank = rank_facts{1, 2, 60000, 10000};
    return sys.spawn(gate_impl, g);
  }

  auth_challenge hello(const std::vector<uint8_t>& nonce) {
    auth_challenge out;
    self->request(gate, timeout, auth_hello{nonce})
        .receive([&](auth_challenge& c) { out = c; },
                 [&](caf::error& e) { ADD_FAILURE() << describe(e); });
    return out;
  }

  /// Sends `session` a transfer_info for `room` carrying `key`, from `from`;
  /// the answer: kv_ready, or the error it was refused with.
  static caf::expected<kv_ready> forward(caf::scoped_actor& from, const scheduler_actor& session,
                                         room_id room, const std::vector<uint8_t>& key) {
    caf::expected<kv_ready> out{caf::error{}};
    from->request(session, timeout, transfer_info{room, 16, {}, {}, {}, {}, {}, 1, key})
        .receive([&](kv_ready& k) { out = k; }, [&](caf::error& e) { out = e; });
    return out;
  }

  /// `session` has exited, or does so within the timeout.
  bool ends(const scheduler_actor& session) {
    self->monitor(session);
    bool down = false;
    self->receive([&](caf::down_msg& dm) { down = dm.source == session.address(); },
                  caf::after(timeout) >> [] {});
    return down;
  }

  caf::error proof(const auth_proof& p) {
    caf::error out;
    self->request(gate, timeout, p)
        .receive([](scheduler_actor&) {}, [&](caf::error& e) { out = e; });
    return out;
  }
};

} // namespace

TEST(AuthMac, DependsOnTokenRoleAndBothNonces) {
  auto a = auth_nonce(), b = auth_nonce();
  ASSERT_EQ(a.size(), auth_nonce_bytes);
  EXPECT_NE(a, b) << "two fresh nonces must differ";
  auto mac = auth_mac(token, "decode", a, b);
  EXPECT_EQ(mac.size(), 32u);
  EXPECT_TRUE(auth_equal(mac, auth_mac(token, "decode", a, b)));
  EXPECT_FALSE(auth_equal(mac, auth_mac(token + "x", "decode", a, b)));
  EXPECT_FALSE(auth_equal(mac, auth_mac(token, "prefill", a, b)));
  EXPECT_FALSE(auth_equal(mac, auth_mac(token, "decode", b, a)));
  EXPECT_FALSE(auth_equal({}, {})) << "an empty proof never matches";
}

TEST_F(AuthTest, TheRightTokenGetsASessionThatReachesTheScheduler) {
  auto session = authenticate(sys, presence, gate, token, timeout);
  ASSERT_TRUE(session) << describe(session.error());
  EXPECT_EQ(session->key.size(), 32u);
  auto got = forward(self, session->session, 42, session->key);
  ASSERT_TRUE(got) << describe(got.error());
  EXPECT_EQ(got->room, 42u);
  EXPECT_EQ(got->cp_rank, 7u);
  EXPECT_EQ(got->bytes, 420u);
}

// What a forged BASP routed message amounts to: the right session, from the
// authenticated node (the node is what a forger can claim), without the key.
TEST_F(AuthTest, ASessionRefusesTransferInfoWithoutItsKeyEvenFromItsOwnNode) {
  auto session = authenticate(sys, presence, gate, token, timeout);
  ASSERT_TRUE(session) << describe(session.error());
  auto wrong = session->key;
  wrong[0] ^= 1;
  for (const auto& key : {std::vector<uint8_t>{}, wrong}) {
    auto got = forward(self, session->session, 43, key);
    ASSERT_FALSE(got) << "forwarded without the session's key";
    EXPECT_TRUE(is(got.error(), lserr::unauthorized)) << describe(got.error());
  }
}

TEST_F(AuthTest, ANewHandshakeFromTheSameNodeReplacesTheSessionAndItsKey) {
  auto first = authenticate(sys, presence, gate, token, timeout);
  auto second = authenticate(sys, presence, gate, token, timeout);
  ASSERT_TRUE(first && second);
  EXPECT_NE(first->key, second->key) << "fresh nonces give a fresh key";
  auto old_key = forward(self, second->session, 44, first->key);
  ASSERT_FALSE(old_key) << "the old key still works";
  EXPECT_TRUE(is(old_key.error(), lserr::unauthorized)) << describe(old_key.error());
  auto got = forward(self, second->session, 45, second->key);
  ASSERT_TRUE(got) << describe(got.error());
  EXPECT_EQ(got->room, 45u);
}

TEST_F(AuthTest, TheGateOutlivesTheSessionsItCloses) {
  // A replaced or evicted session exits; the gate, linked to it, must not
  // take that exit as its own: other decode nodes' sessions hang on it.
  auto first = authenticate(sys, presence, gate, token, timeout);
  ASSERT_TRUE(first) << describe(first.error());
  auto second = authenticate(sys, presence, gate, token, timeout); // closes the first
  ASSERT_TRUE(second) << describe(second.error());
  ASSERT_TRUE(ends(first->session)) << "the replaced session never exited";
  auto third = authenticate(sys, presence, gate, token, timeout);
  ASSERT_TRUE(third) << "the gate died with the session it closed: " << describe(third.error());
  auto got = forward(self, third->session, 46, third->key);
  ASSERT_TRUE(got) << describe(got.error());
  EXPECT_EQ(got->room, 46u);
}

TEST_F(AuthTest, DecodeLearnsTheRanksPlaceAndTimeoutsAndRefusesOnesThatDoNotFit) {
  auto session = authenticate(sys, presence, gate, token, timeout);
  ASSERT_TRUE(session) << describe(session.error());
  EXPECT_EQ(session->rank, (rank_facts{1, 2, 60000, 10000}));
  EXPECT_FALSE(check_rank_facts(session->rank, rank_facts{1, 2, 60000, 10000}));
  auto listed_first = check_rank_facts(session->rank, rank_facts{0, 2, 60000, 10000});
  EXPECT_TRUE(is(listed_first, lserr::bad_input));
  EXPECT_NE(describe(listed_first)
                .find("it is cp_rank 1 of cp_size 2, decode.prefill lists it as rank 0 of 2"),
            std::string::npos)
      << describe(listed_first);
  EXPECT_TRUE(check_rank_facts(session->rank, rank_facts{1, 4, 60000, 10000}));
  auto shorter = check_rank_facts(session->rank, rank_facts{1, 2, 30000, 10000});
  EXPECT_NE(describe(shorter).find(
                "its timeouts.room_ms / submit_ms are 60000 / 10000, this decode's 30000 / 10000"),
            std::string::npos)
      << describe(shorter);
  EXPECT_TRUE(check_rank_facts(session->rank, rank_facts{1, 2, 60000, 9000}));
}

TEST_F(AuthTest, AnExitFromNoActorStopsNeitherTheGateNorASession) {
  // What a peer on the published port can send before it authenticates:
  // an exit with no sender (anon_send_exit through BASP). Only an actor of
  // this process stops the gate (run_prefill's shutdown, this fixture's).
  auto first = authenticate(sys, presence, gate, token, timeout);
  ASSERT_TRUE(first) << describe(first.error());
  caf::anon_send_exit(gate, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(first->session, caf::exit_reason::user_shutdown);
  auto got = forward(self, first->session, 47, first->key);
  ASSERT_TRUE(got) << "the session took the exit: " << describe(got.error());
  EXPECT_EQ(got->room, 47u);
  auto second = authenticate(sys, presence, gate, token, timeout);
  ASSERT_TRUE(second) << "the gate took the exit: " << describe(second.error());
  // Decode's presence, which every gate learns, refuses it too.
  caf::anon_send_exit(presence.handle(), caf::exit_reason::user_shutdown);
  auto third = authenticate(sys, presence, gate, token, timeout);
  ASSERT_TRUE(third) << "the presence took the exit: " << describe(third.error());
  // The control: an exit from an actor of this process closes the gate,
  // and with it the sessions linked to it.
  self->monitor(gate);
  self->send_exit(gate, caf::exit_reason::user_shutdown);
  bool down = false;
  self->receive([&](caf::down_msg& dm) { down = dm.source == gate.address(); },
                caf::after(timeout) >> [] {});
  EXPECT_TRUE(down) << "the gate ignored its own process's exit";
  EXPECT_TRUE(ends(second->session));
}

TEST_F(AuthTest, ASessionEndsWhenItsDecodeIsGoneAndTheGateGoesOn) {
  auth_presence decode{sys}; // this decode's own, not the fixture's
  auto session = authenticate(sys, decode, gate, token, timeout);
  ASSERT_TRUE(session) << describe(session.error());
  {
    // Stands in for decode's receiver; its node's connection dropping
    // reaches the session the same way (a down_msg for the proxy).
    caf::scoped_actor receiver{sys};
    auto got = forward(receiver, session->session, 47, session->key);
    ASSERT_TRUE(got) << describe(got.error());
    EXPECT_EQ(got->room, 47u);
  }
  {
    // The receiver is gone, the decode is not (it may open its next
    // receiver): the session stays.
    caf::scoped_actor probe{sys};
    auto got = forward(probe, session->session, 48, session->key);
    ASSERT_TRUE(got) << "the session ended while its decode was there: " << describe(got.error());
  }
  decode.stop();
  EXPECT_TRUE(ends(session->session)) << "the session outlived its decode";
  auto again = authenticate(sys, presence, gate, token, timeout);
  ASSERT_TRUE(again) << "the gate died with the session: " << describe(again.error());
}

TEST_F(AuthTest, ASessionThatNeverCarriedARoomEndsWhenItsDecodeIsGone) {
  // A decode that fails between its handshake and its first room (another
  // rank unreachable, a rank that is not the one it lists): nothing but
  // its presence tells the session it is gone.
  auth_presence decode{sys};
  auto session = authenticate(sys, decode, gate, token, timeout);
  ASSERT_TRUE(session) << describe(session.error());
  decode.stop();
  EXPECT_TRUE(ends(session->session)) << "a session that never carried a room outlived its decode";
  auto after = authenticate(sys, decode, gate, token, timeout);
  ASSERT_FALSE(after) << "a stopped presence authenticated";
  EXPECT_TRUE(is(after.error(), lserr::cancelled)) << describe(after.error());
}

TEST_F(AuthTest, ASessionEndsWhenItsSchedulerIsDownAndSaysNothingWasWritten) {
  auto doomed = sys.spawn(fake_scheduler, uint32_t{5});
  auto doomed_gate = spawn_gate(doomed, "rank 5");
  auto session = authenticate(sys, presence, doomed_gate, token, timeout);
  ASSERT_TRUE(session) << describe(session.error());
  auto got = forward(self, session->session, 49, session->key);
  ASSERT_TRUE(got) << describe(got.error());
  // The scheduler fails while its process lives on. Decode's receiver
  // monitors the session: its end is how decode learns the rank is down.
  self->monitor(session->session);
  self->send_exit(doomed, caf::exit_reason::kill);
  caf::error reason;
  bool down = false;
  self->receive(
      [&](caf::down_msg& dm) {
        down = dm.source == session->session.address();
        reason = dm.reason;
      },
      caf::after(timeout) >> [] {});
  ASSERT_TRUE(down) << "the session outlived its scheduler";
  EXPECT_TRUE(is(reason, lserr::peer_lost)) << describe(reason);
  EXPECT_NE(describe(reason).find("prefill scheduler is down"), std::string::npos)
      << describe(reason);
  // The gate goes on. A room sent to a rank whose scheduler is gone is
  // refused as never delivered, not as writes that may still land: decode
  // need not hold its pages.
  auto again = authenticate(sys, presence, doomed_gate, token, timeout);
  ASSERT_TRUE(again) << "the gate died with the session: " << describe(again.error());
  // It ends at once (its scheduler is gone); a request sent while it was
  // still ending could be dropped unanswered, so send once it has ended.
  ASSERT_TRUE(ends(again->session)) << "the new session outlived the gone scheduler";
  auto late = forward(self, again->session, 50, again->key);
  ASSERT_FALSE(late) << "a gone scheduler answered room " << late->room;
  EXPECT_TRUE(late.error() == caf::sec::request_receiver_down) << describe(late.error());
  self->send_exit(doomed_gate, caf::exit_reason::user_shutdown);
}

TEST_F(AuthTest, ASessionWhoseSchedulerDoesNotAnswerSaysItsWritesMayStillLand) {
  auto silent = sys.spawn(silent_scheduler, uint32_t{3});
  auto slow_gate = spawn_gate(silent, "rank 3", std::chrono::milliseconds(200));
  auto session = authenticate(sys, presence, slow_gate, token, timeout);
  ASSERT_TRUE(session) << describe(session.error());
  auto got = forward(self, session->session, 48, session->key);
  ASSERT_FALSE(got) << "the silent scheduler answered room " << got->room;
  // Not a plain timeout: decode must keep the room's pages.
  EXPECT_TRUE(is(got.error(), lserr::writes_in_flight)) << describe(got.error());
  EXPECT_NE(describe(got.error()).find("room 48"), std::string::npos) << describe(got.error());
  self->send_exit(slow_gate, caf::exit_reason::user_shutdown);
  self->send_exit(silent, caf::exit_reason::user_shutdown);
}

TEST_F(AuthTest, AWrongTokenIsRefusedOnBothSides) {
  auto session = authenticate(sys, presence, gate, "not-the-cluster-token", timeout);
  ASSERT_FALSE(session);
  EXPECT_TRUE(is(session.error(), lserr::unauthorized)) << describe(session.error());
  auto text = describe(session.error());
  EXPECT_NE(text.find("did not prove the cluster token"), std::string::npos) << text;
  EXPECT_NE(text.find("wrong token"), std::string::npos) << text;
}

TEST_F(AuthTest, AMissingProofIsRefused) {
  auto ch = hello(auth_nonce());
  auto err = proof(auth_proof{ch.server_nonce, {}});
  EXPECT_TRUE(is(err, lserr::unauthorized)) << describe(err);
  EXPECT_NE(describe(err).find("missing token proof"), std::string::npos) << describe(err);
}

TEST_F(AuthTest, TheGateProvesTheTokenToo) {
  auto nonce = auth_nonce();
  auto ch = hello(nonce);
  EXPECT_TRUE(auth_equal(ch.server_proof, auth_mac(token, "prefill", nonce, ch.server_nonce)));
  EXPECT_FALSE(auth_equal(ch.server_proof,
                          auth_mac("other-token-123456", "prefill", nonce, ch.server_nonce)));
}

TEST_F(AuthTest, AChallengeIsGoodForOneProofOnly) {
  auto nonce = auth_nonce();
  auto ch = hello(nonce);
  auth_proof good{ch.server_nonce, auth_mac(token, "decode", nonce, ch.server_nonce)};
  EXPECT_FALSE(proof(good)) << "the first proof is accepted";
  auto again = proof(good);
  EXPECT_TRUE(is(again, lserr::unauthorized)) << describe(again);
  EXPECT_NE(describe(again).find("already used"), std::string::npos) << describe(again);
}

TEST_F(AuthTest, AProofForAnUnknownChallengeIsRefused) {
  auto nonce = auth_nonce(), fake = auth_nonce();
  auto err = proof(auth_proof{fake, auth_mac(token, "decode", nonce, fake)});
  EXPECT_TRUE(is(err, lserr::unauthorized)) << describe(err);
}

TEST_F(AuthTest, AHelloWithAShortNonceIsRefused) {
  caf::error err;
  self->request(gate, timeout, auth_hello{{1, 2, 3}})
      .receive([](auth_challenge&) {}, [&](caf::error& e) { err = e; });
  EXPECT_TRUE(is(err, lserr::unauthorized)) << describe(err);
}

TEST_F(AuthTest, TransferInfoStraightToTheGateNeverReachesTheScheduler) {
  caf::error err;
  auto untyped = caf::actor_cast<caf::actor>(gate);
  self->request(untyped, timeout, transfer_info{1, 16, {}, {}, {}, {}, {}, 1, {}})
      .receive([](kv_ready&) { ADD_FAILURE() << "the gate forwarded an unauthenticated request"; },
               [&](caf::error& e) { err = e; });
  EXPECT_TRUE(is(err, lserr::unauthorized)) << describe(err);
}
