# `layerstream bench tail --compute-wait sleep`: the forward threads sleep
# through each layer's compute (a host waiting for a GPU); every run still
# completes bit-exactly (exit 0), the JSON says which wait it used, and the
# forward threads really used little CPU. A
# value other than spin or sleep is refused (exit 2) before any cluster starts.
# Run as: cmake -DLAYERSTREAM=<binary> -DOUT=<file> -P tail_compute_wait.cmake
include(${CMAKE_CURRENT_LIST_DIR}/tail_json.cmake)
# One page per room and 3 ms layers: the KV writes (slow under sanitizers)
# stay a small part of each layer.
run_tail_json(--layers 8 --rooms 1 --cp 1 2 --tokens 16 --layer-compute-us 3000 --repetitions 1
              --compute-wait sleep)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "expected 2 configs (CP 1 and 2), got ${n}")
endif()
string(JSON wait GET "${json}" compute_wait)
if(NOT wait STREQUAL "sleep")
  message(FATAL_ERROR "compute_wait is '${wait}', expected 'sleep'")
endif()
# The forward threads slept: over the no-transfer forward the process used
# far less CPU per forward thread than its wall time (a spinning one: ~100 %).
foreach(i 0 1)
  string(JSON cpu GET "${json}" configs ${i} forward_cpu_pct)
  if(cpu GREATER 60)
    message(FATAL_ERROR "config ${i}: forward_cpu_pct ${cpu}: the forward threads did not sleep")
  endif()
endforeach()

expect_tail_refused("model.compute_wait: unknown value \"nap\"; one of \"spin\", \"sleep\""
                    --quick --compute-wait nap)
