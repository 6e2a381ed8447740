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

echo "==> consumer-test: both consumers passed"
