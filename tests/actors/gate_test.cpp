// Scripted message sequences of the control-plane gate (node/auth.hpp): its
// challenge table stays bounded whatever a peer without the token sends.
// (The handshake itself, across a real actor system: tests/auth_test.cpp.)
#define CAF_SUITE gate
#include "fixture.hpp"

#include "node/auth.hpp"

using namespace layerstream;
using namespace layerstream::testing;

namespace {

/// Never asked here: the gate only hands its handle to the sessions it
/// spawns. (It takes an argument: CAF 0.17 spawns a function without
/// arguments through a null pointer.)
scheduler_actor::behavior_type idle_scheduler(uint32_t cp_rank) {
  return {[cp_rank](transfer_info& info) { return kv_ready{info.room, cp_rank, {}, 0}; }};
}

const std::string token = "the-cluster-token-for-gate-tests";

struct gate_fixture : actor_fixture {
  scheduler_actor scheduler;
  gate_actor gate;

  gate_fixture() {
    scheduler = sys.spawn(idle_scheduler, uint32_t{0});
    gate_config g;
    g.token = token;
    g.scheduler = scheduler;
    g.name = "rank 0";
    g.max_pending = 4;
    g.challenge_ttl = std::chrono::hours(1); // none expires during a test
    gate = sys.spawn(gate_impl, g);
    run();
  }

  ~gate_fixture() override {
    // From an actor of this process: the gate ignores anonymous exits.
    self->send_exit(gate, caf::exit_reason::user_shutdown);
    self->send_exit(scheduler, caf::exit_reason::user_shutdown);
    run();
  }

  gate_state& state() {
    return deref<caf::stateful_actor<gate_state, gate_actor::base>>(gate).state;
  }

  /// The gate's challenge for `client_nonce`.
  auth_challenge hello(const std::vector<uint8_t>& client_nonce) {
    auto hdl = self->request(gate, caf::infinite, auth_hello{client_nonce});
    sched.run();
    auth_challenge out;
    hdl.receive([&](auth_challenge& ch) { out = std::move(ch); },
                [](caf::error& err) { CAF_FAIL("hello: " << describe(err)); });
    return out;
  }

  /// The gate's answer to `proof`: none if it gave a session, else why not.
  caf::error answer(const auth_proof& proof) {
    auto hdl = self->request(gate, caf::infinite, proof);
    sched.run();
    caf::error out;
    hdl.receive([](scheduler_actor&) {}, [&](caf::error& err) { out = std::move(err); });
    return out;
  }

  /// A proof for `ch` with the right token.
  static auth_proof good_proof(const std::vector<uint8_t>& client_nonce, const auth_challenge& ch) {
    return auth_proof{ch.server_nonce, auth_mac(token, "decode", client_nonce, ch.server_nonce)};
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(gate_tests, gate_fixture)

CAF_TEST(a challenge its proof used leaves the table and one still open stays good) {
  // A peer keeps one challenge open and then sends hello and a wrong proof,
  // over and over: each used challenge must leave the table at once, not
  // when the open one ahead of it expires.
  auto open_nonce = auth_nonce();
  auto open = hello(open_nonce);
  for (int i = 0; i < 50; ++i) {
    auto nonce = auth_nonce();
    auto ch = hello(nonce);
    auto err = answer(auth_proof{ch.server_nonce,
                                 auth_mac("a-wrong-token-123", "decode", nonce, ch.server_nonce)});
    CAF_REQUIRE(is(err, lserr::unauthorized));
    CAF_CHECK_EQUAL(state().challenges.size(), 1u);
  }
  CAF_CHECK(state().challenges.contains(open.server_nonce));
  auto err = answer(good_proof(open_nonce, open));
  if (err)
    CAF_MESSAGE("the open challenge was dropped: " << describe(err));
  CAF_CHECK(!err);
  CAF_CHECK(state().challenges.empty());
  CAF_CHECK_EQUAL(state().sessions.size(), 1u);
}

CAF_TEST(at most max_pending challenges stay and the oldest goes first) {
  std::vector<std::vector<uint8_t>> nonces;
  std::vector<auth_challenge> challenges;
  for (int i = 0; i < 6; ++i) {
    nonces.push_back(auth_nonce());
    challenges.push_back(hello(nonces.back()));
    CAF_CHECK_LESS_OR_EQUAL(state().challenges.size(), 4u);
  }
  // 6 hellos, 4 kept: the first two were dropped.
  for (int i = 0; i < 2; ++i) {
    auto err = answer(good_proof(nonces[i], challenges[i]));
    CAF_CHECK(is(err, lserr::unauthorized));
    CAF_CHECK(describe(err).find("unknown, expired or already used") != std::string::npos);
  }
  auto err = answer(good_proof(nonces[2], challenges[2]));
  if (err)
    CAF_MESSAGE("a challenge within the bound was dropped: " << describe(err));
  CAF_CHECK(!err);
  CAF_CHECK_EQUAL(state().challenges.size(), 3u);
}

CAF_TEST_FIXTURE_SCOPE_END()
