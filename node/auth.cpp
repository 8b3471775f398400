#include "node/auth.hpp"

#include <optional>
#include <set>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include "common/log.hpp"

namespace layerstream {

namespace {

constexpr std::string_view auth_label = "layerstream-auth-v1 ";
constexpr std::string_view server_role = "prefill";
constexpr std::string_view client_role = "decode";
constexpr std::string_view session_role = "session";

/// True if the exit `self` is handling was sent by another actor of this
/// process (a linked actor that ended, or run_prefill's stop). An exit sent
/// anonymously (CAF then names the receiver itself as its source) or from
/// another node is what any peer that reaches the published port can send
/// before it authenticates: logged and ignored. (exit_reason::kill cannot be
/// refused: CAF applies it before any handler; README "Hostile bytes on the
/// control plane".)
bool from_this_process(caf::local_actor* self, const caf::exit_msg& em, const std::string& what,
                       const std::string& name) {
  const auto& sender = self->current_sender();
  if (sender && sender->node() == self->node() && sender != self->ctrl())
    return true;
  LS_WARN("control plane {}: ignored an exit for the {} from {} ({})", name, what,
          sender ? "node " + to_string(sender->node()) : std::string{"no actor"},
          em.reason ? describe(em.reason) : std::string{"normal"});
  return false;
}

struct session_state {
  static inline const char* name = "layerstream.session";
  std::set<caf::actor_addr> senders;
};

/// Forwards transfer_info from the one node that authenticated, carrying
/// the session's key. It watches the decode actors that sent the proof (the
/// decode's auth_presence) or a transfer_info (the receiver): when the last
/// of them is gone (it exited, or its node's connection dropped), the
/// session ends, and the gate drops it. It also watches the scheduler and
/// ends when that is down.
scheduler_actor::behavior_type session_impl(scheduler_actor::stateful_pointer<session_state> self,
                                            const scheduler_actor& scheduler,
                                            const caf::strong_actor_ptr& presence,
                                            const caf::node_id& peer,
                                            const std::vector<uint8_t>& key, caf::timespan timeout,
                                            const std::string& gate_name) {
  // The scheduler gone while the process lives on (an actor that failed)
  // ends the session too: decode then sees this rank down and opens no room
  // on it, instead of sending it rooms that can only fail and hold pages.
  self->monitor(scheduler);
  // The decode gone before its first room ends the session too: nothing
  // else would, and a stale session would take a live one's place in the
  // gate's table (the oldest is closed when it is full).
  self->state.senders.insert(caf::actor_cast<caf::actor_addr>(presence));
  self->monitor(presence);
  // Closed only by its gate (or a link from this process): see from_this_process.
  self->set_exit_handler([=](caf::exit_msg& em) {
    if (from_this_process(self, em, "session of node " + to_string(peer), gate_name) && em.reason)
      self->quit(std::move(em.reason));
  });
  self->set_down_handler([=](caf::down_msg& dm) {
    if (dm.source == scheduler.address()) {
      auto why = dm.reason ? describe(dm.reason) : std::string{"exited"};
      LS_ERROR("control plane {}: session of node {} closed: the prefill scheduler is down ({})",
               gate_name, to_string(peer), why);
      self->quit(make_error(lserr::peer_lost, "prefill scheduler is down: " + why));
      return;
    }
    self->state.senders.erase(dm.source);
    if (!self->state.senders.empty())
      return;
    LS_INFO("control plane {}: session of node {} closed: its decode is gone ({})", gate_name,
            to_string(peer), dm.reason ? describe(dm.reason) : std::string{"exited"});
    self->quit();
  });
  return {
      [=](transfer_info& info) -> caf::result<kv_ready> {
        auto sender = self->current_sender();
        if (!sender || sender->node() != peer) {
          auto from = sender ? to_string(sender->node()) : std::string{"an anonymous sender"};
          LS_WARN("control plane {}: refused transfer_info for room {} from {}: this session "
                  "belongs to node {}",
                  gate_name, info.room, from, to_string(peer));
          return make_error(lserr::unauthorized, "session belongs to another node");
        }
        // The sender's node can be claimed by anyone who speaks BASP (a
        // routed message names its own source); the key needs the token.
        if (!auth_equal(info.session_key, key)) {
          LS_WARN("control plane {}: refused transfer_info for room {} from node {}: {} session "
                  "key",
                  gate_name, info.room, to_string(peer),
                  info.session_key.empty() ? "no" : "a wrong");
          return make_error(lserr::unauthorized, "transfer_info without this session's key");
        }
        info.session_key.clear(); // the scheduler has no use for it
        if (self->state.senders.insert(caf::actor_cast<caf::actor_addr>(sender)).second)
          self->monitor(sender);
        auto rp = self->make_response_promise<kv_ready>();
        auto room = info.room;
        self->request(scheduler, timeout, std::move(info))
            .then([rp](kv_ready& res) mutable { rp.deliver(std::move(res)); },
                  [rp, room](caf::error& err) mutable {
                    // Bounced: the scheduler was gone before it took the
                    // request, so no write of this room can come; decode
                    // takes this error as that proof (actors/receiver.cpp).
                    if (err == caf::sec::request_receiver_down) {
                      rp.deliver(std::move(err));
                      return;
                    }
                    // The scheduler may still be writing the room: decode
                    // must keep its pages (actors/receiver.hpp).
                    rp.deliver(make_error(lserr::writes_in_flight,
                                          "prefill scheduler did not answer room " +
                                              std::to_string(room) + ": " + describe(err)));
                  });
        return rp;
      },
  };
}

} // namespace

std::vector<uint8_t> auth_nonce() {
  std::vector<uint8_t> out(auth_nonce_bytes);
  if (RAND_bytes(out.data(), static_cast<int>(out.size())) != 1)
    throw std::runtime_error("RAND_bytes failed: no randomness for the control-plane nonce");
  return out;
}

std::vector<uint8_t> auth_mac(std::string_view token, std::string_view role,
                              const std::vector<uint8_t>& client_nonce,
                              const std::vector<uint8_t>& server_nonce) {
  std::vector<uint8_t> msg;
  msg.reserve(auth_label.size() + role.size() + client_nonce.size() + server_nonce.size());
  msg.insert(msg.end(), auth_label.begin(), auth_label.end());
  msg.insert(msg.end(), role.begin(), role.end());
  msg.insert(msg.end(), client_nonce.begin(), client_nonce.end());
  msg.insert(msg.end(), server_nonce.begin(), server_nonce.end());
  std::vector<uint8_t> out(EVP_MAX_MD_SIZE);
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()), msg.data(), msg.size(),
           out.data(), &len) == nullptr)
    throw std::runtime_error("HMAC-SHA256 failed");
  out.resize(len);
  return out;
}

