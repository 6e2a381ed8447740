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
mkdir -p examples/rebar3_consumer/_checkouts
ln -sfn ../../.. examples/rebar3_consumer/_checkouts/tensor_blob
(cd examples/rebar3_consumer && rebar3 eunit)

echo "==> consumer-test: both consumers passed"
