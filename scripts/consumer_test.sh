#!/usr/bin/env bash
# Builds and tests two tiny projects that use tensor_blob as a dependency:
# examples/mix_consumer (a Mix path dependency) and examples/rebar3_consumer
# (a rebar3 _checkouts dependency). Neither needs Hex or the network.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

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

echo "==> consumer-test: both projects copied outside the repository"
# Nothing they pass may depend on sitting inside the repository: copies in
# a temporary directory name it by its absolute path.
outside="$(mktemp -d)"
trap 'rm -rf "$outside"' EXIT
cp -r examples/mix_consumer examples/rebar3_consumer "$outside/"
rm -rf "$outside"/*/_build "$outside"/*/deps "$outside"/*/_checkouts
(cd "$outside/mix_consumer" && TENSOR_BLOB_PATH="$root" MIX_ENV=test mix test)
mkdir -p "$outside/rebar3_consumer/_checkouts"
ln -s "$root" "$outside/rebar3_consumer/_checkouts/tensor_blob"
(cd "$outside/rebar3_consumer" && rebar3 eunit)

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
