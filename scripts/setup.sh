#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test tensor_blob.
# A quick no-op when everything is present.
set -euo pipefail

packages=(
  build-essential make
  erlang-dev erlang-nox erlang-eunit erlang-proper erlang-dialyzer
  elixir rebar3
  libtorch-dev
  clang-14 libclang-rt-14-dev valgrind clang-format-14
  # make lint: the extent of each C function (scripts/check_function_size.sh)
  universal-ctags
  # PyTorch in Debian's python: make python-test shares tensors with it,
  # make bench compares with its own DLPack round trip.
  python3-torch
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: run as root or install sudo" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
