// libFuzzer target: CAF decoding of our registered message types from a
// peer's bytes, then the checks the product applies on receipt.
//
// The first byte picks a registered type (any of them can arrive over caf-io:
// CAF decodes a message before the receiving actor can refuse it); the rest
// is fed to caf::binary_deserializer, as BASP does. Never a crash, never an
// allocation beyond what the input can hold (run with -malloc_limit_mb): a
// hostile sequence length must be a decoding error (messages/bounded.hpp).
// A value that decodes must encode again and decode back equal, and then
// passes through the receipt checks: transfer_info against a prefill rank's
// model (check_transfer_info), its fabric address (net guard), and, once
// accepted, the page plan and per-layer pointers; a kv_ready's status
// rendered as the receiver logs it. (The gate's checks of the auth messages
// are sizes and map lookups on the decoded vectors: decoding is what is at
// stake there.)
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "actors/scheduler_protocol.hpp"
#include "common/net_guard.hpp"
#include "messages/messages.hpp"

namespace {

using namespace layerstream;

struct fuzz_config : caf::actor_system_config {
  fuzz_config() {
    layerstream::add_message_types(*this); // qualified: the base has a member of that name
    set("logger.verbosity", caf::atom("quiet"));
    set("logger.console", caf::atom("none"));
    set("scheduler.max-threads", 1);
  }
};

// Never destroyed: libFuzzer ends with exit(), and CAF 0.17's actor_system
// torn down from a static destructor crashes (its globals are gone by then).
caf::actor_system& fuzz_system() {
  static auto* cfg = new fuzz_config;
  static auto* sys = new caf::actor_system{*cfg};
  return *sys;
}

// The receipt checks of each type; most types have none beyond decoding.
template <class T>
void check(const T&) {}

void check(const transfer_info& info) {
  // A prefill rank with 16-token pages, 2 K/V layers of 4096-byte pages, CP 1.
  transfer_info_shape shape{16, 1, 2, false, 4096, {4096, 4096, 4096, 4096}};
  (void)check_fabric_address(info.decode.address, network_scope::deployment);
  if (check_transfer_info(info, shape))
    return;
  std::vector<uint64_t> src(info.dst_pages.size());
  std::iota(src.begin(), src.end(), uint64_t{0});
  auto plan = make_transfer_plan(src, info.dst_pages, {info.cp_size, 0, 0, src.size()});
  if (!plan)
    return;
  kv_pointers ptrs{
      {1 << 20, 2 << 20}, info.dst_k_ptrs, {3 << 20, 4 << 20}, info.dst_v_ptrs, info.item_lens};
  if (validate(ptrs))
    return;
  for (uint64_t layer = 0; layer < shape.layers; ++layer)
    (void)build_layer_blocks(*plan, ptrs, layer);
}

void check(const kv_ready& ready) {
  (void)describe(ready.status);
}

template <class T>
void one(const uint8_t* data, size_t size) {
  auto& sys = fuzz_system();
  T x;
  caf::binary_deserializer source{sys, reinterpret_cast<const char*>(data), size};
  if (source(x))
    return; // refused: fine, as long as it is not a crash or a huge allocation
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  if (sink(x))
    __builtin_trap(); // a decoded value must encode again
  T y;
  caf::binary_deserializer again{sys, buf};
  if (again(y) || !(x == y))
    __builtin_trap(); // ... and decode back equal
  check(x);
}

template <class... Ts>
struct type_list {};

template <class... Ts>
void dispatch(type_list<Ts...>, uint8_t selector, const uint8_t* data, size_t size) {
  using fn = void (*)(const uint8_t*, size_t);
  static constexpr fn table[] = {&one<Ts>...};
  table[selector % sizeof...(Ts)](data, size);
}

// Every type add_message_types registers (messages/messages.cpp) but the
// scheduler_actor handle (decoding a remote handle needs caf-io's proxies).
using wire_types =
    type_list<transfer_info, kv_ready, auth_hello, auth_challenge, auth_proof, remote_region,
              fabric_peer, connect_peer, block, std::vector<block>, page_run, transfer_plan,
              kv_pointers, request_transfer, setup, room_refusal, setup_result, layer_end,
              event_ready, submit, submit_done, room_blocks, submit_batch, submit_batch_done,
              finish, finish_result, finish_deadline, batch_done, stats_query, hold_forward,
              scheduler_stats, open_room, room_result, close_room, room_deadline, room_status_query,
              room_status>;

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0)
    return 0;
  dispatch(wire_types{}, data[0], data + 1, size - 1);
  return 0;
}
