#!/bin/sh
# Writes (or, with --check, checks) test/BAD_INPUTS.md: runs
# scripts/bad_inputs.exs in a private /dev/shm (a mount namespace of its
# own) where the machine allows one, since some cases plant files under
# region names; elsewhere in /dev/shm itself, with the names it plants
# removed at once.
set -e
cd "$(dirname "$0")/.."
MIX_ENV=test mix compile >/dev/null
run="MIX_ENV=test exec mix run --no-compile scripts/bad_inputs.exs"
if unshare -m sh -c 'mount -t tmpfs -o size=64m tmpfs /dev/shm' 2>/dev/null; then
    exec unshare -m sh -c "mount -t tmpfs -o size=64m tmpfs /dev/shm && $run $*"
else
    sh -c "$run $*"
fi
