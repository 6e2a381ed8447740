#!/usr/bin/env bash
# The C, C++ and header files against .clang-format: lists each file whose
# formatting differs, and fails when one does. Reads, never writes (`make
# format` rewrites them).
#
#   scripts/check_format.sh              every file of c_src, c_test and bench/nif
#   scripts/check_format.sh FILE...      those files
#
# CLANG_FORMAT: the program (default: clang-format-14, else clang-format;
# Debian's clang-format-14, which scripts/setup.sh installs). Other
# releases format some constructs differently, so the check names the one
# it runs.
set -euo pipefail
cd "$(dirname "$0")/.."

cf="${CLANG_FORMAT:-}"
if [ -z "$cf" ]; then
  for candidate in clang-format-14 clang-format; do
    if command -v "$candidate" >/dev/null; then cf="$candidate"; break; fi
  done
fi
if [ -z "$cf" ] || ! command -v "$cf" >/dev/null; then
  echo "check_format: no clang-format (Debian: clang-format-14; scripts/setup.sh installs it)" >&2
  exit 1
fi

if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(find c_src c_test bench/nif -type f \( -name '*.c' -o -name '*.h' -o -name '*.cpp' \) | sort)
fi

differ=0
for f in "${files[@]}"; do
  if ! "$cf" --style=file "$f" | cmp -s "$f" -; then
    echo "check_format: $f differs from .clang-format ($cf --style=file -i $f)"
    differ=$((differ + 1))
  fi
done
echo "check_format: ${#files[@]} files, $differ to reformat ($("$cf" --version | head -1))"
[ "$differ" -eq 0 ]
