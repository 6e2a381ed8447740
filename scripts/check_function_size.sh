#!/bin/sh
# Fails when a C function of c_src (c_src/*/*.c, and the shim's
# c_src/*/*.cpp) is over MAX_FUNCTION_LINES lines (default 60), from
# its signature line to its closing brace: a function that long does
# several things, and each gets a static function of its own, named for
# what it does. The extents are universal-ctags' (a parser of C and C++,
# whose end field is the closing brace's line), not a pattern over the
# text; a C++ lambda (ctags' __anon functions) counts in the function that
# holds it.
max=${MAX_FUNCTION_LINES:-60}
cd "$(dirname "$0")/.." || exit 2
ctags --version 2>/dev/null | grep -q 'Universal Ctags' ||
    { echo "check_function_size: needs universal-ctags (scripts/setup.sh installs it)" >&2; exit 2; }
ctags -x --_xformat='%F %n %{end} %N' --fields=+ne --kinds-C=f --kinds-C++=f c_src/*/*.c c_src/*/*.cpp |
    awk -v max="$max" '
        $4 ~ /^__anon/ { next }
        $3 !~ /^[0-9]+$/ { print "check_function_size: " $1 ":" $2 ": " $4 ": ctags gives no end line" > "/dev/stderr"; bad++; next }
        { n++; lines = $3 - $2 + 1 }
        lines > max { print "check_function_size: " $1 ":" $2 ": " $4 " has " lines " lines, over " max ": split it into functions that each do one thing" > "/dev/stderr"; bad++ }
        END { if (bad) exit 1; print "check_function_size: " n " functions, none over " max " lines, ok" }'
