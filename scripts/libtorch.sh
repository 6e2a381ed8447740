#!/bin/sh
# What the build needs to know of the libtorch it links, read from that
# libtorch's own files (LIBTORCH_DIR, or the system's where it is unset or
# /usr):
#
#   scripts/libtorch.sh version       "2.14.1", or "unknown"
#   scripts/libtorch.sh cxx-std       the C++ standard to compile the shim
#                                     with: the one libtorch's ATen.h
#                                     requires (libtorch 2.14: 20), never
#                                     older than the shim's own 17
#   scripts/libtorch.sh version-file  the header that declares the version
#
# The version header moved: libtorch 2.14's torch/version.h only includes
# torch/headeronly/version.h, which holds the numbers.
set -eu

dir="${LIBTORCH_DIR:-}"
case "$dir" in
  "" | /usr | /usr/) dir="" ;;
esac

if [ -z "$dir" ]; then includes="/usr/include"; else includes="$dir/include"; fi

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
    # ATen.h refuses an older standard: "#error C++20 or later compatible
    # compiler is required to use ATen."
    declared="$(sed -n 's/^#error C++\([0-9][0-9]\) or later.*/\1/p' "$includes/ATen/ATen.h" 2>/dev/null | head -n 1)"
    if [ -n "$declared" ] && [ "$declared" -gt 17 ]; then echo "$declared"; else echo 17; fi
    ;;
  *)
    echo "usage: scripts/libtorch.sh version | version-file | cxx-std" >&2
    exit 2
    ;;
esac
