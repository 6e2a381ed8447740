#!/usr/bin/env bash
# Builds and tests two tiny projects that use tensor_blob as a dependency:
# examples/mix_consumer (a Mix path dependency) and examples/rebar3_consumer
# (a rebar3 _checkouts dependency). Neither needs Hex or the network.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. scripts/copy_checkout.sh

echo "==> consumer-test: Mix project using tensor_blob as a path dependency (examples/mix_consumer)"
(cd examples/mix_consumer && MIX_ENV=test mix test)

echo "==> consumer-test: rebar3 project using tensor_blob through _checkouts (examples/rebar3_consumer)"
# rebar3 has no path dependencies: a _checkouts/<app> directory stands in for
# the dependency, so link it to this repository.
checkout=examples/rebar3_consumer/_checkouts/tensor_blob
if [ -e "$checkout" ] && [ ! -L "$checkout" ]; then
    echo "consumer-test: $checkout exists and is not a symlink; remove it" >&2
    exit 1
fi
mkdir -p examples/rebar3_consumer/_checkouts
ln -sfn ../../.. "$checkout"
(cd examples/rebar3_consumer && rebar3 eunit)

echo "==> consumer-test: both projects copied outside the repository, over a read-only checkout"
# Nothing they pass may depend on sitting inside the repository: copies in
# a temporary directory name it by its absolute path. The library is a copy
# too, of what a checkout holds (no build products), made read-only: a
# dependency builds in its consumer's build folder (Mix's _build/<env>/lib/
# tensor_blob, rebar3's _build/<profile>/checkouts/tensor_blob), never in
# the checkout. As root, chmod does not stop a write: the checkout's
# listing (names, sizes, times, modes) is compared before and after.
outside="$(mktemp -d)"
trap 'chmod -R u+w "$outside"; rm -rf "$outside"' EXIT
checkout="$outside/tensor_blob"
mkdir "$checkout"
copy_checkout "$checkout"
listing() { find "$checkout" -printf '%p %s %T@ %m\n' | sort; }
chmod -R a-w "$checkout"
before="$(listing)"

cp -r examples/mix_consumer examples/rebar3_consumer "$outside/"
rm -rf "$outside"/*/_build "$outside"/*/deps "$outside"/*/_checkouts

echo "==> consumer-test: quiet builds, and a second MIX_ENV that takes the library from the object cache"
# An empty object cache of its own (scripts/build_cache.sh), so that the
# first build compiles everything. Its output names no compiler command.
export TENSOR_BLOB_CACHE_DIR="$outside/cache"
compile_in() { # MIX_ENV, then what else to set; prints mix's output, then the seconds taken
    local env=$1 start end out
    shift
    start=$(date +%s.%N)
    out="$(cd "$outside/mix_consumer" && env TENSOR_BLOB_PATH="$checkout" MIX_ENV="$env" "$@" mix compile 2>&1)" ||
        { printf '%s\n' "$out" >&2; echo "consumer-test: MIX_ENV=$env mix compile failed" >&2; exit 1; }
    end=$(date +%s.%N)
    printf '%s\n%s\n' "$out" "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')"
}
compiler_line='(^|[ /])(cc|gcc|g\+\+|c\+\+|clang)( |$)| -c c_src/| -o [^ ]*\.(o|so)( |$)'
# Verbose, make echoes each step (through scripts/build_cache.sh), which
# prints "cached: ..." for what the cache gave and the compiler's command,
# first on its line, for what it compiled.
compiler_ran='^([^ ]*/)?(cc|gcc|g\+\+|c\+\+|clang)(-[0-9.]+)? '
first="$(compile_in test)"
first_s="$(tail -n1 <<<"$first")"
if grep -Eq "$compiler_line" <<<"$first"; then
    printf '%s\n' "$first" >&2
    echo "consumer-test: a quiet build printed compiler commands" >&2
    exit 1
fi
objects="$(find "$outside/mix_consumer/_build/test/lib/tensor_blob/obj" -name '*.o' | wc -l)"
# The second MIX_ENV, verbose: every object, the library, the reaper and
# the doc chunk are "cached:", and no compiler runs.
second="$(compile_in dev TB_VERBOSE=1)"
second_s="$(tail -n1 <<<"$second")"
cached="$(grep -c '^cached: ' <<<"$second" || true)"
if grep -Eq "$compiler_ran" <<<"$second" || [ "$cached" -lt $((objects + 2)) ]; then
    printf '%s\n' "$second" >&2
    echo "consumer-test: the second MIX_ENV compiled again ($cached products from the cache, $objects objects)" >&2
    exit 1
fi
for f in priv/tensor_blob_nif.so priv/tensor_blob_reaper doc/chunks/tensor_blob.chunk; do
    cmp -s "$outside/mix_consumer/_build/test/lib/tensor_blob/$f" "$outside/mix_consumer/_build/dev/lib/tensor_blob/$f" ||
        { echo "consumer-test: the second MIX_ENV's $f differs from the first's" >&2; exit 1; }
