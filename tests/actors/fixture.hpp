// Shared set-up of the actor suites: CAF's deterministic test coordinator,
// a scripted transport, and request builders.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include <caf/all.hpp>

#define FAIL(msg) CAF_FAIL(msg)
#include <caf/test/dsl.hpp>

#include "actors/context.hpp"
#include "actors/manager.hpp"
#include "device/host_event.hpp"
#include "messages/messages.hpp"

namespace layerstream::testing {

using release_atom = caf::atom_constant<caf::atom("release")>;

/// What the scripted transport does and what it saw. Lives on the test
/// thread; the test coordinator runs every actor there too.
struct transport_script {
  /// Every submit received, in order; a submit_batch is listed as one
  /// submit per room, in its order.
  std::vector<submit> received;
  /// How many submit_batch messages came, and their sizes.
  std::vector<size_t> batch_sizes;
  /// (room, layer) pairs answered with a failure.
  std::set<std::pair<room_id, uint32_t>> fail;
  /// Keep every answer until the test sends {release_atom, room, layer}.
  bool hold = false;
  /// Successful answers say they were delivered at 1000 * (layer + 1) + room
  /// ns (else 0, as a transport that does not say).
  bool stamp_delivery = false;
  std::map<std::pair<room_id, uint32_t>, std::pair<caf::response_promise, submit_done>> held;
  /// Held batches, by (first room, layer).
  std::map<std::pair<room_id, uint32_t>, std::pair<caf::response_promise, submit_batch_done>>
      held_batches;
};

inline uint64_t bytes_of(const std::vector<block>& blocks) {
  uint64_t n = 0;
  for (auto& b : blocks)
    n += b.len;
  return n;
}

/// The scripted answer for one room's part.
inline submit_done scripted_answer(transport_script& script, const submit& msg) {
  submit_done done{msg.room, msg.layer, {}, bytes_of(msg.blocks)};
  if (script.stamp_delivery)
    done.delivered_ns = 1000 * (int64_t{msg.layer} + 1) + static_cast<int64_t>(msg.room);
  if (script.fail.count(std::make_pair(msg.room, msg.layer)) > 0) {
    done.status = make_error(lserr::transfer_failed, "scripted failure");
    done.bytes = 0;
    done.delivered_ns = 0;
  }
  return done;
}

/// Answers each submit as the script says: success with the blocks' bytes,
/// a failure, or held until released. A submit_batch is answered room by
/// room the same way (held whole, under its first room).
inline caf::behavior scripted_transport(caf::event_based_actor* self,
                                        std::shared_ptr<transport_script> script) {
  return {
      [=](submit& msg) -> caf::result<submit_done> {
        script->received.push_back(msg);
        auto key = std::make_pair(msg.room, msg.layer);
        auto done = scripted_answer(*script, msg);
        if (!script->hold)
          return done;
        auto rp = self->make_response_promise();
        script->held.emplace(key, std::make_pair(rp, done));
        return rp;
      },
      [=](submit_batch& msg) -> caf::result<submit_batch_done> {
        script->batch_sizes.push_back(msg.rooms.size());
        submit_batch_done done{msg.layer, {}};
        if (auto bad = check_block_counts(msg))
          CAF_FAIL("a malformed submit_batch: " << describe(bad));
        for_each_room(msg, [&](size_t, room_id room, block_span blocks) {
          script->received.push_back(submit{room, msg.layer, msg.peer, blocks.to_vector()});
          done.rooms.push_back(scripted_answer(*script, script->received.back()));
        });
        if (!script->hold || msg.rooms.empty())
          return done;
        auto rp = self->make_response_promise();
        script->held_batches.emplace(std::make_pair(msg.rooms.front().room, msg.layer),
                                     std::make_pair(rp, done));
        return rp;
      },
      [=](release_atom, room_id room, uint32_t layer) {
        if (auto i = script->held.find({room, layer}); i != script->held.end()) {
          i->second.first.deliver(i->second.second);
          script->held.erase(i);
        }
        if (auto i = script->held_batches.find({room, layer}); i != script->held_batches.end()) {
          i->second.first.deliver(i->second.second);
          script->held_batches.erase(i);
        }
      },
  };
}

struct test_config : caf::actor_system_config {
  test_config() { layerstream::add_message_types(*this); }
};

/// `pages` src pages starting at `src0`, dst pages at `dst0`, `layers`
/// K/V layers of 64-byte pages (V pages 32 bytes).
inline request_transfer make_request(room_id room, uint64_t pages, uint32_t layers,
                                     uint64_t src0 = 10, uint64_t dst0 = 100) {
  std::vector<uint64_t> src(pages), dst(pages);
  for (uint64_t i = 0; i < pages; ++i) {
    src[i] = src0 + i;
    dst[i] = dst0 + i;
  }
  request_transfer req;
  req.room = room;
  req.plan = *make_transfer_plan(src, dst);
  for (uint32_t l = 0; l < layers; ++l) {
    req.ptrs.src_k.push_back(0x100000 * (l + 1));
    req.ptrs.src_v.push_back(0x100000 * (l + 1) + 0x80000);
    req.ptrs.dst_k.push_back(0x10000000 + 0x100000 * (l + 1));
    req.ptrs.dst_v.push_back(0x10000000 + 0x100000 * (l + 1) + 0x80000);
  }
  req.ptrs.item_lens.assign(layers, 64);
  req.ptrs.item_lens.resize(2 * layers, 32);
  return req;
}

/// The submit a context must send for `layer` of `req`.
inline submit expected_submit(const request_transfer& req, uint32_t layer) {
  return submit{req.room, layer, req.peer, *build_layer_blocks(req.plan, req.ptrs, layer)};
}

inline uint64_t expected_bytes(const request_transfer& req, uint32_t layer) {
  return *layer_bytes(req.plan, req.ptrs, layer);
}

struct actor_fixture : test_coordinator_fixture<test_config> {
  std::shared_ptr<transport_script> script = std::make_shared<transport_script>();
  caf::actor transport_handle;
  submit_sink transport;
  scripted_event_source events;

  actor_fixture() {
    transport_handle = sys.spawn(scripted_transport, script);
    transport = caf::actor_cast<submit_sink>(transport_handle);
    run();
  }

  ~actor_fixture() override {
    // A held promise references the transport actor itself; drop it so the
    // actor can end and the system can shut down.
    script->held.clear();
    script->held_batches.clear();
  }

  void release(room_id room, uint32_t layer) {
    caf::anon_send(transport_handle, release_atom::value, room, layer);
  }
};

} // namespace layerstream::testing
