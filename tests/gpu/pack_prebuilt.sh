#!/usr/bin/env bash
# Packs a CUDA build (tests/gpu/run.sh's targets) for a GPU machine that lacks
# the Debian packages it links (CAF, libfabric, spdlog, ...): the five binaries,
# the CTest files that name them, and every shared library they load except the
# C and C++ runtimes (a newer glibc/libstdc++ there serves binaries built here).
#
#   tests/gpu/pack_prebuilt.sh BUILD PACK
#
# There, from the same repository checkout: the CTest files hold this
# machine's absolute paths of the source and of BUILD, so the checkout must sit
# at the same path (a symlink will do) and BUILD must lead to PACK/build (a
# symlink BUILD -> PACK/build); then
#   LD_LIBRARY_PATH=PACK/lib tests/gpu/run.sh --prebuilt BUILD
set -euo pipefail
build=${1:?usage: pack_prebuilt.sh BUILD PACK}
pack=${2:?usage: pack_prebuilt.sh BUILD PACK}
source "$(dirname "$0")/gpu_binaries.sh"

rm -rf "$pack"
mkdir -p "$pack/build" "$pack/lib"
pack_build=$(cd "$pack/build" && pwd)
for b in "${gpu_binaries[@]}"; do
  [ -x "$build/$b" ] || { echo "pack_prebuilt: $build/$b is not built" >&2; exit 2; }
  mkdir -p "$pack/build/$(dirname "$b")"
  strip -o "$pack/build/$b" "$build/$b"
done
(cd "$build" && find . \( -name CTestTestfile.cmake -o -name '*_tests.cmake' -o -name '*_include.cmake' \
  -o -name '*_skip_code.cmake' \) \
  -print0 | xargs -0 cp --parents -t "$pack_build")

# The runtime libraries' closure, less the C/C++ runtime and the loader.
skip='^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux-x86-64)\.so'
for b in "${gpu_binaries[@]}"; do ldd "$build/$b"; done | awk '/=> \//{print $1, $3}' | sort -u |
  while read -r name path; do
    [[ $name =~ $skip ]] && continue
    cp -L "$path" "$pack/lib/$name"
  done
du -sh "$pack"
