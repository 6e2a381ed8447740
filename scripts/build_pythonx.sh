#!/usr/bin/env bash
# Builds Pythonx (CPython embedded in the BEAM) for the :python tests from
# the unmodified upstream archives, offline, under an ignored build folder;
# prints the folder to put in PYTHONX_PATH (it holds pythonx/ebin and
# pythonx/priv, fine/, elixir_make/, cc_precompiler/).
#
#   scripts/build_pythonx.sh [DEST]
#
# NX_SOURCES: the folder of archives (pythonx-*, fine-*, elixir_make-*,
# cc_precompiler-*), found as scripts/build_nx.sh finds it. DEST defaults to
# build/pythonx. Needs Elixir >= 1.15 (Pythonx's requirement). A build is
# reused while the archives and the Elixir version are unchanged.
#
# The archives' mix.exs files name Hex dependencies; in the unpacked copies
# (never the archives) this script points them at each other as path
# dependencies and drops the optional and doc-only ones, so nothing is
# fetched. Nothing here is copied into the repository.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
third_party="$("$repo/scripts/build_nx.sh" --sources)"
dest="${1:-$repo/build/pythonx}"
elixir_version="$(elixir -e 'IO.write(System.version())')"
elixir -e 'System.halt(if Version.match?(System.version(), ">= 1.15.0"), do: 0, else: 1)' || {
  echo "build_pythonx: Pythonx needs Elixir >= 1.15, this is $elixir_version" >&2
  exit 3
}

names=(pythonx fine elixir_make cc_precompiler)
archives=()
for n in "${names[@]}"; do archives+=("$(cd "$third_party" && ls "$n"-*.tar.gz | head -n1)"); done
stamp="$( (cd "$third_party" && sha256sum "${archives[@]}"); echo "elixir $elixir_version"; sha256sum "$0" | cut -d' ' -f1)"
lib="$dest/src/pythonx/_build/prod/lib"
if [ -f "$dest/.tb-built" ] && [ "$(cat "$dest/.tb-built")" = "$stamp" ]; then
  echo "$lib"
  exit 0
fi

rm -rf "$dest/src"
mkdir -p "$dest/src"
for a in "${archives[@]}"; do tar -C "$dest/src" -xzf "$third_party/$a"; done

# deps: path dependencies on each other; optional (flame) and doc-only
# (ex_doc, makeup_syntect) ones dropped.
edit_deps() {
  local file="$1" new="$2"
  python3 - "$file" "$new" <<'PY'
import re, sys
path, new = sys.argv[1], sys.argv[2]
src = open(path).read()
out, n = re.subn(r"defp deps do\n.*?\n  end\n", "defp deps do\n    [" + new + "]\n  end\n", src, count=1, flags=re.S)
assert n == 1, path
open(path, "w").write(out)
PY
}
edit_deps "$dest/src/pythonx/mix.exs" \
  '{:fine, path: "../fine", runtime: false}, {:elixir_make, path: "../elixir_make", runtime: false}, {:cc_precompiler, path: "../cc_precompiler", runtime: false}'
edit_deps "$dest/src/cc_precompiler/mix.exs" '{:elixir_make, path: "../elixir_make", runtime: false}'
edit_deps "$dest/src/fine/mix.exs" ''
edit_deps "$dest/src/elixir_make/mix.exs" ''

(cd "$dest/src/pythonx" && rm -f mix.lock && MIX_ENV=prod mix compile >&2)
printf '%s\n' "$stamp" >"$dest/.tb-built"
echo "$lib"
