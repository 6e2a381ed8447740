#!/usr/bin/env bash
# The part of `make compat-test` (STACK trixie) and `make newest-test`
# (STACK forky) that runs inside that Debian root (scripts/compat_test.sh
# copies the checkout to /work/tensor_blob there).
#
#   trixie  the build, every suite of `make test`, the safetensors
#           reference test
#   forky   newest-lint, then the same, then the clients in the same VM as
#           tensor_blob: the :nx tests against Nx main and the :torchx tests
#           against Torchx main built with the root's libtorch, Pythonx's
#           :python tests (and under AddressSanitizer), and the ExTorch stage
#           (scripts/compat_extorch.sh, with a user's project that depends on
#           tensor_blob, Pythonx and ExTorch)
#
# Each step's time is printed, for CI's budget.
set -euo pipefail
cd /work/tensor_blob
stack="${1:?usage: compat_inner.sh trixie|forky}"
. /etc/os-release
began=$(date +%s)
step_began=$began

step() {
  local now
  now=$(date +%s)
  echo "==> compat-test ($PRETTY_NAME): $1 in $((now - step_began)) s"
  step_began=$now
}

echo "==> compat-test: $PRETTY_NAME: OTP $(erl -noshell -eval 'io:format("~s", [erlang:system_info(otp_release)]), halt().')," \
  "Elixir $(elixir -e 'IO.write(System.version())')," \
  "$(gcc --version | head -n1)," \
  "libtorch $(scripts/libtorch.sh version) (C++$(scripts/libtorch.sh cxx-std))," \
  "$(python3 --version)"

if [ "$stack" = forky ]; then
  make --no-print-directory newest-lint
  step "newest-lint"
fi
make --no-print-directory nif
make --no-print-directory suites
step "make suites"
# safetensors files both ways with the reference implementation (python3-safetensors).
make --no-print-directory safetensors-compat-test
step "safetensors-compat-test"

if [ "$stack" = forky ]; then
  # Torchx is built against the libtorch tensor_blob links (the system's).
  nx_path="$(NX_SOURCES=/work/third_party LIBTORCH_DIR=/usr scripts/build_nx.sh main /work/nx-main)"
  make --no-print-directory nx-test NX_PATH="$nx_path"
  make --no-print-directory torchx-test NX_PATH="$nx_path"
  step "Nx and Torchx"
  # Python in the VM: Pythonx built from the archives, the :python suite.
  pythonx_path="$(NX_SOURCES=/work/third_party scripts/build_pythonx.sh)"
  make --no-print-directory pythonx-test PYTHONX_PATH="$pythonx_path"
  make --no-print-directory pythonx-asan-test PYTHONX_PATH="$pythonx_path"
  step "Pythonx"
  # ExTorch, built from source against the same libtorch, beside Nx and Torchx.
  NX_PATH="$nx_path" PYTHONX_PATH="$pythonx_path" scripts/compat_extorch.sh
  step "ExTorch stage"
fi
echo "==> compat-test: every suite passed on $PRETTY_NAME in $(($(date +%s) - began)) s"
