#!/usr/bin/env bash
# Builds CAF 0.17.6 (core + io) with ThreadSanitizer from Debian's own source
# package, into a cache outside the repository, and prints the install prefix.
#
# Why: Debian's libcaf_core is not instrumented, and TSan reports races inside
# CAF itself against it; the same programs are TSan-clean against this build
# (../shared/TOOLCHAIN.md). `-include limits`: the 0.17.6 io sources miss that
# include, which Debian patches and g++ 12 needs. Cached in ${XDG_CACHE_HOME:-$HOME/.cache}/layerstream;
# a fresh machine builds it (~3-6 min on 2 cores).
set -euo pipefail

version=0.17.6
cache=${XDG_CACHE_HOME:-$HOME/.cache}/layerstream
# Keyed on the compiler: TSan's runtime must match the one that built CAF.
cxx_version=$(g++ -dumpfullversion)
prefix=$cache/caf-$version-tsan-gcc$cxx_version
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

# The cache is reused only if its libcaf_core really is instrumented.
instrumented() {
  local lib
  lib=$(ls "$prefix"/lib*/libcaf_core.so 2>/dev/null | head -1)
  # grep reads all of nm's output (no -q): under pipefail an nm killed by
  # SIGPIPE would fail the check on a good library.
  [ -n "$lib" ] && nm -D "$lib" 2>/dev/null | grep "__tsan_init" >/dev/null
}
if [ -f "$prefix/.complete" ]; then
  if instrumented; then
    echo "$prefix"
    exit 0
  fi
  echo "build_caf_tsan: $prefix has no TSan-instrumented libcaf_core; building it again" >&2
  rm -rf "$prefix"
fi
mkdir -p "$cache"
work=$(mktemp -d "$cache/caf-src.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Enable deb-src from the machine's own apt sources (deb822 or one-line style).
if ! apt-get source --download-only --print-uris actor-framework >/dev/null 2>&1; then
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources |
      $sudo tee /etc/apt/sources.list.d/layerstream-deb-src.sources >/dev/null
  elif [ -f /etc/apt/sources.list ]; then
    grep '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' |
      $sudo tee /etc/apt/sources.list.d/layerstream-deb-src.list >/dev/null
  fi
  $sudo apt-get update -qq >&2
fi
# The .debian.tar.xz may 404; the orig tarball is all we need.
(cd "$work" && apt-get source --download-only actor-framework >&2) || true
tarball=$(ls "$work"/actor-framework_${version}.orig.tar.gz 2>/dev/null || true)
if [ -z "$tarball" ]; then
  echo "build_caf_tsan: could not download actor-framework_${version}.orig.tar.gz" >&2
  exit 1
fi
tar -xzf "$tarball" -C "$work"
src=$(find "$work" -maxdepth 1 -type d -name 'actor-framework*' | head -1)
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer -include limits" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DCAF_NO_OPENSSL=yes -DCAF_NO_EXAMPLES=yes \
  -DCAF_NO_UNIT_TESTS=yes -DCAF_NO_TOOLS=yes -DCAF_NO_PYTHON=yes -DCAF_NO_OPENCL=yes \
  -DCAF_NO_CURL_EXAMPLES=yes >&2
cmake --build "$work/build" -j"$(nproc)" --target libcaf_core_shared libcaf_io_shared >&2
cmake --install "$work/build" >&2 || true
# Check that what we need arrived.
test -f "$prefix/include/caf/all.hpp"
test -f "$prefix/include/caf/detail/build_config.hpp"
ls "$prefix"/lib*/libcaf_core.so* >/dev/null
if ! instrumented; then
  echo "build_caf_tsan: the libcaf_core just built has no TSan instrumentation" >&2
  exit 1
fi
touch "$prefix/.complete"
echo "$prefix"
