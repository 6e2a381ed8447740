#!/usr/bin/env bash
# What a `mix compile` with nothing to compile costs a project that depends
# on tensor_blob, against a plain Mix project's, timed in the same run
# (alternating, so that the machine's load weighs on both alike).
# `make bench-compile`; ROUNDS=n (default 7) no-op compiles of each. Prints
# both medians and their ratio (the goal: at most 1.5), and fails when the
# consumer's no-op ran make.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds="${ROUNDS:-7}"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT

project() { # name, deps
    mkdir -p "$dir/$1/lib"
    cat >"$dir/$1/mix.exs" <<EOF
defmodule ${1^}.MixProject do
  use Mix.Project
  def project, do: [app: :$1, version: "0.1.0", deps: [$2]]
end
EOF
    echo "defmodule ${1^} do end" >"$dir/$1/lib/$1.ex"
}
project plain ""
project consumer "{:tensor_blob, path: \"$root\"}"

for p in plain consumer; do
    (cd "$dir/$p" && mix compile >/dev/null 2>&1) || { echo "noop_compile_bench: $p does not compile" >&2; exit 1; }
done

# A no-op compile of the consumer must not run make: a make on PATH that
# leaves a mark says whether it ran.
mkdir "$dir/bin"
printf '#!/bin/sh\ntouch "%s/make-ran"\nexec %s "$@"\n' "$dir" "$(command -v make)" >"$dir/bin/make"
chmod +x "$dir/bin/make"

seconds() { # project: the seconds of one no-op compile
    local start end
    start=$(date +%s%N)
    (cd "$dir/$1" && PATH="$dir/bin:$PATH" mix compile >/dev/null 2>&1)
    end=$(date +%s%N)
    echo $(((end - start) / 1000000))
}
plain=()
consumer=()
for _ in $(seq "$rounds"); do
    plain+=("$(seconds plain)")
    consumer+=("$(seconds consumer)")
done
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
p=$(median "${plain[@]}")
c=$(median "${consumer[@]}")
ratio=$(awk -v c="$c" -v p="$p" 'BEGIN { printf "%.2f", c / p }')
echo "no-op mix compile, median of $rounds: plain project ${p} ms, project depending on tensor_blob ${c} ms: ${ratio}x (goal: at most 1.5x)"
if [ -e "$dir/make-ran" ]; then
    echo "noop_compile_bench: a no-op compile of the consumer ran make" >&2
    exit 1
fi