std::vector<uint8_t> session_key_of(std::string_view token,
                                    const std::vector<uint8_t>& client_nonce,
                                    const std::vector<uint8_t>& server_nonce) {
  return auth_mac(token, session_role, client_nonce, server_nonce);
}

bool auth_equal(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  return a.size() == b.size() && !a.empty() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

gate_actor::behavior_type gate_impl(gate_actor::stateful_pointer<gate_state> self,
                                    gate_config cfg) {
  self->state.cfg = std::move(cfg);
  // A session that ended on its own (its decode went away) leaves the table;
  // the gate goes on. (One the gate closes is unlinked by CAF as it takes the
  // gate's exit_msg, so no exit comes back from it.) Any other exit from an
  // actor of this process with a reason ends the gate (run_prefill's stop),
  // as CAF's default handler would; one from elsewhere is ignored.
  self->set_exit_handler([=](caf::exit_msg& em) {
    auto& st = self->state;
    if (!from_this_process(self, em, "gate", st.cfg.name))
      return;
    std::optional<caf::node_id> ended; // linear, but at most max_sessions
    st.sessions.for_each([&](const caf::node_id& node, const scheduler_actor& session) {
      if (session.address() == em.source)
        ended = node;
    });
    if (ended) {
      st.sessions.take(*ended);
      LS_INFO("control plane {}: dropped the ended session of node {}; {} open", st.cfg.name,
              to_string(*ended), st.sessions.size());
      return;
    }
    if (em.reason)
      self->quit(std::move(em.reason));
  });
  // A peer that skips the handshake (e.g. sends transfer_info straight away).
  self->set_default_handler([=](caf::scheduled_actor* ptr,
                                caf::message_view&) -> caf::result<caf::message> {
    auto sender = ptr->current_sender();
    LS_WARN("control plane {}: refused peer {}: message before authentication (no token proof)",
            self->state.cfg.name, sender ? to_string(sender->node()) : std::string{"<anonymous>"});
    return make_error(lserr::unauthorized, "authenticate first (auth_hello, auth_proof)");
  });
  auto refuse = [=](const caf::node_id& node, const std::string& why) -> caf::error {
    LS_WARN("control plane {}: refused peer {}: {}", self->state.cfg.name, to_string(node), why);
    return make_error(lserr::unauthorized,
                      "refused by prefill " + self->state.cfg.name + ": " + why);
  };
  auto sender_node = [=] {
    auto sender = self->current_sender();
    return sender ? sender->node() : caf::node_id{};
  };
  return {
      [=](auth_hello& hello) -> caf::result<auth_challenge> {
        auto node = sender_node();
        if (hello.client_nonce.size() != auth_nonce_bytes)
          return refuse(node, "hello with a " + std::to_string(hello.client_nonce.size()) +
                                  "-byte nonce, expected " + std::to_string(auth_nonce_bytes));
        auto& st = self->state;
        // Expired or surplus challenges go first (bounded memory against a
        // flood): at most max_pending stay, this one included.
        auto now = caf::make_timestamp();
        while (!st.challenges.empty() && (st.challenges.front().deadline <= now ||
                                          st.challenges.size() >= st.cfg.max_pending))
          st.challenges.pop_front();
        auto server_nonce = auth_nonce();
        auth_challenge ch{server_nonce,
                          auth_mac(st.cfg.token, server_role, hello.client_nonce, server_nonce),
                          st.cfg.rank};
        // A fresh 32-byte random nonce is never in already.
        [[maybe_unused]] bool kept = st.challenges.push_back(
            server_nonce,
            gate_state::pending{std::move(hello.client_nonce), node, now + st.cfg.challenge_ttl});
        return ch;
      },
      [=](auth_proof& proof) -> caf::result<scheduler_actor> {
        auto node = sender_node();
        auto& st = self->state;
        // One proof per challenge, right or wrong.
        auto taken = st.challenges.take(proof.server_nonce);
        if (!taken)
          return refuse(node, "proof for an unknown, expired or already used challenge");
        auto pending = std::move(*taken);
        if (pending.node != node)
          return refuse(node, "proof from another node than the hello's");
        if (pending.deadline <= caf::make_timestamp())
          return refuse(node, "challenge expired");
        if (proof.client_proof.empty())
          return refuse(node, "missing token proof");
        auto expected =
            auth_mac(st.cfg.token, client_role, pending.client_nonce, proof.server_nonce);
        if (!auth_equal(proof.client_proof, expected))
          return refuse(node, "wrong token (the proof does not match the cluster token)");
        // The session watches the proof's sender (auth_presence).
        auto presence = self->current_sender();
        if (!presence)
          return refuse(node, "proof from no actor");
        // A new handshake from the same node gets a new session with the
        // new key; the old one closes.
        if (auto old = st.sessions.take(node))
          self->send_exit(*old, caf::exit_reason::user_shutdown);
        while (!st.sessions.empty() && st.sessions.size() >= st.cfg.max_sessions) {
          LS_WARN("control plane {}: {} sessions open, the most allowed: closing the oldest, of "
                  "node {}",
                  st.cfg.name, st.sessions.size(), to_string(st.sessions.front_key()));
          self->send_exit(st.sessions.pop_front(), caf::exit_reason::user_shutdown);
        }
        auto session = self->spawn<caf::linked>(
            session_impl, st.cfg.scheduler, presence, node,
            session_key_of(st.cfg.token, pending.client_nonce, proof.server_nonce),
            st.cfg.session_timeout, st.cfg.name);
        [[maybe_unused]] bool kept = st.sessions.push_back(node, session); // node's taken out above
        LS_INFO("control plane {}: peer {} authenticated", st.cfg.name, to_string(node));
        return session;
      },
  };
}

namespace {

/// auth_presence's actor: sends each proof it is given, so that the gate
/// sees it as the proof's sender, and hands the answer back. Every gate
/// learns its address, even one that did not prove the token: it takes
/// requests and exits from this process only (but exit_reason::kill, which
/// CAF applies before any handler), and drops anything else.
caf::behavior presence_impl(caf::event_based_actor* self, int /*unused*/) {
  self->set_default_handler(caf::drop);
  self->set_exit_handler([self](caf::exit_msg& em) {
    if (from_this_process(self, em, "decode's auth presence", "decode") && em.reason)
      self->quit(std::move(em.reason));
  });
  return {
      [self](auth_proof& proof, gate_actor& gate,
             caf::timespan timeout) -> caf::result<scheduler_actor> {
        const auto& sender = self->current_sender();
        if (!sender || sender->node() != self->node())
          return make_error(lserr::unauthorized, "auth presence: a request from another node");
        auto rp = self->make_response_promise<scheduler_actor>();
        self->request(gate, timeout, std::move(proof))
            .then([rp](scheduler_actor& session) mutable { rp.deliver(std::move(session)); },
                  [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
        return rp;
      },
  };
}

} // namespace

// (It takes an argument: CAF 0.17 spawns a function without arguments
// through a null pointer, which UBSan reports.)
auth_presence::auth_presence(caf::actor_system& sys)
    : sys_(sys), handle_(sys.spawn(presence_impl, 0)) {}

void auth_presence::stop() {
  if (!handle_)
    return;
  // From an actor of this process: the presence ignores anonymous exits.
  caf::scoped_actor stopper{sys_};
  stopper->send_exit(handle_, caf::exit_reason::user_shutdown);
  handle_ = nullptr;
}

caf::expected<auth_session> authenticate(caf::actor_system& sys, const auth_presence& presence,
                                         const gate_actor& gate, const std::string& token,
                                         caf::timespan timeout) {
  if (!presence.handle())
    return make_error(lserr::cancelled, "authenticate: the decode's auth_presence is stopped");
  caf::scoped_actor self{sys};
  auto client_nonce = auth_nonce();
  caf::error err;
  auth_challenge ch;
  self->request(gate, timeout, auth_hello{client_nonce})
      .receive([&](auth_challenge& c) { ch = std::move(c); }, [&](caf::error& e) { err = e; });
  if (err)
    return err;
  // Our proof goes out even when the gate's did not verify, so that the
  // prefill logs the refusal too; it reveals nothing about the token, and we
  // send no fabric address or key to an unproven gate.
  const bool gate_proven =
      ch.server_nonce.size() == auth_nonce_bytes &&
      auth_equal(ch.server_proof, auth_mac(token, server_role, client_nonce, ch.server_nonce));
  scheduler_actor session;
  // The presence's own request to the gate ends within `timeout`; this one
  // waits a little longer, so that its error is the one we see.
  self->request(
          presence.handle(), timeout + std::chrono::seconds(1),
          auth_proof{ch.server_nonce, auth_mac(token, client_role, client_nonce, ch.server_nonce)},
          gate, timeout)
      .receive([&](scheduler_actor& s) { session = std::move(s); },
               [&](caf::error& e) { err = e; });
  if (!gate_proven)
    return make_error(lserr::unauthorized,
                      "the prefill did not prove the cluster token (wrong token on one side?): "
                      "no fabric address or key sent" +
                          (err ? ", and it refused us: " + message_of(err) : std::string{}));
  if (err)
    return err;
  if (!session)
    return make_error(lserr::unauthorized, "the prefill answered with no session");
  return auth_session{std::move(session), session_key_of(token, client_nonce, ch.server_nonce),
                      ch.rank};
}

caf::error check_rank_facts(const rank_facts& got, const rank_facts& want) {
  if (got.cp_size != want.cp_size || got.cp_rank != want.cp_rank)
    return make_error(lserr::bad_input,
                      "it is cp_rank " + std::to_string(got.cp_rank) + " of cp_size " +
                          std::to_string(got.cp_size) + ", decode.prefill lists it as rank " +
                          std::to_string(want.cp_rank) + " of " + std::to_string(want.cp_size) +
                          " (list the ranks in cp_rank order, with cluster.cp_size alike)");
  if (got.room_ms != want.room_ms || got.submit_ms != want.submit_ms)
    return make_error(lserr::bad_input,
                      "its timeouts.room_ms / submit_ms are " + std::to_string(got.room_ms) +
                          " / " + std::to_string(got.submit_ms) + ", this decode's " +
                          std::to_string(want.room_ms) + " / " + std::to_string(want.submit_ms) +
                          " (every node of a cluster needs the same [timeouts])");
  return caf::none;
}

} // namespace layerstream
