// Control-plane authentication: a decode peer must prove it holds the
// cluster token (config cluster.token) before the prefill scheduler is
// reachable, and the prefill gate proves it too before decode sends any
// fabric address or key. Mutual HMAC-SHA256 (OpenSSL libcrypto) over two
// fresh 32-byte nonces; the token itself never crosses the wire.
//
// Protocol (gate_actor: what a prefill rank publishes instead of its scheduler):
//   auth_hello -> auth_challenge    a fresh server nonce + the gate's proof
//   auth_proof -> scheduler_actor   a session for this peer, or lserr::unauthorized
// Anything else sent to the gate is refused and logged.
//
// A challenge is good for exactly one proof, from the node that asked, within
// challenge_ttl; at most max_pending challenges are kept (the oldest is
// dropped). A session forwards transfer_info to the scheduler only from the
// node that authenticated, carrying the session's key, and answers itself,
// so the scheduler's handle never leaves the process and no unauthenticated
// peer can address it. The node check alone is not enough: a BASP routed
// message names its source node in its own header, so any client that
// completes the plain BASP handshake could claim the decode's node id. The
// key, HMAC(token, "session" + both nonces), is derived on both sides and
// needs the token.
// Limit: without [tls] (config/README.md) the control plane is plain text: the token is safe, but
// an on-path attacker could still read or hijack an authenticated connection.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/node_id.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/scheduler_protocol.hpp"
#include "common/keyed_fifo.hpp"

namespace layerstream {

using gate_actor = caf::typed_actor<caf::replies_to<auth_hello>::with<auth_challenge>,
                                    caf::replies_to<auth_proof>::with<scheduler_actor>>;

constexpr size_t auth_nonce_bytes = 32;

/// Fresh random bytes (OpenSSL RAND_bytes).
std::vector<uint8_t> auth_nonce();

/// HMAC-SHA256(token, "layerstream-auth-v1 " + role + client_nonce + server_nonce).
std::vector<uint8_t> auth_mac(std::string_view token, std::string_view role,
                              const std::vector<uint8_t>& client_nonce,
                              const std::vector<uint8_t>& server_nonce);

/// Constant-time equality of two proofs (false when the sizes differ).
bool auth_equal(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b);

struct gate_config {
  std::string token;
  /// The rank's scheduler; sessions forward to it.
  scheduler_actor scheduler;
  /// How long a session waits for the scheduler's kv_ready
  /// (session_answer_wait, common/deadlines.hpp); past it, it answers
  /// writes_in_flight.
  caf::timespan session_timeout = std::chrono::seconds(120);
  /// How long a challenge stays good.
  caf::timespan challenge_ttl = std::chrono::seconds(10);
  size_t max_pending = 1024;
  /// Sessions kept at once (one per authenticated node; the oldest is closed).
  size_t max_sessions = 256;
  /// Sent in every challenge.
  rank_facts rank;
  /// For logs: "rank 0".
  std::string name;
};

struct gate_state {
  static inline const char* name = "layerstream.gate";
  struct pending {
    std::vector<uint8_t> client_nonce;
    caf::node_id node;
    caf::timestamp deadline;
  };
  /// A nonce's bytes, hashed (the gate makes every stored nonce: random).
  struct nonce_hash {
    size_t operator()(const std::vector<uint8_t>& nonce) const noexcept {
      return std::hash<std::string_view>{}(
          std::string_view{reinterpret_cast<const char*>(nonce.data()), nonce.size()});
    }
  };
  gate_config cfg;
  /// Challenges not answered yet, by server nonce, oldest first: a proof
  /// takes its own out, a hello drops the expired and surplus ones.
  keyed_fifo<std::vector<uint8_t>, pending, nonce_hash> challenges;
  /// Open sessions, by node, oldest first (the first closed when full).
  keyed_fifo<caf::node_id, scheduler_actor> sessions;
};

/// Sessions are linked to the gate: exiting the gate closes them. A session
/// monitors the decode actors that sent it the proof (auth_presence) or a
/// transfer_info and ends once the last of them is down (exited, or its
/// node's connection lost), or once the rank's scheduler is down (with
/// lserr::peer_lost); the gate then drops it from its table and goes on.
gate_actor::behavior_type gate_impl(gate_actor::stateful_pointer<gate_state> self, gate_config cfg);

/// The session's key: HMAC-SHA256(token, "layerstream-auth-v1 session" +
/// client_nonce + server_nonce).
std::vector<uint8_t> session_key_of(std::string_view token,
                                    const std::vector<uint8_t>& client_nonce,
                                    const std::vector<uint8_t>& server_nonce);

/// What decode gets from a handshake: the session, and the key every
/// transfer_info sent to it must carry (transfer_info::session_key).
struct auth_session {
  scheduler_actor session;
  std::vector<uint8_t> key;
  /// What the rank said of itself (check_rank_facts).
  rank_facts rank;
};

/// Whether the rank decode lists at `want.cp_rank` in decode.prefill, with
/// decode's own cp_size and timeouts in `want`, said the same of itself in
/// `got`; otherwise bad_input naming the difference. A rank listed out of
/// order would fail every room at its first answer, after its writes; one
/// whose timeouts differ can answer after decode gave up on it, which then
/// holds the room's pages until it restarts.
caf::error check_rank_facts(const rank_facts& got, const rank_facts& want);

/// Decode side: the actor that sends this process's proofs. Each session it
/// gets watches it, besides the receivers that send transfer_info: when it
/// is gone (the decode exited, its connection dropped, or stop()), the
/// session ends, also one that never carried a room (a decode that failed
/// between its handshake and its first room). stop() it before the actor
/// system waits for its actors; the destructor does.
class auth_presence {
 public:
  explicit auth_presence(caf::actor_system& sys);
  ~auth_presence() { stop(); }
  auth_presence(const auth_presence&) = delete;
  auth_presence& operator=(const auth_presence&) = delete;
  auth_presence(auth_presence&&) = delete;
  auth_presence& operator=(auth_presence&&) = delete;

  [[nodiscard]] const caf::actor& handle() const { return handle_; }
  void stop();

 private:
  caf::actor_system& sys_;
  caf::actor handle_;
};

/// Decode side: runs the handshake with `gate` (each step bounded by
/// `timeout`), the proof sent by `presence`, and returns the session to send
/// transfer_info to. Fails with lserr::unauthorized when the gate refuses us
/// or cannot prove the token itself (then nothing about this node's fabric
/// has been sent), or with the request's error (timeout, peer gone).
caf::expected<auth_session> authenticate(caf::actor_system& sys, const auth_presence& presence,
                                         const gate_actor& gate, const std::string& token,
                                         caf::timespan timeout);

} // namespace layerstream
