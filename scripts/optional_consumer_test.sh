#!/usr/bin/env bash
# A user's Mix project that depends on tensor_blob, Pythonx and ExTorch, as
# guides/python.md and guides/extorch.md show its `deps` lines: tensor_blob
# is listed first, so Mix must build Pythonx and ExTorch before it (they are
# tensor_blob's optional dependencies) for TensorBlob.Python and
# TensorBlob.ExTorch to exist. The project then runs an exchange through
# each. The ExTorch stage of `make compat-test` runs it
# (scripts/compat_extorch.sh); alone, inside the Debian 13 root:
# scripts/compat_test.sh --run scripts/optional_consumer_test.sh, with the
# two variables below. Pythonx needs Elixir >= 1.15, ExTorch >= 1.16 and
# Rust.
#
# PYTHONX_PATH and EXTORCH_PATH: what scripts/build_pythonx.sh and
# scripts/build_extorch.sh printed (their unpacked sources, with their own
# dependencies already made path dependencies, lie above). The project is
# build/optional_consumer (ignored); a second run reuses its build.
#
# ExTorch's Rust crate is not compiled again: the project lists the very
# source folder scripts/build_extorch.sh built, and Rustler runs cargo in
# the crate's folder (native/extorch) with no --target-dir, in release mode
# (its default, whatever MIX_ENV), so cargo finds that build's target/
# fresh, as it does for a user who points `path:` at a checkout they built
# before (scripts/build_extorch.sh sets back the times of the sources
# ExTorch's build script writes, which would make it run again). The
# script checks it: ExTorch's C++ compiled again (the crate's build script,
# most of ExTorch's build) fails the test, saying so. A relink of the Rust
# crate alone (under a minute; cargo does it where the build's history
# left a fingerprint behind) is reported, not failed.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pythonx_src="$(cd "${PYTHONX_PATH:?set PYTHONX_PATH}/../../.." && pwd)"
extorch_src="$(cd "${EXTORCH_PATH:?set EXTORCH_PATH}/../../.." && pwd)"
dir="${OPTIONAL_CONSUMER_DIR:-$repo/build/optional_consumer}"
[ -f "$pythonx_src/mix.exs" ] && [ -f "$extorch_src/mix.exs" ] ||
    { echo "optional-consumer-test: no Pythonx or ExTorch sources above $PYTHONX_PATH, $EXTORCH_PATH" >&2; exit 1; }
unset NX_PATH PYTHONX_PATH MIX_ENV
export MIX_ENV=dev

# write_if_changed FILE: stdin into FILE, leaving an unchanged FILE (and its
# time) alone, so that a second run compiles nothing of the project.
write_if_changed() {
  local new
  new="$(cat)"
  [ -f "$1" ] && [ "$(cat "$1")" = "$new" ] || printf '%s\n' "$new" >"$1"
}

mkdir -p "$dir/lib"
write_if_changed "$dir/mix.exs" <<EOF
defmodule MyApp.MixProject do
  use Mix.Project

  def project do
    [app: :my_app, version: "0.1.0", elixir: "~> 1.16", deps: deps()]
  end

  defp deps do
    [
      {:tensor_blob, path: "$repo"},
      {:pythonx, path: "$pythonx_src"},
      {:extorch, path: "$extorch_src"}
    ]
  end
end
EOF
echo 'defmodule MyApp do end' | write_if_changed "$dir/lib/my_app.ex"

# The crate as scripts/build_extorch.sh left it: the newest object of its
# C++ (made by its build script) and its library. Their times after the
# project's build tell what cargo compiled again.
crate_target="$extorch_src/native/extorch/target/release"
crate_lib="$crate_target/libextorch.so"
newest_object() {
  find "$crate_target/build" -path '*/extorch-*/out/*' -name '*.o' -printf '%T@\n' 2>/dev/null | sort -n | tail -n1
}
objects_before="$(newest_object)"
crate_before="$(stat -c %y "$crate_lib" 2>/dev/null || echo none)"

echo "==> optional-consumer-test: a project depending on tensor_blob, Pythonx and ExTorch ($dir)"
(cd "$dir" && CARGO_HOME="$extorch_src/../.cargo-home" mix run -e '
  true = Code.ensure_loaded?(TensorBlob.Python)
  true = Code.ensure_loaded?(TensorBlob.ExTorch)

  x = ExTorch.tensor([[1.0, 2.0], [3.0, 4.0]])
  view = TensorBlob.ExTorch.from_extorch(x)
  <<1.0::float-32-native, 2.0::float-32-native, 3.0::float-32-native, 4.0::float-32-native>> =
    TensorBlob.Tensor.to_binary(view)

  {paths, 0} = System.cmd("python3", ["-c", "import os, sys, sysconfig; print(os.path.join(sysconfig.get_config_var(\"LIBDIR\"), sysconfig.get_config_var(\"INSTSONAME\"))); print(sys.base_prefix); print(sys.executable)"])
  [libpython, home, executable] = String.split(paths, "\n", trim: true)
  :ok = Pythonx.init(libpython, home, executable)
  t = TensorBlob.Tensor.from_binary(<<1.0::float-32-native, 2.0::float-32-native>>, :float32, {2})
  {result, _} = Pythonx.eval("x.sum().item()", %{"x" => t})
  3.0 = Pythonx.decode(result)
  IO.puts("optional-consumer-test: TensorBlob.Python and TensorBlob.ExTorch are there, and exchange")
')

if [ -n "$objects_before" ] && [ "$objects_before" != "$(newest_object)" ]; then
  echo "optional-consumer-test: cargo compiled ExTorch's C++ again ($crate_target/build); the project should reuse scripts/build_extorch.sh's build" >&2
  exit 1
fi
if [ "$crate_before" != none ] && [ "$crate_before" != "$(stat -c %y "$crate_lib" 2>/dev/null || echo none)" ]; then
  echo "optional-consumer-test: ExTorch's C++ reused; cargo relinked its Rust crate ($crate_lib)"
else
  echo "optional-consumer-test: ExTorch's crate reused, nothing compiled ($crate_lib)"
fi