done
echo "consumer-test: MIX_ENV=test compiled in ${first_s} s (empty cache), MIX_ENV=dev in ${second_s} s ($cached from the cache)"
# The library the cache gave loads and works in that MIX_ENV.
(cd "$outside/mix_consumer" && TENSOR_BLOB_PATH="$checkout" MIX_ENV=dev mix run -e '
  {<<10, 20, 30, 40, 50, 60>>, _view} = MixConsumer.exchange()
  IO.puts("consumer-test: the cached library loads and works in MIX_ENV=dev")')

(cd "$outside/mix_consumer" && TENSOR_BLOB_PATH="$checkout" MIX_ENV=test mix test)
mkdir -p "$outside/rebar3_consumer/_checkouts"
ln -s "$checkout" "$outside/rebar3_consumer/_checkouts/tensor_blob"
(cd "$outside/rebar3_consumer" && rebar3 eunit)
# A rebar3 compile with nothing changed does not run make
# (scripts/rebar3_nif.sh), and one whose library in priv is not the one
# built for it does, which puts it back. A make on PATH that leaves a mark
# says whether it ran.
mkdir "$outside/bin"
printf '#!/bin/sh\ntouch "%s/make-ran"\nexec %s "$@"\n' "$outside" "$(command -v make)" >"$outside/bin/make"
chmod +x "$outside/bin/make"
rebar3_app="$outside/rebar3_consumer/_build/test/checkouts/tensor_blob"
(cd "$outside/rebar3_consumer" && PATH="$outside/bin:$PATH" rebar3 as test compile >/dev/null)
[ ! -e "$outside/make-ran" ] || { echo "consumer-test: a rebar3 compile with nothing changed ran make" >&2; exit 1; }
cp "$rebar3_app/obj/tensor_blob_reaper" "$rebar3_app/priv/tensor_blob_nif.so"
(cd "$outside/rebar3_consumer" && PATH="$outside/bin:$PATH" rebar3 as test compile >/dev/null)
[ -e "$outside/make-ran" ] && cmp -s "$rebar3_app/obj/tensor_blob_nif.so" "$rebar3_app/priv/tensor_blob_nif.so" ||
    { echo "consumer-test: a rebar3 compile did not rebuild a library replaced in priv" >&2; exit 1; }
app="$outside/mix_consumer/_build/test/lib/tensor_blob"
for product in "$app/priv/tensor_blob_nif.so" "$app/priv/tensor_blob_reaper" "$app/priv/include/tensor_blob.h" \
    "$app/obj/torch_shim.o" "$app/doc/chunks/tensor_blob.chunk" \
    "$outside/rebar3_consumer/_build/test/checkouts/tensor_blob/priv/tensor_blob_nif.so"; do
    [ -e "$product" ] || { echo "consumer-test: no $product" >&2; exit 1; }
done

echo "==> consumer-test: two consumers of one checkout with different LIBTORCH_DIRs"
# The second consumer names the same libtorch by another path (a tree of
# links to it), which is another build configuration. Each builds in its
# own _build: building one leaves the other's build as it was.
tree="$outside/libtorch"
if [ -n "${LIBTORCH_DIR:-}" ] && [ "$LIBTORCH_DIR" != /usr ]; then
    ln -s "$LIBTORCH_DIR" "$tree"
else
    mkdir -p "$tree/include" "$tree/lib"
    for d in ATen c10 caffe2 torch; do ln -s "/usr/include/$d" "$tree/include/$d"; done
    for l in libtorch libtorch_cpu libc10; do ln -s "$(cc -print-file-name=$l.so)" "$tree/lib/$l.so"; done
fi
cp -r examples/mix_consumer "$outside/second_consumer"
rm -rf "$outside/second_consumer/_build"
(cd "$outside/second_consumer" && TENSOR_BLOB_PATH="$checkout" LIBTORCH_DIR="$tree" MIX_ENV=test mix test)
grep -q "libtorch=$tree " "$outside"/second_consumer/_build/test/lib/tensor_blob/obj/config-* ||
    { echo "consumer-test: the second consumer was not built with LIBTORCH_DIR=$tree" >&2; exit 1; }
marker="$outside/marker"
touch "$marker"
sleep 1
(cd "$outside/mix_consumer" && TENSOR_BLOB_PATH="$checkout" MIX_ENV=test mix test)
(cd "$outside/second_consumer" && TENSOR_BLOB_PATH="$checkout" LIBTORCH_DIR="$tree" MIX_ENV=test mix test)
rebuilt="$(find "$outside/mix_consumer/_build" "$outside/second_consumer/_build" \
    \( -name '*.o' -o -name '*.so' \) -newer "$marker")"
if [ -n "$rebuilt" ]; then
    printf '%s\n' "$rebuilt" >&2
    echo "consumer-test: one consumer's build rebuilt the other's" >&2
    exit 1
fi

echo "==> consumer-test: a LIBTORCH_DIR without libtorch, reported before anything compiles"
cp -r examples/mix_consumer "$outside/wrong_consumer"
rm -rf "$outside/wrong_consumer/_build"
if out="$(cd "$outside/wrong_consumer" && TENSOR_BLOB_PATH="$checkout" LIBTORCH_DIR="$outside/nowhere" MIX_ENV=test mix compile 2>&1)" ||
    ! grep -q "no libtorch at LIBTORCH_DIR=$outside/nowhere" <<<"$out"; then
    printf '%s\n' "$out" >&2
    echo "consumer-test: a LIBTORCH_DIR without libtorch is not named as such" >&2
    exit 1
fi
compiled="$(find "$outside/wrong_consumer/_build" -name '*.o')"
if [ -n "$compiled" ] || grep -q -- ' -c c_src/' <<<"$out"; then
    printf '%s\n' "$compiled" >&2
    echo "consumer-test: files compiled before the wrong LIBTORCH_DIR was reported" >&2
    exit 1
fi

after="$(listing)"
chmod -R u+w "$checkout"
if [ "$after" != "$before" ]; then
    diff <(printf '%s\n' "$before") <(printf '%s\n' "$after") >&2 || true
    echo "consumer-test: building the consumers wrote into the checkout" >&2
    exit 1
fi

echo "==> consumer-test: the object cache never gives an object for a changed source, header or flag"
# A writable copy of the checkout, built (as its own project) into a
# scratch folder from the cache the consumers filled: the same source gives
# the cached object; a changed source, a changed header or another flag
# compiles again.
changed="$outside/changed"
cp -r "$checkout" "$changed"
chmod -R u+w "$changed"
scratch="$outside/scratch-build"
object_built() { # what the object cache says for tb_raise.o: "cached" or "compiled"
    local out
    out="$(make -C "$changed" --no-print-directory TB_VERBOSE=1 BUILD="$scratch" "$@" "$scratch/tb_raise.o" 2>&1)" ||
        { printf '%s\n' "$out" >&2; exit 1; }
    rm -f "$scratch/tb_raise.o"
    if grep -q "^cached: $scratch/tb_raise.o" <<<"$out"; then echo cached
    elif grep -q -- "-c c_src/beam/tb_raise.c" <<<"$out"; then echo compiled
    else printf '%s\n' "$out" >&2; echo unknown; fi
}
expect() { # what, expected, got
    [ "$2" = "$3" ] || { echo "consumer-test: $1: the object was $3, expected $2" >&2; exit 1; }
}
expect "the same source" cached "$(object_built)"
expect "another -O" compiled "$(object_built OPT=-O1)"
echo '/* changed */' >>"$changed/c_src/beam/tb_raise.c"
expect "a changed source" compiled "$(object_built)"
expect "the changed source again" cached "$(object_built)"
echo '/* changed */' >>"$changed/c_src/core/tb_dtype.h"
expect "a changed header" compiled "$(object_built)"
unset TENSOR_BLOB_CACHE_DIR

echo "==> consumer-test: build integration"
# A changed build configuration (here a libtorch tree that is not there)
# must rebuild the library, not keep the old link.
# (The plan is captured first: grep -q stopping early under pipefail would
# fail the pipeline by chance.)
plan="$(make -n nif LIBTORCH_DIR=/nonexistent/libtorch)"
if ! grep -q 'torch_shim.cpp' <<<"$plan"; then
    echo "consumer-test: make nif with another LIBTORCH_DIR would not rebuild the NIF" >&2
    exit 1
fi
# A LIBTORCH_DIR that holds no libtorch is named as such.
scratch="$(mktemp -d)"
if out="$(make --no-print-directory BUILD="$scratch" LIBTORCH_DIR=/nonexistent/libtorch "$scratch/torch_shim.o" 2>&1)" ||
    ! grep -q 'no libtorch at LIBTORCH_DIR=/nonexistent/libtorch' <<<"$out"; then
    printf '%s\n' "$out" >&2
    echo "consumer-test: a LIBTORCH_DIR without libtorch is not named as such" >&2
    exit 1
fi
rm -rf "$scratch"
# mix clean runs the Mix compiler's clean/0: the NIF and its objects go,
# and the next compile builds them again.
MIX_ENV=test mix clean
for product in priv/tensor_blob_nif.so build/torch_shim.o doc/chunks/tensor_blob.chunk; do
    if [ -e "$product" ]; then echo "consumer-test: mix clean left $product" >&2; exit 1; fi
done
MIX_ENV=test mix compile
test -e priv/tensor_blob_nif.so && test -e _build/test/lib/tensor_blob/doc/chunks/tensor_blob.chunk

echo "==> consumer-test: both consumers passed"
