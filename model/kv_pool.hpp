// A host KV pool and the simulated model's KV bytes.
//
// Layout (one allocation, so one fabric registration covers it):
//   [K_0][K_1]..[K_{N-1}][V_0]..[V_{N-1}]   (MLA: [KV_0]..[KV_{N-1}])
// each buffer `pages * item_len` bytes; page p of layer L's K buffer starts at
// k_ptr(L) + p * item_len. This is SGLang's per-layer buffer layout, so the
// pointer lists and item_lens are exactly what transfer_info carries.
//
// The KV bytes of a request are a pure function of (room, layer, K/V, token,
// byte offset in the token's row): kv_pattern. Any byte in any pool can be
// checked against it, and prefill and decode compute it independently.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "config/config.hpp"

namespace layerstream {

/// The expected KV bytes. A row is one token of one layer of one buffer
/// (kv_heads * head_dim * dtype_bytes bytes); bytes come from a splitmix64
/// stream seeded by (room, layer, buffer, token), so each row is
/// distinct and recomputable.
struct kv_pattern {
  /// Fills `row` (`len` bytes) with the bytes of one token row.
  static void fill_row(uint64_t room, uint32_t layer, uint32_t buffer, uint64_t token, uint8_t* row,
                       uint64_t len);
  /// True if `row` holds exactly those bytes.
  static bool check_row(uint64_t room, uint32_t layer, uint32_t buffer, uint64_t token,
                        const uint8_t* row, uint64_t len);
};

/// Where each page of each layer's buffer lies in one pool allocation,
/// [buffer][layer][page] of item_len bytes: the geometry, the pointer lists
/// transfer_info carries, and the checks, shared by the host pool here and
/// the device pool (model/gpu_kv_pool.hpp).
class kv_layout {
 public:
  uint32_t layers() const { return layers_; }
  bool mla() const { return mla_; }
  uint64_t pages() const { return pages_; }
  uint64_t item_len() const { return item_len_; }
  uint64_t row_len() const { return row_len_; }
  uint32_t page_size() const { return page_size_; }
  /// 1 for MLA, 2 for K/V.
  uint32_t buffers() const { return mla_ ? 1 : 2; }
  uint64_t buffer_bytes() const { return buffer_bytes_; }

  /// The whole pool (host or device memory) and its size.
  uint8_t* base() const { return base_; }
  uint64_t bytes() const { return bytes_; }

  /// Start of page `page` of `layer`'s buffer `buffer` (0 = K or MLA, 1 = V).
  uint8_t* page_ptr(uint32_t layer, uint32_t buffer, uint64_t page) const;

  /// Base pointer lists and item_lens as transfer_info / kv_pointers carry them.
  std::vector<uint64_t> k_ptrs() const;
  std::vector<uint64_t> v_ptrs() const;
  std::vector<uint64_t> item_lens() const;

 protected:
  /// Checks `model`'s geometry and sets every size for `pages` pages (at
  /// most 1 TiB in all); `pool` names the pool in the error.
  caf::error init(const model_config& model, uint64_t pages, const std::string& pool);

  uint32_t layers_ = 0;
  bool mla_ = false;
  uint64_t pages_ = 0;
  uint64_t item_len_ = 0;
  uint64_t row_len_ = 0;
  uint32_t page_size_ = 0;
  uint64_t buffer_bytes_ = 0;
  uint64_t bytes_ = 0;
  uint8_t* base_ = nullptr;
};

class kv_pool : public kv_layout {
 public:
  /// Allocates and zeroes `pages` pages per buffer for `model`'s geometry.
  static caf::expected<std::unique_ptr<kv_pool>> create(const model_config& model, uint64_t pages);
  ~kv_pool();
  kv_pool(const kv_pool&) = delete;
  kv_pool& operator=(const kv_pool&) = delete;

  /// The simulated model's write of one layer for `tokens` [first, last) of
  /// `room`, whose request pages are `pages` (page i holds tokens
  /// [i*page_size, (i+1)*page_size)); entries of pages outside the token range
  /// are not touched. Slots past `prompt_tokens` in the last page are zeroed
  /// so whole pages are deterministic.
  void write_layer(uint64_t room, uint32_t layer, const std::vector<uint64_t>& pages,
                   uint64_t first, uint64_t last, uint64_t prompt_tokens);

  /// Checks `room`'s bytes in this pool for tokens [first, last), every layer
  /// and buffer, including the zeroed tail. Returns the number of bad rows.
  uint64_t check_room(uint64_t room, const std::vector<uint64_t>& pages, uint64_t first,
                      uint64_t last, uint64_t prompt_tokens) const;

 private:
  kv_pool() = default;
};

/// Hands out pool pages. `fragmentation` (0..1) is the chance that a
/// request's next page is taken from a random free slot instead of the next
/// one, so runs of every length appear.
class page_allocator {
 public:
  page_allocator(uint64_t pages, uint64_t seed, double fragmentation);
  /// `n` pages, or an error if the pool cannot hold them.
  caf::expected<std::vector<uint64_t>> allocate(uint64_t n);
  void release(const std::vector<uint64_t>& pages);
  uint64_t free_pages() const { return free_.size(); }
  /// Pages it was made with, free or not.
  uint64_t total_pages() const { return total_; }

 private:
  uint64_t total_ = 0;
  std::vector<uint64_t> free_;
  std::mt19937_64 rng_;
  double fragmentation_;
};

} // namespace layerstream
