# The binaries tests/gpu/run.sh runs, as paths in a build tree (their target
# names are the last path parts). Sourced by run.sh and pack_prebuilt.sh.
gpu_binaries=(tests/gpu/gpu_test tests/gpu/gpu_fault_test tests/gpu/event_waiter_test
  tests/equivalence_test layerstream)
