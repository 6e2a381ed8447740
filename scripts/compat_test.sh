#!/usr/bin/env bash
# Every suite on a newer Debian than the machine's, in a root made with
# debootstrap. Two stacks:
#
#   trixie   Debian 13: OTP 27, Elixir 1.18, libtorch 2.6 (make compat-test):
#            the build, every suite of `make test` and the safetensors
#            reference test; then the clients that do not build against
#            libtorch 2.14, in the same VM as tensor_blob: Torchx main,
#            ExTorch.
#   forky    Debian testing: OTP 29, Elixir 1.20, GCC 16, libtorch and
#            PyTorch 2.14, Python 3.14 (make newest-test): the same with
#            every warning an error (make newest-lint), then the clients
#            that build there: Nx main, Pythonx.
#
#   scripts/compat_test.sh [STACK]            build (or reuse) the root, run the suites
#   scripts/compat_test.sh [STACK] --root     build (or reuse) the root only
#   scripts/compat_test.sh [STACK] --run CMD  run CMD there, in the checkout's copy
#   scripts/compat_test.sh [STACK] --extorch  only the ExTorch stage (make extorch-test:
#                                             trixie), in the root made before;
#                                             skipped, saying why, where there is none
#
# STACK is trixie (the default) or forky.
#
# COMPAT_DIR     where the roots and their build products live (default
#                build/compat: ignored by git, kept between runs)
# COMPAT_MIRROR  the Debian mirror (default http://deb.debian.org/debian)
# NX_SOURCES     the folder of Nx/Torchx source archives (default: as
#                scripts/build_nx.sh --sources finds it)
#
# A root is made once and reused while its package list is unchanged. The
# checkout's files (tracked and untracked, not ignored ones) are copied into
# it, so the host's _build/, build/ and priv/*.so are never touched, and the
# root's build products stay there between runs. Everything runs in a mount
# namespace of its own: the mounts it makes are undone on exit (a trap), and
# vanish with the namespace even if the script is killed.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
compat_dir="${COMPAT_DIR:-$repo/build/compat}"
mirror="${COMPAT_MIRROR:-http://deb.debian.org/debian}"
third_party="$("$repo/scripts/build_nx.sh" --sources)"
all_args=("$@")
stack=trixie
case "${1:-}" in
  trixie | forky) stack="$1"; shift ;;
esac
root="$compat_dir/$stack"
mode="${1:-all}"

# What the suites need there. Changing a list updates its root.
packages=(
  build-essential cmake
  erlang-dev erlang-nox erlang-eunit erlang-proper erlang-tools
  elixir rebar3
  libtorch-dev python3-torch
  # Safetensors files: the reference implementation, for the file door's
  # compat tests.
  python3-safetensors
)
# Python in the VM (Pythonx): libpython and NumPy, on both.
packages+=(python3-numpy libpython3-dev)
case "$stack" in
  trixie)
    stack_name="Debian 13"
    # debootstrap's script for the suite, and apt's options.
    bootstrap_script=
    apt_options=()
    # The ExTorch stage (scripts/build_extorch.sh), here because ExTorch
    # does not build against libtorch 2.14: Rust and the crates ExTorch's
    # NIF needs, all from Debian (cargo reads them as a directory source,
    # offline).
    packages+=(
      cargo rustc librust-cxx-dev librust-cxx-build-dev librust-cxxbridge-macro-dev
      librust-tera-dev librust-rustc-hash-2-dev librust-rustc-hash-dev librust-glob-dev
      librust-prettyplease-dev librust-syn-dev librust-lazy-static-dev librust-libc-dev
      librust-inventory-dev librust-libloading-dev librust-regex-lite-dev librust-heck-dev
      librust-quote-dev librust-proc-macro2-dev librust-link-cplusplus-dev
    )
    ;;
  forky)
    stack_name="Debian testing"
    # Debian 12's debootstrap has no script of its own for forky: sid's
    # makes testing too.
    bootstrap_script=/usr/share/debootstrap/scripts/sid
    # Testing's Release file may be read after its Valid-Until date on a
    # machine whose mirror copy is not refreshed daily.
    apt_options=(-o Acquire::Check-Valid-Until=false)
    ;;
esac

log() { printf '==> compat-test (%s): %s\n' "$stack_name" "$*"; }

if [ "$mode" = --extorch ]; then
  why=""
  [ -f "$root/.tb-debootstrap" ] || why="no $stack_name root in $root (make compat-test or newest-test makes it)"
  [ "$(id -u)" -eq 0 ] || why="needs root (chroot, mount)"
  if [ -n "$why" ]; then
    log "ExTorch stage skipped: $why"
    exit 0
  fi
fi

[ "$(id -u)" -eq 0 ] || { echo "compat-test: needs root (debootstrap, chroot, mount)" >&2; exit 1; }

