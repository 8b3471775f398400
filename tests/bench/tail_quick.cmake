# `layerstream bench tail --quick --json F`: exit 0 (every run of both paths
# complete and bit-exact), and the JSON holds the documented keys for every
# config, including L = 32 with 1 room, with tails that are real measurements
# (a batch's tail ends at the last delivery-complete, its settled tail later;
# the one-layer run's tail is one layer alone on the link).
# Run as: cmake -DLAYERSTREAM=<binary> -DOUT=<file> -P tail_quick.cmake
include(${CMAKE_CURRENT_LIST_DIR}/tail_json.cmake)
run_tail_json(--quick)
if(n LESS 1)
  message(FATAL_ERROR "no configs in ${OUT}")
endif()
set(found_l32_r1 FALSE)
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  foreach(key layers rooms cp tail_bulk_ms tail_layer_ms layer_xfer_ms forward_slowdown_pct
              notifier_ns_median tail_bulk_settled_ms tail_layer_settled_ms layer_alone_ms
              tail_layer_over_layer_alone)
    string(JSON v ERROR_VARIABLE e GET "${json}" configs ${i} ${key})
    if(e)
      message(FATAL_ERROR "config ${i}: key ${key}: ${e}")
    endif()
  endforeach()
  string(JSON layers GET "${json}" configs ${i} layers)
  string(JSON rooms GET "${json}" configs ${i} rooms)
  string(JSON bulk GET "${json}" configs ${i} tail_bulk_ms)
  string(JSON layer GET "${json}" configs ${i} tail_layer_ms)
  string(JSON alone GET "${json}" configs ${i} layer_alone_ms)
  # The bulk tail is the whole transfer after the forward, and the one-layer
  # run's tail its one layer: never zero.
  if(bulk LESS_EQUAL 0 OR layer LESS 0 OR alone LESS_EQUAL 0)
    message(FATAL_ERROR "config ${i}: tail_bulk_ms ${bulk}, tail_layer_ms ${layer}, "
                        "layer_alone_ms ${alone}")
  endif()
  # The scheduler settles a batch only after its engine saw the last byte
  # delivered: the settled tail can only be longer.
  string(JSON bulk_settled GET "${json}" configs ${i} tail_bulk_settled_ms)
  string(JSON layer_settled GET "${json}" configs ${i} tail_layer_settled_ms)
  if(bulk_settled LESS bulk OR layer_settled LESS layer)
    message(FATAL_ERROR "config ${i}: settled tails ${bulk_settled} / ${layer_settled} ms shorter "
                        "than the delivered ones ${bulk} / ${layer} ms")
  endif()
  if(layers EQUAL 32 AND rooms EQUAL 1)
    set(found_l32_r1 TRUE)
  endif()
endforeach()
if(NOT found_l32_r1)
  message(FATAL_ERROR "--quick must include L = 32 with 1 room")
endif()
