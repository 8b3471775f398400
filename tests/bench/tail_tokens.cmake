# `layerstream bench tail --tokens`: each value runs every config with that
# prompt length per room, so the KV bytes per layer follow the tokens; bad
# values and shapes whose pools would not fit are refused (exit 2) with the
# reason, before any cluster starts.
# Run as: cmake -DLAYERSTREAM=<binary> -DOUT=<file> -P tail_tokens.cmake
include(${CMAKE_CURRENT_LIST_DIR}/tail_json.cmake)
run_tail_json(--layers 4 --rooms 1 --cp 1 --tokens 32 64 --repetitions 1)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "expected 2 configs (one per --tokens value), got ${n}")
endif()
string(JSON t0 GET "${json}" configs 0 tokens_per_room)
string(JSON t1 GET "${json}" configs 1 tokens_per_room)
string(JSON b0 GET "${json}" configs 0 kv_bytes_per_layer)
string(JSON b1 GET "${json}" configs 1 kv_bytes_per_layer)
if(NOT t0 EQUAL 32 OR NOT t1 EQUAL 64)
  message(FATAL_ERROR "tokens_per_room ${t0}, ${t1}; expected 32, 64")
endif()
math(EXPR twice "2 * ${b0}")
if(b0 LESS_EQUAL 0 OR NOT b1 EQUAL twice)
  message(FATAL_ERROR "kv_bytes_per_layer ${b0} then ${b1}: twice the tokens must be twice the bytes")
endif()

# Refused: a zero token count, and 100000 tokens in 256 rooms over 80 layers.
foreach(bad "0;tokens must be in" "100000;MiB of KV pools")
  list(GET bad 0 tokens)
  list(GET bad 1 expect)
  expect_tail_refused("${expect}" --layers 80 --rooms 256 --tokens ${tokens})
endforeach()