# A private mount namespace: nothing mounted here is seen outside, and all
# of it goes when the last process in it exits.
if [ -z "${TB_COMPAT_NS:-}" ]; then
  TB_COMPAT_NS=1 exec unshare --mount --propagation private "$0" "${all_args[@]}"
fi

mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" || true
  done
  mounted=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# mount_at TARGET MOUNT-ARGS...: mounts, and remembers TARGET for cleanup.
mount_at() {
  local target="$1"
  shift
  mount "$@" "$target"
  mounted+=("$target")
}

# /dev is a tmpfs of the root's own with the few device files bound in
# (never the host's /dev itself, so removing the root can never reach it),
# and /dev/shm a private tmpfs for the IPC tests.
mount_root() {
  mount_at "$root/proc" -t proc proc
  mount_at "$root/sys" -t sysfs -o ro sysfs
  mount_at "$root/dev" -t tmpfs -o mode=755,size=1m tb-dev
  local d
  for d in null zero full random urandom tty; do
    touch "$root/dev/$d"
    mount_at "$root/dev/$d" --bind "/dev/$d"
  done
  mkdir -p "$root/dev/shm" "$root/dev/pts"
  mount_at "$root/dev/shm" -t tmpfs -o mode=1777,size=4g tb-shm
  ln -sf /proc/self/fd "$root/dev/fd"
  cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
}

in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 LC_ALL=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"
}

ensure_root() {
  local want
  want="$(printf '%s\n' "${packages[@]}")"
  if [ -f "$root/.tb-packages" ] && [ "$(cat "$root/.tb-packages")" = "$want" ]; then
    log "reusing the root in $root"
    mount_root
    return
  fi
  if [ ! -f "$root/.tb-debootstrap" ]; then
    command -v debootstrap >/dev/null || {
      log "installing debootstrap"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap \
        || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap; }
    }
    log "debootstrap --variant=minbase $stack $root"
    rm -rf "$root"
    mkdir -p "$compat_dir"
    debootstrap --variant=minbase "$stack" "$root" "$mirror" ${bootstrap_script:+"$bootstrap_script"}
    touch "$root/.tb-debootstrap"
  fi
  mount_root
  log "apt-get install ${packages[*]}"
  in_root apt-get "${apt_options[@]}" update -q
  in_root apt-get "${apt_options[@]}" install -y -q --no-install-recommends "${packages[@]}"
  in_root apt-get clean
  printf '%s\n' "$want" >"$root/.tb-packages"
}

# The checkout's files, tracked and untracked but not ignored, into
# /work/tensor_blob there. Build products made there (_build/, build/,
# priv/*.so, examples' builds) are ignored files, so they stay between runs.
copy_tree() {
  local dest="$root/work/tensor_blob" list stage f
  mkdir -p "$dest"
  list="$(mktemp)"
  (cd "$repo" && git -c safe.directory='*' ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' f; do if [ -f "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi; done) >"$list"
  # Drop the previous copy's sources that are gone from the checkout.
  if [ -f "$dest/.tb-files" ]; then
    (cd "$dest" && tr '\n' '\0' <.tb-files | while IFS= read -r -d '' f; do
      grep -qxF -- "$f" <(tr '\0' '\n' <"$list") || rm -f -- "$f"
    done)
  fi
  # Unpacked beside the copy, then moved in only where the content
  # changed, stamped now: a file that changed is newer than every build
  # product made from its old content (the checkout's own time may be
  # older), and one that did not change rebuilds nothing.
  stage="$(mktemp -d "$root/work/.tb-stage.XXXXXX")"
  (cd "$repo" && tar --null -T "$list" -cf -) | tar -C "$stage" -xf -
  while IFS= read -r -d '' f; do
    if ! cmp -s -- "$stage/$f" "$dest/$f"; then
      mkdir -p -- "$(dirname -- "$dest/$f")"
      rm -f -- "$dest/$f"
      mv -- "$stage/$f" "$dest/$f"
      touch -h -- "$dest/$f"
    fi
  done <"$list"
  rm -rf "$stage"
  tr '\0' '\n' <"$list" >"$dest/.tb-files"
  rm -f "$list"
  mkdir -p "$root/work/third_party"
  cp -u "$third_party"/*.tar.gz "$root/work/third_party/"
}

ensure_root
if [ "$mode" = "--root" ]; then
  exit 0
fi
copy_tree
if [ "$mode" = "--extorch" ]; then
  in_root /bin/bash /work/tensor_blob/scripts/compat_extorch.sh
  exit
fi
if [ "$mode" = "--run" ]; then
  in_root /bin/bash -c "cd /work/tensor_blob && $2"
  exit
fi
log "running the suites on $(in_root sh -c '. /etc/os-release; echo "$PRETTY_NAME"')"
in_root /bin/bash /work/tensor_blob/scripts/compat_inner.sh "$stack"
