# `layerstream bench tail --compute-wait sleep`: the forward threads sleep
# through each layer's compute (a host waiting for a GPU); every run still
# completes bit-exactly (exit 0), and the JSON says which wait it used. A
# value other than spin or sleep is refused (exit 2) before any cluster starts.
# Run as: cmake -DLAYERSTREAM=<binary> -DOUT=<file> -P tail_compute_wait.cmake
include(${CMAKE_CURRENT_LIST_DIR}/tail_json.cmake)
run_tail_json(--layers 8 --rooms 1 --cp 1 2 --repetitions 1 --compute-wait sleep)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "expected 2 configs (CP 1 and 2), got ${n}")
endif()
string(JSON wait GET "${json}" compute_wait)
if(NOT wait STREQUAL "sleep")
  message(FATAL_ERROR "compute_wait is '${wait}', expected 'sleep'")
endif()

execute_process(COMMAND ${LAYERSTREAM} bench tail --quick --compute-wait nap
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "--compute-wait nap: exit ${rc}, expected 2\n${out}${err}")
endif()
string(FIND "${err}" "model.compute_wait: unknown value \"nap\"; one of \"spin\", \"sleep\"" at)
if(at LESS 0)
  message(FATAL_ERROR "--compute-wait nap: stderr does not say why:\n${err}")
endif()
