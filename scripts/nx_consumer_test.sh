#!/usr/bin/env bash
# make nx-consumer-test: scratch Mix projects that depend on tensor_blob (a
# path dependency) and on Nx, checking that TensorBlob.Nx is compiled exactly
# when the consumer has Nx, whatever the build order or history:
#
#   a  fresh build of a consumer listing tensor_blob (first) and nx
#   b  then `mix deps.compile --force tensor_blob`
#   c  then removing _build/dev/lib/tensor_blob and compiling again
#   d  a consumer built without nx, to which nx is then added
#   e  a consumer without nx: it builds, and TensorBlob.Nx is absent
#   f  nx removed again from (d), and its build: TensorBlob.Nx goes away
#   g  the offline recipe of guides/nx.md, its blocks run as written, in a
#      folder holding deps_src/{nx,complex,telemetry}, my_app and tensor_blob
#
# Nx comes from scripts/build_nx.sh (the unpacked sources it leaves: Nx 0.9.2
# on Elixir < 1.17, main on newer; NX_VERSION picks); the consumers list it as
# a path dependency, so no Hex. They live in build/nx_consumers (ignored).
# A consumer's "check" runs `mix run`, which compiles what is stale first.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="${NX_CONSUMERS_DIR:-$repo/build/nx_consumers}"
lib="$("$repo/scripts/build_nx.sh" "${NX_VERSION:-auto}")"
src="$(cd "$lib/../../../../src" && pwd)"
nx="$(ls -d "$src"/nx-*/nx | head -n1)"
unset NX_PATH MIX_ENV
export MIX_ENV=dev

failures=()
log() { printf '==> nx-consumer-test: %s\n' "$*"; }

# write_project DIR WITH_NX: a consumer listing tensor_blob, and nx or not.
write_project() {
  local dir="$1" with_nx="$2" deps
  deps="{:tensor_blob, path: \"$repo\"}"
  if [ "$with_nx" = yes ]; then
    deps="$deps,
      {:nx, path: \"$nx\"}"
  fi
  mkdir -p "$dir"
  cat >"$dir/mix.exs" <<EOF
defmodule NxConsumer.MixProject do
  use Mix.Project

  def project do
    [app: :nx_consumer, version: "0.0.0", elixir: "~> 1.14", deps: [
      $deps
    ]]
  end
end
EOF
  # A new mix.exs must look newer than the build (mtime granularity).
  touch -d '+1 second' "$dir/mix.exs" 2>/dev/null || true
}

# check DIR SCENARIO EXPECT(true|false): compiles and asks whether
# TensorBlob.Nx is loaded (and, when it is, round-trips a tensor through it).
check() {
  local dir="$1" scenario="$2" expect="$3" out got
  if ! out="$(cd "$dir" && mix run -e '
      loaded = Code.ensure_loaded?(TensorBlob.Nx)
      if loaded do
        nx = apply(Nx, :iota, [{2, 3}, [type: {:f, 32}]])
        back = apply(TensorBlob.Nx, :to_nx, [apply(TensorBlob.Nx, :from_nx, [nx])])
        true = apply(Nx, :to_flat_list, [back]) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
      end
      IO.puts("TB_NX=#{loaded}")' 2>&1)"; then
    printf '%s\n' "$out"
    log "$scenario: FAILED (the consumer did not build or run)"
    failures+=("$scenario")
    return
  fi
  got="$(printf '%s\n' "$out" | sed -n 's/^TB_NX=//p' | tail -n1)"
  if [ "$got" = "$expect" ]; then
    log "$scenario: ok (TensorBlob.Nx loaded: $got)"
  else
    printf '%s\n' "$out"
    log "$scenario: FAILED (TensorBlob.Nx loaded: $got, expected $expect)"
    failures+=("$scenario")
  fi
}

rm -rf "$work"
log "tensor_blob at $repo, nx at $nx"

with="$work/with_nx"
write_project "$with" yes
check "$with" "a: fresh build with nx" true
(cd "$with" && mix deps.compile --force tensor_blob >/dev/null)
check "$with" "b: after mix deps.compile --force tensor_blob" true
rm -rf "$with/_build/dev/lib/tensor_blob"
check "$with" "c: after removing _build/dev/lib/tensor_blob" true

added="$work/added_nx"
write_project "$added" no
check "$added" "e: a consumer without nx" false
write_project "$added" yes
check "$added" "d: nx added to a consumer built without it" true
write_project "$added" no
rm -rf "$added"/_build/dev/lib/{nx,complex,telemetry}
check "$added" "f: nx removed again" false

# g: guides/nx.md's offline recipe, as written: its `sh offline-nx` block in
# deps_src (unmodified sources), its `elixir norun offline-nx` block as the
# deps of my_app/mix.exs, tensor_blob beside them.
recipe_block() { # the body of the code block whose fence is exactly $1
  awk -v fence="$1" '$0 == fence { inside = 1; next } inside && $0 == "```" { exit } inside { print }' \
    "$repo/guides/nx.md"
}
offline="$work/offline"
sources="$("$repo/scripts/build_nx.sh" --sources)"
mkdir -p "$offline/deps_src" "$offline/my_app" "$offline/unpacked"
case "$nx" in
  */nx-main/nx) tar -C "$offline/unpacked" -xzf "$(ls "$sources"/nx-main-*.tar.gz | head -n1)"
                mv "$offline/unpacked/nx-main/nx" "$offline/deps_src/nx" ;;
  *) tar -C "$offline/unpacked" -xzf "$sources/nx-0.9.2.tar.gz"
     mv "$offline/unpacked/nx-0.9.2/nx" "$offline/deps_src/nx" ;;
esac
tar -C "$offline/deps_src" -xzf "$(ls "$sources"/complex-*.tar.gz | head -n1)"
tar -C "$offline/deps_src" -xzf "$(ls "$sources"/telemetry-*.tar.gz | head -n1)"
rm -rf "$offline/unpacked"
ln -s "$repo" "$offline/tensor_blob"
shell_recipe="$(recipe_block '```sh offline-nx')"
deps_recipe="$(recipe_block '```elixir norun offline-nx')"
if [ -z "$shell_recipe" ] || [ -z "$deps_recipe" ]; then
  log "g: FAILED (guides/nx.md has no offline-nx blocks)"
  failures+=("g")
elif ! (cd "$offline/deps_src" && bash -euo pipefail -c "$shell_recipe"); then
  log "g: FAILED (the recipe's shell block failed)"
  failures+=("g")
else
  cat >"$offline/my_app/mix.exs" <<EOF
defmodule MyApp.MixProject do
  use Mix.Project

  def project, do: [app: :my_app, version: "0.1.0", deps: deps()]

$deps_recipe
end
EOF
  check "$offline/my_app" "g: the offline recipe of guides/nx.md" true
fi

if [ "${#failures[@]}" -gt 0 ]; then
  log "failed: ${failures[*]}"
  exit 1
fi
log "all scenarios passed"
