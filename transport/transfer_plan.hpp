// Transfer address math: which (src, dst, len) blocks one request writes for
// one layer. Equal, block for block and in order, to SGLang's Mooncake sender
// (`group_concurrent_contiguous` + `_send_kvcache_generic` +
// `filter_kv_indices_for_cp_rank`).
//
// The page lists of a request are the same for every layer, so the grouping
// into runs is done ONCE (make_transfer_plan) and each layer only rebases it
// (append_layer_blocks): the per-layer cost is proportional to the number of
// runs, not pages. All arithmetic is unsigned 64-bit and checked: a value
// that would pass 2^64 is an error, never a wrapped address.
#pragma once

#include <cstdint>
#include <vector>

#include "common/error.hpp"
#include "messages/bounded.hpp"

namespace layerstream {

/// True if [addr, addr + len) lies below 2^64 (the last byte is addressable).
inline bool range_fits(uint64_t addr, uint64_t len) {
  return len == 0 || len - 1 <= UINT64_MAX - addr;
}

/// True if [addr, addr + len) lies inside [base, base + length).
inline bool range_contains(uint64_t base, uint64_t length, uint64_t addr, uint64_t len) {
  return addr >= base && len <= length && addr - base <= length - len;
}

/// One RMA write: `len` bytes from prefill address `src` to decode address `dst`.
struct block {
  uint64_t src = 0;
  uint64_t dst = 0;
  uint64_t len = 0;
  friend bool operator==(const block& a, const block& b) {
    return a.src == b.src && a.dst == b.dst && a.len == b.len;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, block& x) {
  return inspect_fields(f, caf::meta::type_name("block"), x.src, x.dst, x.len);
}

/// A read-only view of consecutive blocks (C++17 has no std::span): one
/// room's part of a batch's flat block list, or a whole vector.
class block_span {
 public:
  block_span() = default;
  block_span(const block* first, size_t count) : first_(first), count_(count) {
    // nop
  }
  block_span(const std::vector<block>& blocks) // NOLINT: implicit, like std::span
      : first_(blocks.data()), count_(blocks.size()) {
    // nop
  }
  const block* begin() const { return first_; }
  const block* end() const { return first_ + count_; }
  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  const block& operator[](size_t i) const { return first_[i]; }
  std::vector<block> to_vector() const { return {begin(), end()}; }

 private:
  const block* first_ = nullptr;
  size_t count_ = 0;
};

/// A maximal run of positions where src and dst page indices both step by +1.
struct page_run {
  uint64_t src_page = 0;
  uint64_t dst_page = 0;
  uint64_t pages = 0;
  friend bool operator==(const page_run& a, const page_run& b) {
    return a.src_page == b.src_page && a.dst_page == b.dst_page && a.pages == b.pages;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, page_run& x) {
  return inspect_fields(f, caf::meta::type_name("page_run"), x.src_page, x.dst_page, x.pages);
}

/// Where this rank's page list sits in the request, and which slice it owns.
struct cp_slice {
  uint64_t cp_size = 1;
  uint64_t cp_rank = 0;
  /// Request position of the first page in the given lists (chunked prefill).
  uint64_t chunk_start = 0;
  /// Pages in the whole request; 0 means "the length of the given lists".
  uint64_t total_pages = 0;
};

/// Half-open range of request page positions [begin, end).
struct position_range {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t size() const { return end - begin; }
};

/// SGLang's all-CP-ranks split: rank r owns ONE contiguous slice,
/// start = r*base + min(r, rem), count = base + (r < rem), where
/// base, rem = divmod(total_pages, cp_size).
caf::expected<position_range> owned_positions(uint64_t total_pages, uint64_t cp_size,
                                              uint64_t cp_rank);

/// The pages one rank writes for one request (or one chunk of it), grouped
/// once into runs. Reused unchanged for every layer.
struct transfer_plan {
  std::vector<page_run> runs;
  /// Number of pages covered by `runs` (owned pages in this chunk).
  uint64_t pages = 0;
  bool empty() const { return runs.empty(); }
  friend bool operator==(const transfer_plan& a, const transfer_plan& b) {
    return a.runs == b.runs && a.pages == b.pages;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, transfer_plan& x) {
  return inspect_fields(f, caf::meta::type_name("transfer_plan"), x.runs, x.pages);
}

/// Cuts the page lists to the positions this rank owns inside this chunk
/// and groups them into runs (SGLang's group_concurrent_contiguous: a new run
/// starts wherever src or dst does not step by exactly +1; nothing sorted).
caf::expected<transfer_plan> make_transfer_plan(const std::vector<uint64_t>& src_pages,
                                                const std::vector<uint64_t>& dst_pages,
                                                const cp_slice& slice = {});

/// Per-layer base pointers and page sizes of both KV pools.
///
/// K/V layout: `src_k[L]`, `src_v[L]` (and dst) for layers 0..N-1;
/// `item_lens` lists one entry per registered buffer in pointer order,
/// [K_0..K_{N-1}, V_0..V_{N-1}] (2N entries), or N entries when K and V share
/// a size. MLA: one fused buffer per layer, `src_v`/`dst_v` empty. An item_len
/// is the bytes of ONE PAGE of one layer's buffer: address = base + page*item_len.
struct kv_pointers {
  std::vector<uint64_t> src_k;
  std::vector<uint64_t> dst_k;
  std::vector<uint64_t> src_v;
  std::vector<uint64_t> dst_v;
  std::vector<uint64_t> item_lens;

  uint64_t layers() const { return src_k.size(); }
  bool mla() const { return src_v.empty(); }
  uint64_t k_item_len(uint64_t layer) const { return item_lens[layer]; }
  uint64_t v_item_len(uint64_t layer) const {
    return item_lens.size() == 2 * layers() ? item_lens[layers() + layer] : item_lens[layer];
  }
  friend bool operator==(const kv_pointers& a, const kv_pointers& b) {
    return a.src_k == b.src_k && a.dst_k == b.dst_k && a.src_v == b.src_v && a.dst_v == b.dst_v &&
           a.item_lens == b.item_lens;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_pointers& x) {
  return inspect_fields(f, caf::meta::type_name("kv_pointers"), x.src_k, x.dst_k, x.src_v, x.dst_v,
                        x.item_lens);
}

/// Checks list lengths and item_lens (no layers, mismatched pointer lists,
/// item_lens of a length other than N or 2N, or other than N for MLA, an
/// item_len of 0).
caf::error validate(const kv_pointers& ptrs);

/// Appends layer `layer`'s blocks: all K runs in page order, then all V runs
/// (none for MLA). On error nothing is appended. `ptrs` must have passed
/// validate(); the layer index and every address are checked here.
caf::error append_layer_blocks(const transfer_plan& plan, const kv_pointers& ptrs, uint64_t layer,
                               std::vector<block>& out);

/// Convenience: validate + append into a fresh vector.
caf::expected<std::vector<block>> build_layer_blocks(const transfer_plan& plan,
                                                     const kv_pointers& ptrs, uint64_t layer);

/// Total bytes of one layer for this plan (K + V), checked.
caf::expected<uint64_t> layer_bytes(const transfer_plan& plan, const kv_pointers& ptrs,
                                    uint64_t layer);

} // namespace layerstream
