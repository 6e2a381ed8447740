#!/usr/bin/env bash
# Builds ExTorch (a Rust NIF over libtorch) for the :extorch tests from
# unmodified upstream source archives, offline, under an ignored build
# folder, against the system's libtorch (the one tensor_blob links); prints
# the folder to put in NX_PATH (it holds extorch/ebin, rustler/ebin,
# jason/ebin, telemetry/ebin).
#
#   scripts/build_extorch.sh [DEST]
#
# NX_SOURCES: the folder of archives (extorch-*, rustler-*, jason-*,
# telemetry-*.tar.gz), found as scripts/build_nx.sh finds it. DEST defaults
# to build/extorch. A build is reused while the archives, the Elixir and
# Rust versions and the edits are unchanged: a second run compiles
# nothing.
#
# Needs cargo, rustc and ExTorch's crates from Debian (the librust-*-dev
# packages scripts/compat_test.sh installs): cargo reads them from
# /usr/share/cargo/registry as a directory source, with no network. The
# unpacked copies (never the archives) are changed so that they build
# offline there:
#   - each mix.exs names the others as path dependencies; Hex-only, doc-only
#     and optional dependencies go (Mix cannot load one offline);
#   - the crates name the versions Debian has, rustler as a path;
#   - priv/native/libtorch links to the system's headers and libraries, so
#     ExTorch's build finds libtorch there and downloads nothing;
#   - one constructor that needs libtorch >= 2.7 (src/csrc/aoti.cc) takes its
#     two-argument form on older releases.
# After the build, the crate's sources that its build script wrote are given
# back the time the build began (see below), so that a project naming this
# folder reuses the build, as a second build of a user's checkout would.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
third_party="$(NX_SOURCES="${NX_SOURCES:-}" "$repo/scripts/build_nx.sh" --sources)"
dest="${1:-$repo/build/extorch}"
mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"
registry=/usr/share/cargo/registry
libdir="$(dirname "$(ls /usr/lib/*/libtorch_cpu.so 2>/dev/null | head -n1)")"

for tool in cargo rustc mix; do
  command -v "$tool" >/dev/null || { echo "build_extorch: $tool is missing (install cargo, rustc and elixir)" >&2; exit 1; }
done
[ -d "$registry" ] || { echo "build_extorch: no crates in $registry (install Debian's librust-*-dev packages)" >&2; exit 1; }
[ -f "$libdir/libtorch_cpu.so" ] || { echo "build_extorch: no system libtorch (install libtorch-dev)" >&2; exit 1; }

archive() { (cd "$third_party" && ls "$1"-*.tar.gz | head -n1); }
archives=("$(archive extorch)" "$(archive rustler)" "$(archive jason)" "$(archive telemetry)")

# The cache key: the archives, the tools, and the version of the edits below
# (raise it when they change).
edits=2
stamp="$( (cd "$third_party" && sha256sum "${archives[@]}")
  echo "elixir $(elixir -e 'IO.write(System.version())')"
  rustc --version
  echo "edits $edits")"
src="$dest/src"
lib="$src/extorch/_build/prod/lib"
if [ -f "$dest/.tb-built" ] && [ "$(cat "$dest/.tb-built")" = "$stamp" ]; then
  echo "$lib"
  exit 0
fi

# The version of a crate Debian has: the newest folder of the registry
# named for it (name-X.Y.Z).
debian_version() {
  local v
  v="$(cd "$registry" && ls -d "$1"-[0-9]* 2>/dev/null | sed "s/^$1-//" | sort -V | tail -n1)"
  [ -n "$v" ] || { echo "build_extorch: crate $1 is not in $registry" >&2; exit 1; }
  echo "$v"
}

{
  echo "==> build_extorch: building ExTorch in $dest (a first build takes minutes)"
  # New archives, tools or edits: start from fresh copies.
  rm -rf "$dest"
  mkdir -p "$src"
  for a in "${archives[@]}"; do tar -C "$src" -xzf "$third_party/$a"; done
  ext="$src/extorch"
  rs="$src/rustler"

  # Mix: path dependencies on each other, nothing from Hex.
  export TB_SRC="$src"
  perl -0pi -e 's{defp deps do\n.*?\n  end\n}{defp deps do\n    [\n      {:rustler, path: "$ENV{TB_SRC}/rustler/rustler_mix"},\n      {:telemetry, path: "$ENV{TB_SRC}/telemetry"},\n      {:jason, path: "$ENV{TB_SRC}/jason", override: true}\n    ]\n  end\n}s' "$ext/mix.exs"
  perl -0pi -e 's{defp deps do\n.*?\n  end\n}{defp deps do\n    [{:jason, path: "$ENV{TB_SRC}/jason", runtime: false}]\n  end\n}s' "$rs/rustler_mix/mix.exs"
  perl -0pi -e 's{defp deps\(\) do\n.*?\n  end\n}{defp deps() do\n    []\n  end\n}s' "$src/jason/mix.exs"
  grep -q "rustler_mix" "$ext/mix.exs" || { echo "build_extorch: ExTorch's mix.exs deps were not found" >&2; exit 1; }
  rm -f "$ext/mix.lock" "$ext/native/extorch/Cargo.lock"

  # Cargo: Debian's crates, rustler as a path.
  cargo_toml="$ext/native/extorch/Cargo.toml"
  sed -i -E \
    -e "s|^rustler = .*|rustler = { path = \"$rs/rustler\" }|" \
    -e "s|^cxx = .*|cxx = \"$(debian_version cxx)\"|" \
    -e "s|^cxx-build = \\{version = \"[^\"]*\"|cxx-build = {version = \"$(debian_version cxx-build)\"|" \
    -e "s|^rustc-hash = .*|rustc-hash = \"$(debian_version rustc-hash)\"|" \
    -e "s|^prettyplease = .*|prettyplease = \"$(debian_version prettyplease)\"|" \
    -e "s|^syn = .*|syn = \"$(debian_version syn)\"|" \
    -e "s|^lazy_static = .*|lazy_static = \"$(debian_version lazy_static)\"|" \
    -e "s|^libc = .*|libc = \"$(debian_version libc)\"|" \
    -e "s|^tera = .*|tera = \"$(debian_version tera)\"|" \
    -e "s|^glob = .*|glob = \"$(debian_version glob)\"|" \
    "$cargo_toml"
  rustc_minor="$(rustc --version | sed -E 's/^rustc 1\.([0-9]+).*/\1/')"
  sed -i -E \
    -e "s|^rust-version = \"1\\.[0-9]+\"|rust-version = \"1.$rustc_minor\"|" \
    -e "s|^libloading = \"0\\.9\"|libloading = \"$(debian_version libloading | cut -d. -f1,2)\"|" \
    "$rs/rustler/Cargo.toml"
  sed -i -E "s|^heck = \"[^\"]*\"|heck = \"$(debian_version heck | cut -d. -f1,2)\"|" "$rs/rustler_codegen/Cargo.toml"
  mkdir -p "$src/.cargo"
  cat >"$src/.cargo/config.toml" <<EOF
[source.crates-io]
replace-with = "debian"

[source.debian]
directory = "$registry"

[net]
offline = true
EOF

  # libtorch: the system's, through the folder ExTorch's build looks in.
  mkdir -p "$ext/priv/native/libtorch"
  ln -sfn /usr/include "$ext/priv/native/libtorch/include"
  ln -sfn "$libdir" "$ext/priv/native/libtorch/lib"

  # AOTIModelPackageLoader(path, name, run_single_threaded, num_runners,
  # device_index) is libtorch >= 2.7's; older releases have (path, name).
  perl -0pi -e 's/(    auto loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>\(\n        path_str, name_str, false, 1, static_cast<c10::DeviceIndex>\(device_index\)\);)/#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 \&\& TORCH_VERSION_MINOR >= 7)\n$1\n#else\n    (void)device_index;\n    auto loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(path_str, name_str);\n#endif/' \
    "$ext/native/extorch/src/csrc/aoti.cc"
  grep -q "TORCH_VERSION_MINOR >= 7" "$ext/native/extorch/src/csrc/aoti.cc" \
    || { echo "build_extorch: the AOTI loader call of aoti.cc was not found" >&2; exit 1; }
  grep -q "torch/version.h" "$ext/native/extorch/src/csrc/aoti.cc" \
    || sed -i '1i #include <torch/version.h>' "$ext/native/extorch/src/csrc/aoti.cc"

  # ExTorch's build script renders the crate's bridge on its first run and
  # writes it into the crate's own sources (src/native.rs, and its hash
  # src/native/native.rs.sum), inside a folder it tells cargo to watch
  # (rerun-if-changed=src/native). Written after the script began, they would
  # make the next cargo run, a project's first build, run the script again
  # and compile all of ExTorch's C++ once more. Their content is what this
  # build used, so they take the time the build began.
  began="$dest/.tb-build-began"
  touch "$began"
  (cd "$ext" && MIX_ENV=prod CARGO_HOME="$src/.cargo-home" mix compile)
  find "$ext/native/extorch/src" -newer "$began" -exec touch -h -r "$began" {} +
  for app in extorch rustler jason telemetry; do
    test -f "$lib/$app/ebin/$app.app" || { echo "build_extorch: $app was not built" >&2; exit 1; }
  done
  test -f "$lib/extorch/priv/native/extorch.so" || { echo "build_extorch: ExTorch's NIF was not built" >&2; exit 1; }
  printf '%s\n' "$stamp" >"$dest/.tb-built"
} >&2
echo "$lib"
