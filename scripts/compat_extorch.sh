#!/usr/bin/env bash
# The ExTorch stage of `make compat-test`, inside the Debian 13 root
# (scripts/compat_inner.sh runs it; alone: scripts/compat_test.sh --run
# scripts/compat_extorch.sh). Builds ExTorch from the source archives
# (scripts/build_extorch.sh, kept in build/extorch between runs: a second
# run builds nothing), then, in one VM with ExTorch, tensor_blob, Nx and
# Torchx loaded (one libtorch_cpu mapped), the :extorch tests (and again
# under AddressSanitizer), the ExTorch guide's blocks, a user's project
# depending on tensor_blob, Pythonx and ExTorch
# (scripts/optional_consumer_test.sh: it reuses the ExTorch build, seconds
# once its own build exists) and the exchange bench.
#
# NX_PATH: the Nx/Torchx build (default: scripts/build_nx.sh main, as
# compat_inner.sh builds it). PYTHONX_PATH: the Pythonx build, for the
# project alone (default: scripts/build_pythonx.sh, as compat_inner.sh
# builds it). EXTORCH_BENCH=0 skips the bench.
set -euo pipefail
cd "$(dirname "$0")/.."
sources="${NX_SOURCES:-/work/third_party}"

skip() {
  echo "==> compat-test: ExTorch stage skipped: $*"
  exit 0
}
ls "$sources"/extorch-*.tar.gz "$sources"/rustler-*.tar.gz "$sources"/jason-*.tar.gz >/dev/null 2>&1 \
  || skip "no ExTorch, rustler or jason source archive in $sources"
command -v cargo >/dev/null || skip "cargo is not installed in this root"
ls -d /usr/share/cargo/registry/cxx-build-* >/dev/null 2>&1 \
  || skip "Debian's crates (librust-cxx-build-dev, ...) are not installed in this root"
elixir -e 'System.halt(if Version.match?(System.version(), ">= 1.16.0"), do: 0, else: 1)' \
  || skip "ExTorch needs Elixir >= 1.16"

began=$(date +%s)
nx_path="${NX_PATH:-$(NX_SOURCES="$sources" LIBTORCH_DIR=/usr scripts/build_nx.sh main /work/nx-main)}"
extorch_path="$(NX_SOURCES="$sources" nice scripts/build_extorch.sh)"
# For the project only: with PYTHONX_PATH set, the tests below would build
# TensorBlob.Python too.
pythonx_path="${PYTHONX_PATH:-$(NX_SOURCES="$sources" scripts/build_pythonx.sh)}"
unset PYTHONX_PATH
built=$(date +%s)
echo "==> compat-test: ExTorch ready in $((built - began)) s ($extorch_path)"

export NX_PATH="$nx_path:$extorch_path"
make --no-print-directory nif
MIX_ENV=test mix test --only extorch
# The same tests against an AddressSanitizer build: a read of freed memory
# aborts the VM.
make --no-print-directory extorch-asan-test
MIX_ENV=test mix run --no-compile scripts/docs_test.exs guides/extorch.md
consumer_began=$(date +%s)
PYTHONX_PATH="$pythonx_path" EXTORCH_PATH="$extorch_path" scripts/optional_consumer_test.sh
echo "==> compat-test: the optional-dependency project passed in $(($(date +%s) - consumer_began)) s"
if [ "${EXTORCH_BENCH:-1}" != 0 ]; then
  MIX_ENV=test mix run --no-compile bench/extorch.exs
fi
echo "==> compat-test: ExTorch stage passed in $(($(date +%s) - began)) s (build or reuse: $((built - began)) s)"
