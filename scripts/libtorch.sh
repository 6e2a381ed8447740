#!/bin/sh
# What the build needs to know of the libtorch it links, read from that
# libtorch's own files (LIBTORCH_DIR, or the system's where it is unset or
# /usr):
#
#   scripts/libtorch.sh version       "2.14.1", or "unknown"
#   scripts/libtorch.sh cxx-std       the C++ standard to compile the shim
#                                     with: what libtorch's CMake package
#                                     asks of its users (libtorch 2.14: 20),
#                                     never older than the shim's own 17
#   scripts/libtorch.sh version-file  the header that declares the version
#
# The version header moved: libtorch 2.14's torch/version.h only includes
# torch/headeronly/version.h, which holds the numbers.
set -eu

dir="${LIBTORCH_DIR:-}"
case "$dir" in
  "" | /usr | /usr/) dir="" ;;
esac

if [ -z "$dir" ]; then
  includes="/usr/include"
  cmake_configs="$(ls /usr/lib/*/cmake/Torch/TorchConfig.cmake /usr/share/cmake/Torch/TorchConfig.cmake 2>/dev/null || true)"
else
  includes="$dir/include"
  cmake_configs="$dir/share/cmake/Torch/TorchConfig.cmake"
fi

version_file() {
  for f in "$includes/torch/headeronly/version.h" "$includes/torch/csrc/api/include/torch/version.h"; do
    if grep -qs 'define TORCH_VERSION_MAJOR' "$f"; then
      echo "$f"
      return
    fi
  done
}

case "${1:-}" in
  version)
    f="$(version_file)"
    if [ -z "$f" ]; then
      echo unknown
    else
      for part in MAJOR MINOR PATCH; do
        sed -n "s/^#define TORCH_VERSION_$part \([0-9][0-9]*\).*/\1/p" "$f"
      done | paste -sd. -
    fi
    ;;
  version-file)
    version_file
    ;;
  cxx-std)
    declared=0
    for f in $cmake_configs; do
      n="$(sed -n 's/^ *CXX_STANDARD \([0-9][0-9]*\).*/\1/p' "$f" | head -n 1)"
      if [ -n "$n" ]; then
        declared="$n"
        break
      fi
    done
    if [ "$declared" -gt 17 ]; then echo "$declared"; else echo 17; fi
    ;;
  *)
    echo "usage: scripts/libtorch.sh version | version-file | cxx-std" >&2
    exit 2
    ;;
esac
