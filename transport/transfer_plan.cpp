#include "transport/transfer_plan.hpp"

#include <algorithm>
#include <string>

namespace layerstream {

namespace {

bool mul_overflows(uint64_t a, uint64_t b, uint64_t& out) {
  return __builtin_mul_overflow(a, b, &out);
}

bool add_overflows(uint64_t a, uint64_t b, uint64_t& out) {
  return __builtin_add_overflow(a, b, &out);
}

/// Appends the blocks of one buffer (K, V or MLA) of one layer.
caf::error append_buffer(const transfer_plan& plan, uint64_t src_base, uint64_t dst_base,
                         uint64_t item_len, const char* which, uint64_t layer,
                         std::vector<block>& out) {
  for (const auto& run : plan.runs) {
    uint64_t src_off = 0;
    uint64_t dst_off = 0;
    uint64_t len = 0;
    block b;
    if (mul_overflows(run.src_page, item_len, src_off) ||
        mul_overflows(run.dst_page, item_len, dst_off) || mul_overflows(run.pages, item_len, len) ||
        add_overflows(src_base, src_off, b.src) || add_overflows(dst_base, dst_off, b.dst) ||
        !range_fits(b.src, len) || !range_fits(b.dst, len))
      return make_error(lserr::overflow, std::string{which} + " block of layer " +
                                             std::to_string(layer) + " at src page " +
                                             std::to_string(run.src_page) + ", dst page " +
                                             std::to_string(run.dst_page) + " passes 2^64");
    b.len = len;
    out.push_back(b);
  }
  return caf::none;
}

} // namespace

caf::expected<position_range> owned_positions(uint64_t total_pages, uint64_t cp_size,
                                              uint64_t cp_rank) {
  if (cp_size == 0)
    return make_error(lserr::bad_input, "cp_size: must be at least 1");
  if (cp_rank >= cp_size)
    return make_error(lserr::bad_input, "cp_rank: " + std::to_string(cp_rank) +
                                            " is not below cp_size " + std::to_string(cp_size));
  const uint64_t base = total_pages / cp_size;
  const uint64_t rem = total_pages % cp_size;
  // r*base + min(r, rem) <= total_pages, so none of this can overflow.
  const uint64_t start = cp_rank * base + std::min(cp_rank, rem);
  const uint64_t count = base + (cp_rank < rem ? 1 : 0);
  return position_range{start, start + count};
}

caf::expected<transfer_plan> make_transfer_plan(const std::vector<uint64_t>& src_pages,
                                                const std::vector<uint64_t>& dst_pages,
                                                const cp_slice& slice) {
  if (src_pages.size() != dst_pages.size())
    return make_error(lserr::bad_input, "dst_pages: length " + std::to_string(dst_pages.size()) +
                                            " differs from src_pages length " +
                                            std::to_string(src_pages.size()));
  const uint64_t len = src_pages.size();
  const uint64_t total = slice.total_pages == 0 ? len : slice.total_pages;
  uint64_t chunk_end = 0;
  if (add_overflows(slice.chunk_start, len, chunk_end) || chunk_end > total)
    return make_error(lserr::bad_input, "chunk_start: chunk [" + std::to_string(slice.chunk_start) +
                                            ", +" + std::to_string(len) +
                                            ") does not fit in total_pages " +
                                            std::to_string(total));
  auto owned = owned_positions(total, slice.cp_size, slice.cp_rank);
  if (!owned)
    return owned.error();
  // The part of this rank's slice inside the chunk, as list positions.
  const uint64_t begin = std::max(owned->begin, slice.chunk_start);
  const uint64_t end = std::min(owned->end, chunk_end);
  transfer_plan plan;
  if (begin >= end)
    return plan;
  const uint64_t first = begin - slice.chunk_start;
  const uint64_t last = end - slice.chunk_start;
  page_run run{src_pages[first], dst_pages[first], 1};
  for (uint64_t i = first + 1; i < last; ++i) {
    // Compare as "next == previous + 1" without computing previous + 1,
    // which would wrap at UINT64_MAX.
    const bool src_steps = src_pages[i] != 0 && src_pages[i] - 1 == src_pages[i - 1];
    const bool dst_steps = dst_pages[i] != 0 && dst_pages[i] - 1 == dst_pages[i - 1];
    if (src_steps && dst_steps) {
      ++run.pages;
    } else {
      plan.runs.push_back(run);
      run = page_run{src_pages[i], dst_pages[i], 1};
    }
  }
  plan.runs.push_back(run);
  plan.pages = last - first;
  return plan;
}

caf::error validate(const kv_pointers& ptrs) {
  const uint64_t n = ptrs.layers();
  if (n == 0)
    return make_error(lserr::bad_input, "src_k_ptrs: no layers");
  if (ptrs.dst_k.size() != n)
    return make_error(lserr::bad_input, "dst_k_ptrs: " + std::to_string(ptrs.dst_k.size()) +
                                            " entries, src_k_ptrs has " + std::to_string(n));
  if (ptrs.src_v.size() != ptrs.dst_v.size())
    return make_error(lserr::bad_input, "dst_v_ptrs: " + std::to_string(ptrs.dst_v.size()) +
                                            " entries, src_v_ptrs has " +
                                            std::to_string(ptrs.src_v.size()));
  if (!ptrs.src_v.empty() && ptrs.src_v.size() != n)
    return make_error(lserr::bad_input, "src_v_ptrs: " + std::to_string(ptrs.src_v.size()) +
                                            " entries, expected " + std::to_string(n) +
                                            " (K/V) or 0 (MLA)");
  // MLA has one buffer per layer (SGLang's MLA pool registers N item
  // lengths): a second half would be ignored, not checked.
  if (ptrs.mla() && ptrs.item_lens.size() != n)
    return make_error(lserr::bad_input, "item_lens: " + std::to_string(ptrs.item_lens.size()) +
                                            " entries, expected " + std::to_string(n) +
                                            " (MLA: one buffer per layer)");
  if (ptrs.item_lens.size() != n && ptrs.item_lens.size() != 2 * n)
    return make_error(lserr::bad_input, "item_lens: " + std::to_string(ptrs.item_lens.size()) +
                                            " entries, expected " + std::to_string(n) + " or " +
                                            std::to_string(2 * n));
  for (size_t i = 0; i < ptrs.item_lens.size(); ++i)
    if (ptrs.item_lens[i] == 0)
      return make_error(lserr::bad_input, "item_lens: entry " + std::to_string(i) + " is 0");
  return caf::none;
}

caf::error append_layer_blocks(const transfer_plan& plan, const kv_pointers& ptrs, uint64_t layer,
                               std::vector<block>& out) {
  if (layer >= ptrs.layers())
    return make_error(lserr::bad_layer, "layer: " + std::to_string(layer) +
                                            " is not below the layer count " +
                                            std::to_string(ptrs.layers()));
  const size_t old_size = out.size();
  out.reserve(old_size + plan.runs.size() * (ptrs.mla() ? 1 : 2));
  auto err = append_buffer(plan, ptrs.src_k[layer], ptrs.dst_k[layer], ptrs.k_item_len(layer),
                           ptrs.mla() ? "KV" : "K", layer, out);
  if (!err && !ptrs.mla())
    err = append_buffer(plan, ptrs.src_v[layer], ptrs.dst_v[layer], ptrs.v_item_len(layer), "V",
                        layer, out);
  if (err)
    out.resize(old_size);
  return err;
}

caf::expected<std::vector<block>> build_layer_blocks(const transfer_plan& plan,
                                                     const kv_pointers& ptrs, uint64_t layer) {
  if (auto err = validate(ptrs))
    return err;
  std::vector<block> out;
  if (auto err = append_layer_blocks(plan, ptrs, layer, out))
    return err;
  return out;
}

caf::expected<uint64_t> layer_bytes(const transfer_plan& plan, const kv_pointers& ptrs,
                                    uint64_t layer) {
  if (layer >= ptrs.layers())
    return make_error(lserr::bad_layer, "layer " + std::to_string(layer) + " out of range");
  uint64_t per_page = ptrs.k_item_len(layer);
  if (!ptrs.mla() && add_overflows(per_page, ptrs.v_item_len(layer), per_page))
    return make_error(lserr::overflow, "layer bytes pass 2^64");
  uint64_t total = 0;
  if (mul_overflows(per_page, plan.pages, total))
    return make_error(lserr::overflow, "layer bytes pass 2^64");
  return total;
}

} // namespace layerstream
