#!/bin/sh
# Fails when a module of the Erlang API (src/*.erl) or of the Elixir facade
# (lib/**/*.ex) is over MAX_LINES lines (default 600): a module that long
# holds more than one concern, and its concerns get modules of their own
# (ARCHITECTURE.md).
max=${MAX_LINES:-600}
cd "$(dirname "$0")/.." || exit 2
status=0
for f in $(find src -name '*.erl'; find lib -name '*.ex'); do
    n=$(wc -l < "$f")
    if [ "$n" -gt "$max" ]; then
        echo "check_module_size: $f has $n lines, over $max: move a concern into a module of its own" >&2
        status=1
    fi
done
exit $status
