#include "messages/messages.hpp"

#include <algorithm>

#include "actors/scheduler_protocol.hpp"

namespace layerstream {

std::string to_string(room_state state) {
  switch (state) {
  case room_state::waiting:
    return "waiting";
  case room_state::transferring:
    return "transferring";
  case room_state::complete:
    return "complete";
  case room_state::failed:
    return "failed";
  }
  return "unknown";
}

namespace {

uint64_t pages_for(uint64_t tokens, uint32_t page_size) {
  return tokens / page_size + (tokens % page_size != 0 ? 1 : 0);
}

/// The region of `regions` that holds [addr, addr + len), or null.
const remote_region* region_holding(const std::vector<remote_region>& regions, uint64_t addr,
                                    uint64_t len) {
  for (const auto& r : regions)
    if (range_contains(r.base, r.length, addr, len))
      return &r;
  return nullptr;
}

/// [addr, addr + len) of `count` pages from page `first` of the buffer at
/// `base`; false if it passes 2^64.
bool page_span(uint64_t base, uint64_t first, uint64_t count, uint64_t page_len, uint64_t& addr,
               uint64_t& len) {
  uint64_t offset = 0;
  return !__builtin_mul_overflow(first, page_len, &offset) &&
         !__builtin_mul_overflow(count, page_len, &len) &&
         !__builtin_add_overflow(base, offset, &addr) && range_fits(addr, len);
}

/// Every page the room's KV goes to, in every layer and buffer, lies inside
/// a region decode advertised, and no page is named twice. The engine checks
/// each block at submit too; checked here, a bad pointer fails the room
/// before it takes a page, not at its first write of that layer after the
/// earlier layers went out. Per layer and buffer one test when the span from
/// the lowest page to the highest lies in one region (decode's pool is one
/// region), else one per page (a block may be a single page).
template <class Fail>
caf::error check_dst_ranges(const transfer_info& info, Fail& fail) {
  // The block math's item lengths (kv_pointers): one per layer, or K's
  // then V's. check_transfer_info has matched their count to the model.
  const size_t layers = info.dst_k_ptrs.size();
  auto item_len = [&](bool v, size_t layer) {
    return v && info.item_lens.size() == 2 * layers ? info.item_lens[layers + layer]
                                                    : info.item_lens[layer];
  };
  std::vector<uint64_t> pages = info.dst_pages;
  std::sort(pages.begin(), pages.end());
  if (auto dup = std::adjacent_find(pages.begin(), pages.end()); dup != pages.end())
    return fail("dst_pages names page " + std::to_string(*dup) +
                " twice: two positions would be written to one page");
  const auto& regions = info.decode.regions;
  auto check_buffer = [&](const char* which, bool v,
                          const std::vector<uint64_t>& bases) -> caf::error {
    for (size_t layer = 0; layer < bases.size(); ++layer) {
      const uint64_t page_len = item_len(v, layer);
      uint64_t addr = 0;
      uint64_t len = 0;
      if (page_span(bases[layer], pages.front(), pages.back() - pages.front() + 1, page_len, addr,
                    len) &&
          region_holding(regions, addr, len) != nullptr)
        continue;
      for (auto page : pages) {
        const bool fits = page_span(bases[layer], page, 1, page_len, addr, len);
        if (!fits || region_holding(regions, addr, len) == nullptr)
          return fail(std::string{which} + " page " + std::to_string(page) + " of layer " +
                      std::to_string(layer) +
                      (!fits ? " passes 2^64"
                             : " [" + std::to_string(addr) + ", +" + std::to_string(len) +
                                   ") lies outside every region decode advertised"));
      }
    }
    return caf::none;
  };
  if (auto err = check_buffer(info.dst_v_ptrs.empty() ? "KV" : "K", false, info.dst_k_ptrs))
    return err;
  return check_buffer("V", true, info.dst_v_ptrs);
}

} // namespace

caf::error check_block_counts(const submit_batch& batch) {
  uint64_t left = batch.blocks.size();
  for (const auto& part : batch.rooms) {
    if (part.count > left)
      return make_error(lserr::bad_input, "submit_batch of layer " + std::to_string(batch.layer) +
                                              ": room " + std::to_string(part.room) + " claims " +
                                              std::to_string(part.count) + " blocks, " +
                                              std::to_string(left) + " are left in the list");
    left -= part.count;
  }
  if (left != 0)
    return make_error(lserr::bad_input, "submit_batch of layer " + std::to_string(batch.layer) +
                                            ": " + std::to_string(left) +
                                            " blocks belong to no room");
  return caf::none;
}

caf::error check_transfer_info(const transfer_info& info, const transfer_info_shape& shape) {
  auto fail = [&](const std::string& what) {
    return make_error(lserr::bad_input,
                      "transfer_info of room " + std::to_string(info.room) + ": " + what);
  };
  if (info.prompt_tokens == 0)
    return fail("prompt_tokens is 0");
  const auto pages = pages_for(info.prompt_tokens, shape.page_size);
  if (info.dst_pages.size() != pages)
    return fail("dst_pages holds " + std::to_string(info.dst_pages.size()) + " pages, " +
                std::to_string(info.prompt_tokens) + " tokens need " + std::to_string(pages));
  if (info.cp_size != shape.cp_size)
    return fail("cp_size " + std::to_string(info.cp_size) + ", this cluster has " +
                std::to_string(shape.cp_size));
  if (info.dst_k_ptrs.size() != shape.layers ||
      info.dst_v_ptrs.size() != (shape.mla ? 0u : shape.layers))
    return fail("pointer lists do not match the model (" + std::to_string(shape.layers) +
                " layers, " + (shape.mla ? "MLA" : "K/V") + ")");
  if (info.item_lens != shape.item_lens)
    return fail("item_lens differ from this rank's page size of " + std::to_string(shape.item_len) +
                " bytes");
  return check_dst_ranges(info, fail);
}

void add_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<remote_region>("layerstream::remote_region");
  cfg.add_message_type<fabric_peer>("layerstream::fabric_peer");
  cfg.add_message_type<connect_peer>("layerstream::connect_peer");
  cfg.add_message_type<block>("layerstream::block");
  cfg.add_message_type<std::vector<block>>("std::vector<layerstream::block>");
  cfg.add_message_type<page_run>("layerstream::page_run");
  cfg.add_message_type<transfer_plan>("layerstream::transfer_plan");
  cfg.add_message_type<kv_pointers>("layerstream::kv_pointers");
  cfg.add_message_type<request_transfer>("layerstream::request_transfer");
  cfg.add_message_type<setup>("layerstream::setup");
  cfg.add_message_type<room_refusal>("layerstream::room_refusal");
  cfg.add_message_type<setup_result>("layerstream::setup_result");
  cfg.add_message_type<layer_end>("layerstream::layer_end");
  cfg.add_message_type<event_ready>("layerstream::event_ready");
  cfg.add_message_type<submit>("layerstream::submit");
  cfg.add_message_type<submit_done>("layerstream::submit_done");
  cfg.add_message_type<room_blocks>("layerstream::room_blocks");
  cfg.add_message_type<submit_batch>("layerstream::submit_batch");
  cfg.add_message_type<submit_batch_done>("layerstream::submit_batch_done");
  cfg.add_message_type<finish>("layerstream::finish");
  cfg.add_message_type<finish_result>("layerstream::finish_result");
  cfg.add_message_type<finish_deadline>("layerstream::finish_deadline");
  cfg.add_message_type<transfer_info>("layerstream::transfer_info");
  cfg.add_message_type<kv_ready>("layerstream::kv_ready");
  cfg.add_message_type<batch_done>("layerstream::batch_done");
  cfg.add_message_type<stats_query>("layerstream::stats_query");
  cfg.add_message_type<hold_forward>("layerstream::hold_forward");
  cfg.add_message_type<scheduler_stats>("layerstream::scheduler_stats");
  cfg.add_message_type<open_room>("layerstream::open_room");
  cfg.add_message_type<room_result>("layerstream::room_result");
  cfg.add_message_type<close_room>("layerstream::close_room");
  cfg.add_message_type<room_deadline>("layerstream::room_deadline");
  cfg.add_message_type<room_status_query>("layerstream::room_status_query");
  cfg.add_message_type<room_status>("layerstream::room_status");
  cfg.add_message_type<auth_hello>("layerstream::auth_hello");
  cfg.add_message_type<rank_facts>("layerstream::rank_facts");
  cfg.add_message_type<auth_challenge>("layerstream::auth_challenge");
  cfg.add_message_type<auth_proof>("layerstream::auth_proof");
  // The gate answers a good auth_proof with a session handle (node/auth.hpp).
  cfg.add_message_type<scheduler_actor>("layerstream::scheduler_actor");
}

} // namespace layerstream
