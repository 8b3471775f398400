// libFuzzer target: what a peer's transfer_info feeds into the block math
// (page lists, CP slice, per-layer pointers and item lengths), decoded from
// arbitrary bytes. Never a crash: either a clear error, or blocks whose
// total is exactly the layer's bytes (layer_bytes checks no addresses, so it
// may succeed where the blocks are refused).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "transport/transfer_plan.hpp"

namespace {

struct reader {
  const uint8_t* p;
  size_t n;
  uint64_t u64() {
    uint64_t v = 0;
    size_t k = n < 8 ? n : 8;
    std::memcpy(&v, p, k);
    p += k;
    n -= k;
    return v;
  }
  uint8_t u8() {
    if (n == 0)
      return 0;
    --n;
    return *p++;
  }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace layerstream;
  reader in{data, size};
  const size_t pages = in.u8() % 65, dst_extra = in.u8() % 3, layers = in.u8() % 5;
  std::vector<uint64_t> src, dst;
  for (size_t i = 0; i < pages; ++i)
    src.push_back(in.u8() & 1 ? in.u64() : in.u8());
  for (size_t i = 0; i < pages + dst_extra; ++i) // dst may be longer: mismatched lengths
    dst.push_back(in.u8() & 1 ? in.u64() : in.u8());
  cp_slice cp;
  cp.cp_size = in.u8() % 5u;
  cp.cp_rank = in.u8() % 6u;
  cp.chunk_start = in.u8();
  cp.total_pages = in.u8() & 1 ? in.u64() : in.u8();
  auto plan = make_transfer_plan(src, dst, cp);
  if (!plan)
    return 0;
  kv_pointers ptrs;
  const bool mla = in.u8() & 1;
  for (size_t l = 0; l < layers; ++l) {
    ptrs.src_k.push_back(in.u64());
    ptrs.dst_k.push_back(in.u64());
    if (!mla) {
      ptrs.src_v.push_back(in.u64());
      ptrs.dst_v.push_back(in.u64());
    }
  }
  const size_t lens = in.u8() % (2 * layers + 2);
  for (size_t i = 0; i < lens; ++i)
    ptrs.item_lens.push_back(in.u8() & 1 ? in.u64() : in.u8());
  if (validate(ptrs))
    return 0;
  for (uint64_t l = 0; l <= layers; ++l) { // one past the end: a bad layer index
    auto blocks = build_layer_blocks(*plan, ptrs, l);
    auto bytes = layer_bytes(*plan, ptrs, l);
    if (!blocks)
      continue; // refused (layer, address or overflow): fine, as long as it is not a crash
    // K and V each fit, their sum may not: layer_bytes refuses it as overflow.
    if (!bytes)
      continue;

    uint64_t total = 0;
    for (auto& b : *blocks)
      total += b.len;
    if (total != *bytes)
      __builtin_trap();
  }
  return 0;
}
