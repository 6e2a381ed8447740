#!/usr/bin/env bash
# memcheck over the shim's tests: scripts/valgrind_shim.sh VALGRIND... SHIM_TEST
#
# Some virtual CPUs do not offer RDTSCP while valgrind's CPUID says they do;
# a library libtorch loads (libhwy) then executes it in its constructor,
# before any code of ours, and valgrind stops with SIGILL. That is the
# environment, not the shim: say so and pass; any other failure fails.
set -uo pipefail
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
"$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ] && grep -q "signal 4 (SIGILL)" "$log" &&
  grep -A2 "Illegal opcode" "$log" | grep -q "libhwy" && ! grep -q "RDTSCP\|rdtscp" /proc/cpuinfo; then
  echo "valgrind-test: the shim's tests were not run under valgrind: this CPU lacks RDTSCP, which libhwy" \
    "(loaded with libtorch) executes under valgrind before main; they run under ASan (make asan-test)"
  exit 0
fi
exit "$status"
