// The libfabric transport actor: implements `transport_actor`
// (transport/transport_protocol.hpp):
//   connect_peer{peer}                  -> peer_id
//   submit{room, layer, peer, blocks}   -> submit_done{room, layer, status, bytes,
//                                                      delivered_ns}
//   submit_batch{layer, peer, rooms}    -> submit_batch_done{layer, one submit_done per room}
//                                          (one engine job per room)
//
// Ownership: the actor owns one fabric::engine (which owns the endpoint, its
// fids and registrations, and the worker thread). Its state's destructor
// stops the engine (its jobs fail: cancelled, or writes_in_flight if writes
// were posted; the thread is joined, the fids close in order) and then
// answers every submit still pending with lserr::cancelled: CAF 0.17 has no
// broken-promise error, so a promise left undelivered would leave its
// requester waiting for its own timeout.
//
// Lifecycle: spawn_transport() opens the endpoint, registers the local
// memory, starts the worker and spawns the actor. The actor runs until its
// owner sends it an exit (link it to its owner or anon_send_exit it): the
// actor system waits for it on shutdown.
//
// Threading: all actor state is touched only by the actor. The worker thread
// queues each finished job in a mutex-guarded list and rings the actor with
// one message (jobs_ready) per burst, not per job; nothing else crosses
// threads. Every job has a deadline in the worker
// (write_timeout), so every submit is answered.
//
// Semantics: submit_done is ok only when every block of the submit is
// delivery-complete at the target (FI_DELIVERY_COMPLETE per write). A dst
// range outside the peer's advertised regions, a src range outside the
// registered local memory or an unknown peer fail the submit at once with
// nothing posted. After any write error or timeout the peer is marked failed
// and later submits to it are refused (lserr::peer_lost).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>

#include "common/error.hpp"
#include "common/memory_span.hpp"
#include "common/net_guard.hpp"
#include "messages/messages.hpp"
#include "transport/fabric/engine.hpp"
#include "transport/transport_protocol.hpp"

namespace layerstream {

struct transport_config {
  /// Provider ("" = fastest offered, logged), bind address, write size and
  /// in-flight caps.
  fabric::fabric_config fabric;
  /// Local memory every src range must lie in (the prefill KV pool buffers);
  /// registered with FI_WRITE at spawn.
  std::vector<memory_span> regions;
  /// Bound on one submit, from its arrival to its last completion.
  std::chrono::milliseconds write_timeout{10'000};
  /// TESTING ONLY (tests, `bench soak`): turns chosen write completions into
  /// CQ error completions; null in every real deployment.
  std::shared_ptr<fabric::fault_injector> faults;
  /// Where this process may write (common/net_guard.hpp): every peer's
  /// fabric address is checked at connect_peer, before any write.
  network_scope scope = network_scope::test;
};

/// Opens the endpoint, registers `cfg.regions`, starts the worker and spawns
/// the transport actor. Fails (nothing left open) if any step fails.
caf::expected<transport_actor> spawn_transport(caf::actor_system& sys, transport_config cfg);

/// The decode side of a transport: an endpoint whose registered memory
/// remote writers target, kept progressing by a target-mode worker (without
/// progress, tcp/net senders stall after ~4 MiB). Not an actor: the receiver
/// owns one and advertises `peer()` in its transfer_info.
class fabric_target {
 public:
  struct config {
    fabric::fabric_config fabric;
    /// Memory remote writers may write (registered with FI_REMOTE_WRITE).
    std::vector<memory_span> regions;
  };

  static caf::expected<std::unique_ptr<fabric_target>> open(const config& cfg);

  /// What a writer needs: provider, address and the advertised regions
  /// (base = virtual address of each region, key from fi_mr_key).
  const fabric_peer& peer() const { return peer_; }

  /// Stops the progress worker and closes the endpoint.
  void close() { engine_.reset(); }

  /// TESTING ONLY: stops the progress worker but keeps the endpoint open, as
  /// a stalled (not dead) decode process would: writes to it stop completing.
  void stall_for_test() {
    if (engine_)
      engine_->stop();
  }

 private:
  fabric_target() = default;
  std::unique_ptr<fabric::engine> engine_;
  fabric_peer peer_;
};

} // namespace layerstream
