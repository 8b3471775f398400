#!/usr/bin/env bash
# One entry point for a fresh machine: installs what is missing (Debian
# packages, as root), configures and builds, then runs the job asked for.
#
#   scripts/setup.sh demo [ARGS...]   build, then `layerstream demo ARGS...`
#   scripts/setup.sh test [--quick]   build and run every test (ctest): the
#                                     plain build and its static checks
#                                     (scripts/lint.sh), then ASan+UBSan and
#                                     TSan builds (--quick: the plain build's
#                                     tests only)
#   scripts/setup.sh build [plain|asan|tsan]
#   scripts/setup.sh deps             install missing packages only
#
# Build folders: build/ (plain), build-asan/, build-tsan/. Exit code: the
# job's own; for test 0 only when every build, ctest run and check passed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jobs=${LAYERSTREAM_JOBS:-$(nproc)}

packages=(cmake g++ make pkg-config python3 libcaf-dev libfabric-dev libfabric-bin
  libspdlog-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libgtest-dev
  libbenchmark-dev iproute2 libssl-dev openssl clang clang-format clang-tidy cppcheck procps)

log() { echo "setup: $*" >&2; }

install_deps() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Every step returns on failure by hand: `build x && run_ctest ... || status=1`
# runs this function with set -e off.
build() { # plain | asan | tsan
  local kind=${1:-plain} dir args=()
  case "$kind" in
    plain) dir=$root/build ;;
    asan) dir=$root/build-asan; args+=(-DLAYERSTREAM_SANITIZE=address) ;;
    tsan)
      dir=$root/build-tsan
      local caf
      caf=$("$root/scripts/build_caf_tsan.sh") && [ -n "$caf" ] ||
        { log "could not build CAF with TSan (scripts/build_caf_tsan.sh)"; return 1; }
      args+=(-DLAYERSTREAM_SANITIZE=thread "-DLAYERSTREAM_CAF_ROOT=$caf") ;;
    *) log "unknown build kind '$kind' (plain, asan, tsan)"; exit 2 ;;
  esac
  log "building $kind in $dir"
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${args[@]}" >/dev/null ||
    { log "configuring $kind FAILED"; return 1; }
  cmake --build "$dir" -j"$jobs" || { log "building $kind FAILED"; return 1; }
}

# A run with no tests is a failure (a broken configure); ctest lists the
# skipped ones at the end ("(Skipped)"), each test saying why in its own
# output (build/Testing/Temporary/LastTest.log). Each run's skipped tests are
# listed with their reasons (scripts/skipped_tests.py) and counted in the
# summary, so that a skip is never read as a pass.
skips=""
run_ctest() { # dir label
  log "running the $2 tests"
  mkdir -p "$1/Testing"
  (cd "$1" && ctest --output-on-failure --no-tests=error --timeout 300 -j"$jobs") 2>&1 |
    tee "$1/Testing/ctest-output.txt"
  local rc=${PIPESTATUS[0]} skipped
  skipped=$(grep -cE '\(Skipped\)$' "$1/Testing/ctest-output.txt" || true)
  skips="$skips $2: $skipped skipped;"
  if [ "$skipped" -gt 0 ]; then
    log "$2: $skipped tests skipped, each with its reason:"
    python3 "$root/scripts/skipped_tests.py" "$1" | sed 's/^/  /' >&2 || true
  fi
  return "$rc"
}

# Sanitizer runtime options: fail on the first report, with our suppressions
# (tests/tsan.supp says why each one is not a race).
# exitcode=86 (UBSan: the same): a report never passes for a process
# a test expects to exit 1.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:exitcode=86}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/lsan.supp}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:exitcode=86}
export TSAN_OPTIONS=${TSAN_OPTIONS:-suppressions=$root/tests/tsan.supp:second_deadlock_stack=1}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  deps) install_deps ;;
  build) install_deps; build "${1:-plain}" ;;
  demo)
    install_deps
    build plain >/dev/null
    exec "$root/build/layerstream" demo "$@" ;;
  test)
    quick=0
    [ "${1:-}" = "--quick" ] && quick=1
    install_deps
    status=0
    build plain && run_ctest "$root/build" plain || status=1
    if [ $quick -eq 0 ]; then
      log "static checks (cppcheck, clang-tidy)"
      "$root/scripts/lint.sh" "$root/build" || status=1
      build asan && run_ctest "$root/build-asan" "ASan+UBSan" || status=1
      build tsan && run_ctest "$root/build-tsan" TSan || status=1
    fi
    [ -n "$skips" ] && log "skipped tests (listed as \"(Skipped)\" after each run):$skips"
    [ $status -eq 0 ] && log "all test runs passed" || log "some test runs FAILED"
    exit $status ;;
  *)
    sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 2 ;;
esac
