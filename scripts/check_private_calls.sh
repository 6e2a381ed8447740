#!/bin/sh
# Fails when the Elixir facade (lib/**/*.ex) names a private module of
# src/ (one whose header says @private): the facade calls the Erlang API
# alone (tensor_blob, tensor_blob_ipc, tensor_blob_options,
# tensor_blob_door, tensor_blob_python, tensor_blob_safetensors), which owns
# every decision (ARCHITECTURE.md, "Doors"). A call, a capture or an
# apply/3 all name the module as an atom, :tensor_blob_x; comments are
# skipped.
cd "$(dirname "$0")/.." || exit 2

# Calls not yet moved to the Erlang API: "file module" per line. Each is
# a debt, to be removed with the change that moves the call.
allowed='
'

private=$(for f in src/*.erl; do
    awk '/^-module\(/ { exit } /^%%.*@private/ { found = 1 } END { exit !found }' "$f" && basename "$f" .erl
done)
status=0
for m in $private; do
    for hit in $(grep -rnE --include='*.ex' "^[^#]*:$m([^a-z0-9_]|$)" lib | cut -d: -f1,2); do
        file=${hit%%:*}
        if printf '%s\n' "$allowed" | grep -qx "$file $m"; then continue; fi
        echo "check_private_calls: $hit names the private module $m: call the Erlang API (tensor_blob, tensor_blob_ipc, tensor_blob_options, tensor_blob_door, tensor_blob_python, tensor_blob_safetensors)" >&2
        status=1
    done
done
[ $status = 0 ] && echo "check_private_calls: $(echo $private | wc -w) private modules, no call from lib/ outside the allowed list, ok"
exit $status
