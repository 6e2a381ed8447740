#!/usr/bin/env bash
# Runs the README's "A CUDA tensor to another OS process and back" as
# written: its Elixir block in OS process A (mix run), which starts its
# Erlang block as OS process B (erl) and then checks what B wrote. Needs a
# GPU and a CUDA libtorch (LIBTORCH_DIR); from the project's root.
set -euo pipefail
block() { # the code block of language $1 after the line matching $2
    awk -v lang="$1" -v start="$2" '
        index($0, start) { found = 1 }
        found && $0 == "```" lang { inside = 1; next }
        inside && $0 == "```" { exit }
        inside { print }' README.md
}
a=$(block elixir '**A CUDA tensor to another OS process and back.**')
b=$(block erlang '**A CUDA tensor to another OS process and back.**')
[ -n "$a" ] && [ -n "$b" ] || { echo "readme_cuda_example: the README's blocks were not found" >&2; exit 1; }
mix compile >/dev/null
B_CODE="$b" mix run -e "$a"'
{out, status} = System.cmd("erl", ["-noshell", "-pa", "_build/dev/lib/tensor_blob/ebin",
                                   "-eval", System.fetch_env!("B_CODE"), "-eval", "halt()."], stderr_to_stdout: true)
IO.write(out)
0 = status
<<0::size(1024 * 32), 1025.0::float-32-native, _::binary>> = Tensor.to_binary(handle.tensor)
IO.puts("readme_cuda_example: B opened the handle and wrote 1024 zeros into A'"'"'s device memory; A reads them")'
