#!/usr/bin/env bash
# Builds Nx (and, for main, Torchx) for the :nx and :torchx tests from
# unmodified upstream source archives, offline, under an ignored build
# folder; prints the folder to put in NX_PATH (it holds nx/ebin,
# complex/ebin, telemetry/ebin[, torchx/ebin]).
#
#   scripts/build_nx.sh [auto|0.9.2|main|main-nx] [DEST]
#   scripts/build_nx.sh --sources      prints the archives' folder
#
# NX_SOURCES: the folder of archives (nx-0.9.2.tar.gz or nx-main-*.tar.gz,
# complex-*.tar.gz, telemetry-*.tar.gz, fine-*.tar.gz for Torchx). Unset,
# the first folder named third_party found in the checkout, beside it, or
# beside its parent.
#
# auto (the default): Nx main and Torchx on Elixir >= 1.17, Nx 0.9.2 below.
# main-nx: Nx main alone, where Torchx does not build (Torchx 0.13 does not
# compile against libtorch 2.14: its CMake build asks for C++17, which
# libtorch 2.14's headers refuse, and it calls torch::cholesky, which 2.14
# removed).
# DEST defaults to build/nx-<version>. A build is reused while the archives
# and the Elixir version are unchanged. Torchx is built against LIBTORCH_DIR
# (default /usr: the system's libtorch, the one tensor_blob links by default).
#
# The archives' Mix projects name Hex dependencies; a small project of our own
# (DEST/harness) lists them all as path dependencies that override those, so
# nothing is fetched. Nx 0.9.2 and complex declare newer Elixirs than 1.14
# while building on it: only the unpacked copies' requirements are relaxed.
# Nothing here is copied into the repository.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
third_party="${NX_SOURCES:-}"
if [ -z "$third_party" ]; then
  for candidate in "$repo/third_party" "$repo"/../third_party "$repo"/../*/third_party "$repo"/../../*/third_party; do
    if [ -d "$candidate" ]; then third_party="$(cd "$candidate" && pwd)"; break; fi
  done
fi
[ -d "$third_party" ] || { echo "build_nx: no folder of Nx source archives (set NX_SOURCES)" >&2; exit 1; }
if [ "${1:-}" = --sources ]; then echo "$third_party"; exit 0; fi

elixir_version="$(elixir -e 'IO.write(System.version())')"
which="${1:-auto}"
if [ "$which" = auto ]; then
  if elixir -e 'System.halt(if Version.match?(System.version(), ">= 1.17.0"), do: 0, else: 1)'; then
    which=main
  else
    which=0.9.2
  fi
fi
dest="${2:-$repo/build/nx-$which}"
export LIBTORCH_DIR="${LIBTORCH_DIR:-/usr}"

case "$which" in
  0.9.2) archives=(nx-0.9.2.tar.gz) ;;
  main) archives=("$(cd "$third_party" && ls nx-main-*.tar.gz | head -n1)" "$(cd "$third_party" && ls fine-*.tar.gz | head -n1)") ;;
  main-nx) archives=("$(cd "$third_party" && ls nx-main-*.tar.gz | head -n1)") ;;
  *) echo "build_nx: unknown version $which (auto, 0.9.2, main or main-nx)" >&2; exit 2 ;;
esac
archives+=("$(cd "$third_party" && ls complex-*.tar.gz | head -n1)" "$(cd "$third_party" && ls telemetry-*.tar.gz | head -n1)")

stamp="$( (cd "$third_party" && sha256sum "${archives[@]}"); echo "elixir $elixir_version"; echo "libtorch $LIBTORCH_DIR"; sha256sum "$0" | cut -d' ' -f1)"
lib="$dest/harness/_build/prod/lib"
if [ -f "$dest/.tb-built" ] && [ "$(cat "$dest/.tb-built")" = "$stamp" ]; then
  echo "$lib"
  exit 0
fi

{
  echo "==> build_nx: building Nx $which for Elixir $elixir_version in $dest"
  rm -rf "$dest"
  mkdir -p "$dest/src" "$dest/harness"
  for a in "${archives[@]}"; do tar -C "$dest/src" -xzf "$third_party/$a"; done
  src="$dest/src"
  if [ "$which" = main ]; then
    nx="$src/nx-main/nx"
    torchx="$src/nx-main/torchx"
  elif [ "$which" = main-nx ]; then
    nx="$src/nx-main/nx"
    torchx=""
  else
    nx="$src/nx-0.9.2/nx"
    torchx=""
  fi

  # Offline, each copy's Hex dependencies become path dependencies on the
  # others, and doc-only ones go; on Elixir 1.14 (Nx 0.9.2) the copies'
  # Elixir requirements are relaxed.
  for f in "$nx/mix.exs" "$src/complex/mix.exs" ${torchx:+"$torchx/mix.exs" "$src/fine/mix.exs"}; do
    sed -i -E \
      -e '/\{:(ex_doc|makeup|makeup_syntect),/d' \
      -e "s|\\{:complex, \"[^\"]*\"|{:complex, path: \"$src/complex\"|" \
      -e "s|\\{:telemetry, \"[^\"]*\"|{:telemetry, path: \"$src/telemetry\"|" \
      -e "s|\\{:fine, \"[^\"]*\"|{:fine, path: \"$src/fine\"|" \
      -e "s|\\{:nx, path: \"[^\"]*\"|{:nx, path: \"$nx\"|" \
      "$f"
    if [ "$which" = 0.9.2 ]; then
      sed -i -E 's/elixir: "~> 1\.1[5-9]"/elixir: "~> 1.14"/' "$f"
    fi
  done

  deps="{:nx, path: \"$nx\", override: true},
      {:complex, path: \"$src/complex\", override: true},
      {:telemetry, path: \"$src/telemetry\", override: true}"
  if [ -n "$torchx" ]; then
    deps="$deps,
      {:torchx, path: \"$torchx\", override: true},
      {:fine, path: \"$src/fine\", override: true, runtime: false}"
  fi
  cat >"$dest/harness/mix.exs" <<EOF
defmodule TensorBlobNxHarness.MixProject do
  use Mix.Project

  def project do
    [app: :tensor_blob_nx_harness, version: "0.0.0", deps: [
      $deps
    ]]
  end
end
EOF
  (cd "$dest/harness" && MIX_ENV=prod mix deps.compile)
  for app in nx complex telemetry ${torchx:+torchx}; do
    test -f "$lib/$app/ebin/$app.app" || { echo "build_nx: $app was not built" >&2; exit 1; }
  done
  printf '%s\n' "$stamp" >"$dest/.tb-built"
} >&2
echo "$lib"
