# Shared by the `bench tail` test scripts (included with LAYERSTREAM and OUT
# set): run_tail_json(ARGS...) runs `layerstream bench tail ARGS --json OUT`,
# fails the test unless it exits 0, and sets `json` (the file's text) and `n`
# (how many configs it holds); expect_tail_refused(EXPECT ARGS...) runs
# `layerstream bench tail ARGS` and fails the test unless it exits 2 with
# EXPECT in its stderr.
macro(run_tail_json)
  file(REMOVE ${OUT}) # an earlier run's file must not pass for this one's
  execute_process(COMMAND ${LAYERSTREAM} bench tail ${ARGN} --json ${OUT}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " args "${ARGN}")
    message(FATAL_ERROR "bench tail ${args} exited with ${rc}")
  endif()
  if(NOT EXISTS ${OUT})
    message(FATAL_ERROR "bench tail exited 0 but wrote no ${OUT}")
  endif()
  file(READ ${OUT} json)
  string(JSON n LENGTH "${json}" configs)
endmacro()

function(expect_tail_refused expect)
  string(REPLACE ";" " " args "${ARGN}")
  execute_process(COMMAND ${LAYERSTREAM} bench tail ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "bench tail ${args}: exit ${rc}, expected 2\n${out}${err}")
  endif()
  string(FIND "${err}" "${expect}" at)
  if(at LESS 0)
    message(FATAL_ERROR "bench tail ${args}: stderr does not say '${expect}':\n${err}")
  endif()
endfunction()
