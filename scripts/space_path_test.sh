#!/usr/bin/env bash
# tensor_blob as a dependency of a project whose path holds a space
# ("my project/deps/tensor_blob", built into "my project/_build/..." as
# Mix and rebar3 ask): the library and the reaper are built in the
# application's folder, nothing in the checkout. A build folder that no
# path without a space can name from the checkout stops make with an error
# naming it. Only the NIF is built (make, as the Mix compiler and the
# rebar3 hook call it), not a consumer project.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. scripts/copy_checkout.sh

outside="$(mktemp -d)"
trap 'chmod -R u+w "$outside"; rm -rf "$outside"' EXIT
project="$outside/my project"
checkout="$project/deps/tensor_blob"
mkdir -p "$checkout"
copy_checkout "$checkout"

echo "==> space-path-test: a dependency in \"$checkout\""
app="$project/_build/dev/lib/tensor_blob"
mkdir -p "$app/ebin" # as Mix and rebar3 make it before the NIF's build
(cd "$checkout" && make --no-print-directory nif APP_DIR="$app")
for product in "$app/priv/tensor_blob_nif.so" "$app/priv/tensor_blob_reaper" "$app/priv/include/tensor_blob.h" \
    "$app/obj/torch_shim.o"; do
    [ -e "$product" ] || { echo "space-path-test: no $product" >&2; exit 1; }
done
for stray in "$checkout/build" "$checkout/priv/tensor_blob_nif.so" "$outside/my"; do
    [ ! -e "$stray" ] || { echo "space-path-test: $stray was written" >&2; exit 1; }
done
# Built: a second make compiles nothing (its targets are found again).
again="$(cd "$checkout" && make --no-print-directory nif APP_DIR="$app" 2>&1)"
if printf '%s\n' "$again" | grep -q -- ' -c '; then
    echo "space-path-test: a second make compiles again: $again" >&2
    exit 1
fi

echo "==> space-path-test: a build folder no path without a space names from the checkout"
elsewhere="$outside/other project/_build/dev/lib/tensor_blob"
if out="$(cd "$checkout" && make --no-print-directory nif APP_DIR="$elsewhere" 2>&1)"; then
    echo "space-path-test: make accepted APP_DIR=$elsewhere" >&2
    exit 1
fi
case "$out" in
*"APP_DIR \"$elsewhere\" holds a space"*) ;;
*)
    echo "space-path-test: make's error does not name the path: $out" >&2
    exit 1
    ;;
esac
[ ! -e "$outside/other project" ] || { echo "space-path-test: $outside/other project was written" >&2; exit 1; }
echo "space-path-test: ok"
