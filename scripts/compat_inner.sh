#!/usr/bin/env bash
# The part of `make compat-test` that runs inside the Debian 13 root
# (scripts/compat_test.sh copies the checkout to /work/tensor_blob there):
# every suite of `make test`, then the :nx tests against Nx main and the
# :torchx tests against Torchx main built with the root's libtorch, then
# the ExTorch stage (scripts/compat_extorch.sh, with a user's project that
# depends on tensor_blob, Pythonx and ExTorch).
set -euo pipefail
cd /work/tensor_blob

echo "==> compat-test: OTP $(erl -noshell -eval 'io:format("~s", [erlang:system_info(otp_release)]), halt().')," \
  "Elixir $(elixir -e 'IO.write(System.version())')," \
  "libtorch $(dpkg-query -W -f='${Version}' libtorch-dev)"

make --no-print-directory nif
make --no-print-directory suites
# safetensors files both ways with the reference implementation (python3-safetensors).
make --no-print-directory safetensors-compat-test

# Torchx is built against the libtorch tensor_blob links (the system's).
nx_path="$(NX_SOURCES=/work/third_party LIBTORCH_DIR=/usr scripts/build_nx.sh main /work/nx-main)"
make --no-print-directory nx-test NX_PATH="$nx_path"
make --no-print-directory torchx-test NX_PATH="$nx_path"
# Python in the VM: Pythonx built from the archives, the :python suite.
pythonx_path="$(NX_SOURCES=/work/third_party scripts/build_pythonx.sh)"
make --no-print-directory pythonx-test PYTHONX_PATH="$pythonx_path"
make --no-print-directory pythonx-asan-test PYTHONX_PATH="$pythonx_path"
# ExTorch, built from source against the same libtorch, beside Nx and Torchx.
NX_PATH="$nx_path" PYTHONX_PATH="$pythonx_path" scripts/compat_extorch.sh
echo "==> compat-test: every suite passed on Debian 13"
