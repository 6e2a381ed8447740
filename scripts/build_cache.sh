#!/bin/sh
# build_cache.sh OUT KEY -- COMMAND...
#
# Runs COMMAND (a compile or a link that writes OUT, and OUT's .d where it
# has -MMD), unless the object cache already holds what the same command
# made from the same inputs: then that copy is put at OUT instead. So a
# second MIX_ENV, a second consumer of the library or a Mix.install
# compiles nothing that an earlier build of the same configuration made.
#
# What an entry is keyed by (a SHA-256 of all of it): KEY (the Makefile's
# part: the compilers' versions, the contents of every header of c_src and
# priv/include, the identity of libtorch's headers and library), and
# COMMAND's words, where OUT stands as a placeholder and every word that
# names a file (the source, the objects of a link) stands as the hash of
# that file's contents. So a changed source, header, flag, compiler or
# libtorch makes another key, and an old object is never reused for it.
# The objects are built with -fdebug-prefix-map=CHECKOUT=. (no checkout path
# in them): they are the same wherever the checkout is, and that word's
# path is left out of the key.
#
# Where: TENSOR_BLOB_CACHE_DIR, else $XDG_CACHE_HOME/tensor_blob, else
# ~/.cache/tensor_blob. TENSOR_BLOB_CACHE=0 turns the cache off. A cache
# that cannot be written is passed over (the build goes on without it).
# Entries are written to a temporary file and renamed into place, so builds
# running at once never see half an entry. Entries unused for 30 days are
# removed (looked for once a day).
#
# Quiet: the command is printed when it fails, or always with V=1 or
# TB_VERBOSE=1 (which also prints "cached: OUT" for what the cache gave).
set -u

out=$1
key=$2
shift 2
[ "${1:-}" = -- ] && shift

verbose=
case "${V:-}${TB_VERBOSE:-}" in *1*) verbose=1 ;; esac

run() {
    [ -n "$verbose" ] && printf '%s\n' "$*"
    "$@"
    status=$?
    if [ "$status" -ne 0 ]; then
        [ -n "$verbose" ] || printf '%s\n' "$*" >&2
        exit "$status"
    fi
}

dep=
for word in "$@"; do
    case "$word" in -MMD | -MD) dep="${out%.*}.d" ;; esac
done

if [ -n "${TENSOR_BLOB_CACHE_DIR:-}" ]; then
    dir=$TENSOR_BLOB_CACHE_DIR
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
    dir=$XDG_CACHE_HOME/tensor_blob
elif [ -n "${HOME:-}" ]; then
    dir=$HOME/.cache/tensor_blob
else
    dir=
fi
if [ "${TENSOR_BLOB_CACHE:-1}" = 0 ] || [ -z "$dir" ]; then
    run "$@"
    exit 0
fi

hash=$(
    {
        printf 'tensor_blob build cache v1\n%s\n' "$key"
        for word in "$@"; do
            if [ "$word" = "$out" ]; then
                printf '@OUT@\n'
            elif [ -n "$dep" ] && [ "$word" = "$dep" ]; then
                printf '@DEP@\n'
            elif [ "${word#-fdebug-prefix-map=}" != "$word" ]; then
                # The checkout's path, mapped away: not part of the key.
                printf -- '-fdebug-prefix-map\n'
            elif [ -f "$word" ]; then
                printf 'file '
                sha256sum <"$word"
            else
                printf '%s\n' "$word"
            fi
        done
    } | sha256sum | cut -c1-40
)
entry=$dir/$hash

# A hit: the product (and the dependency file, its target renamed to OUT),
# each written beside its place and renamed into it.
if [ -f "$entry.out" ] && { [ -z "$dep" ] || [ -f "$entry.d" ]; }; then
    if mkdir -p "$(dirname "$out")" && cp "$entry.out" "$out.tmp.$$" && mv -f "$out.tmp.$$" "$out" &&
        { [ -z "$dep" ] || { { printf '%s:' "$out" && cat "$entry.d"; } >"$dep.tmp.$$" && mv -f "$dep.tmp.$$" "$dep"; }; }; then
        touch "$entry.out" 2>/dev/null
        [ -n "$verbose" ] && printf 'cached: %s\n' "$out"
        exit 0
    fi
    rm -f "$out.tmp.$$" "$dep.tmp.$$"
fi

run "$@"

# Store: the dependency file first (without its target), then the product,
# whose presence makes the entry whole.
store() {
    mkdir -p "$dir" 2>/dev/null || return 1
    if [ -n "$dep" ]; then
        tmp=$(mktemp "$dir/.tmp.XXXXXX" 2>/dev/null) || return 1
        if ! { sed '1s/^[^:]*://' "$dep" >"$tmp" && mv -f "$tmp" "$entry.d"; }; then
            rm -f "$tmp"
            return 1
        fi
    fi
    tmp=$(mktemp "$dir/.tmp.XXXXXX" 2>/dev/null) || return 1
    mode=644
    [ -x "$out" ] && mode=755
    if ! { cp "$out" "$tmp" && chmod "$mode" "$tmp" && mv -f "$tmp" "$entry.out"; }; then
        rm -f "$tmp"
        return 1
    fi
    if [ ! -e "$dir/.pruned" ] || [ -n "$(find "$dir/.pruned" -mmin +1440 2>/dev/null)" ]; then
        touch "$dir/.pruned"
        find "$dir" -maxdepth 1 -type f \( -name '*.out' -mtime +30 -o -name '.tmp.*' -mmin +1440 \) \
            -exec rm -f {} + 2>/dev/null
        for d in "$dir"/*.d; do
            [ -e "$d" ] && [ ! -e "${d%.d}.out" ] && [ -n "$(find "$d" -mmin +1440)" ] && rm -f "$d"
        done
    fi
    return 0
}
store 2>/dev/null
exit 0
