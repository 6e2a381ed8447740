#!/bin/sh
# rebar3's compile hook (rebar.config): make builds the NIF library and the
# doc chunks for the application directory rebar3 builds (lib/tensor_blob,
# or checkouts/tensor_blob when a project has it in _checkouts): for a
# checkout used by another project everything is built there, never in the
# checkout; for this project itself, in build/ and priv/.
#
# As Mix's compiler does (mix.exs), make is not run when nothing it reads
# has changed since it last succeeded for this application directory and
# its products are in place: a make with nothing to do still takes seconds
# (it asks erl and the compilers for its configuration), this check a
# small fraction of that. Run from the checkout (rebar3 runs hooks there).
set -eu

app="$REBAR_BUILD_DIR/checkouts/tensor_blob"
[ -d "$app/ebin" ] || app="$REBAR_BUILD_DIR/lib/tensor_blob"
stamp="$app/.tensor_blob_nif"

# Everything make's result depends on, as text: the Erlang runtime rebar3
# runs, the settings make reads from the environment, the contents of the
# sources, headers, Makefile and scripts it builds with, and the libtorch it
# builds against (its version header's content, its libraries' sizes and
# times). The list is mix.exs's inputs/0.
inputs() {
    echo "erts=${ERLANG_ROOT_DIR:-} ${ERLANG_ERTS_VER:-} erl=${ERL:-} app=$app"
    for var in LIBTORCH_DIR TB_CUDA CUDA_HOME CC CXX OPT SANITIZE TENSOR_BLOB_CACHE TENSOR_BLOB_CACHE_DIR; do
        eval "echo \"$var=\${$var:-}\""
    done
    {
        find c_src priv/include -type f -exec cksum {} +
        cksum src/*.erl src/*.hrl Makefile scripts/build_cache.sh scripts/libtorch.sh scripts/doc_chunks.escript
    } | LC_ALL=C sort -k3
    case "${LIBTORCH_DIR:-}" in
        "" | /usr | /usr/) torch_include=/usr/include torch_libs="/usr/lib/*/libtorch.so*" ;;
        *) torch_include="$LIBTORCH_DIR/include" torch_libs="$LIBTORCH_DIR/lib/libtorch.*" ;;
    esac
    cksum "$torch_include/torch/headeronly/version.h" "$torch_include/torch/csrc/api/include/torch/version.h" 2>/dev/null \
        || echo "no version.h"
    # shellcheck disable=SC2086 # the pattern expands here
    for lib in $torch_libs; do
        if [ -e "$lib" ]; then ls -lL "$lib" | awk '{ print $5, $6, $7, $8, $9 }'; fi
    done
}

# make's products, where it puts them: for this project itself the library
# and the reaper in priv/; for a dependency in the application's priv,
# copies of what it built in obj/ (rebar3 may have copied the checkout's
# priv, and a library of the checkout's own build in it, over them).
products() {
    case "$(cd "$app" && pwd -P)/" in
        "$(pwd -P)"/_build/*) [ -f priv/tensor_blob_nif.so ] && [ -f priv/tensor_blob_reaper ] ;;
        *) cmp -s "$app/obj/tensor_blob_nif.so" "$app/priv/tensor_blob_nif.so" &&
            cmp -s "$app/obj/tensor_blob_reaper" "$app/priv/tensor_blob_reaper" ;;
    esac
}

now="$(inputs)"
if [ -n "${ERLANG_ERTS_VER:-}" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$now" ] && products; then
    exit 0
fi
rm -f "$stamp"
make --no-print-directory nif install-docs APP_DIR="$app"
printf '%s\n' "$now" >"$stamp"
