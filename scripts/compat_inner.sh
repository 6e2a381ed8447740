#!/usr/bin/env bash
# The part of `make compat-test` (STACK trixie) and `make newest-test`
# (STACK forky) that runs inside that Debian root (scripts/compat_test.sh
# copies the checkout to /work/tensor_blob there).
#
#   forky   the newest stack: every suite with every C and C++ warning an
#           error, the Erlang and Elixir code and tests with every warning
#           an error (make newest-lint-beam), the safetensors reference test
#           (0.8), then the clients that build there in the same VM as
#           tensor_blob: the :nx tests against Nx main, Pythonx's :python
#           tests (and under AddressSanitizer)
#   trixie  a stack in the middle: the build, the test suites (C, shim,
#           ExUnit, EUnit, Python), the safetensors reference test, then
#           the clients that do not build on the newest stack (their own
#           code: see scripts/build_nx.sh and scripts/build_extorch.sh):
#           the :torchx tests against Torchx main built with the root's
#           libtorch, and the ExTorch stage (scripts/compat_extorch.sh,
#           with a user's project that depends on tensor_blob, Pythonx and
#           ExTorch)
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
  # Every compile of the suites (the library, the reaper, the C and shim
  # tests, the load tests' and consumers' builds) with -Werror: what
  # newest-lint-c checks, without building everything twice.
  werror=(WERROR=-Werror)
  make --no-print-directory newest-lint-beam "${werror[@]}"
  step "newest-lint-beam"
else
  werror=()
fi
make --no-print-directory nif "${werror[@]}"
if [ "$stack" = forky ]; then
  make --no-print-directory suites "${werror[@]}"
  step "make suites"
else
  # A stack in the middle: its build and its test suites. The checks that
  # read the sources (check-c, bad-inputs-check), the documentation's
  # blocks and the consumer projects run on the oldest and the newest
  # stack.
  make --no-print-directory c-test shim-test mix-test eunit python-test
  step "c-test shim-test mix-test eunit python-test"
fi
# safetensors files both ways with the reference implementation (python3-safetensors).
make --no-print-directory safetensors-compat-test "${werror[@]}"
step "safetensors-compat-test"

if [ "$stack" = forky ]; then
  nx_path="$(NX_SOURCES=/work/third_party scripts/build_nx.sh main-nx /work/nx-main)"
  make --no-print-directory nx-test NX_PATH="$nx_path"
  step "Nx"
  # Python in the VM: Pythonx built from the archives, the :python suite.
  pythonx_path="$(NX_SOURCES=/work/third_party scripts/build_pythonx.sh)"
  make --no-print-directory pythonx-test PYTHONX_PATH="$pythonx_path"
  make --no-print-directory pythonx-asan-test PYTHONX_PATH="$pythonx_path"
  step "Pythonx"
else
  # Torchx is built against the libtorch tensor_blob links (the system's).
  nx_path="$(NX_SOURCES=/work/third_party LIBTORCH_DIR=/usr scripts/build_nx.sh main /work/nx-main)"
  make --no-print-directory torchx-test NX_PATH="$nx_path"
  step "Torchx"
  # ExTorch, built from source against the same libtorch, beside Nx and
  # Torchx; Pythonx for the project that lists both.
  pythonx_path="$(NX_SOURCES=/work/third_party scripts/build_pythonx.sh)"
  NX_PATH="$nx_path" PYTHONX_PATH="$pythonx_path" scripts/compat_extorch.sh
  step "ExTorch stage"
fi
echo "==> compat-test: every suite passed on $PRETTY_NAME in $(($(date +%s) - began)) s"
