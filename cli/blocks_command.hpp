// `layerstream blocks --input FILE.json`: the transfer math from the outside.
//
// Input: one object (or an array of objects) with src_pages, dst_pages,
// src_k_ptrs, dst_k_ptrs, src_v_ptrs, dst_v_ptrs, item_lens, layer, cp_size,
// cp_rank, and optional chunk_start (default 0) and total_pages (default:
// chunk_start + the list length, the request ending with this chunk;
// required when chunk_start > 0 and cp_size > 1, where the CP split depends
// on it); every number unsigned 64-bit. Output on stdout:
// {"blocks": [[src, dst, len], ...]} (an array of those for an array input).
#pragma once

#include <iosfwd>
#include <string>

namespace layerstream::cli {

/// Runs the command. Returns the process exit code: 0, or 2 for bad input
/// (one line on `err` naming the field, and the array index for arrays).
int run_blocks(const std::string& input_path, std::ostream& out, std::ostream& err);

} // namespace layerstream::cli
