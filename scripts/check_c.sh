#!/usr/bin/env bash
# Source checks over c_src, run by `make test`:
#  1. No include circle: the files form layers (see the top of tb_nif.c).
#  2. No code tests a term that enif_raise_exception returned (it is 0 in a
#     normal emulator, so such a test never fires): errors travel as an int
#     result and an out-parameter, and the term is returned at once.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 - <<'PY'
import os, re, sys

src = "c_src"
files = sorted(f for f in os.listdir(src) if f.endswith((".c", ".h", ".cpp")))
unit = lambda f: os.path.splitext(f)[0]
# A unit is a .c/.h pair; it depends on the units whose headers it includes.
deps = {}
for f in files:
    for line in open(os.path.join(src, f)):
        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if m and os.path.exists(os.path.join(src, m.group(1))) and unit(m.group(1)) != unit(f):
            deps.setdefault(unit(f), set()).add(unit(m.group(1)))

failed = False
state = {}
def visit(u, path):
    global failed
    state[u] = "open"
    for d in sorted(deps.get(u, ())):
        if state.get(d) == "open":
            print("check_c: include circle: " + " -> ".join(path[path.index(d):] + [d]))
            failed = True
        elif d not in state:
            visit(d, path + [d])
    state[u] = "done"
for u in sorted(deps):
    if u not in state:
        visit(u, [u])

# Functions that return the term of enif_raise_exception.
raisers = {"enif_raise_exception"}
text = {f: open(os.path.join(src, f)).read() for f in files}
changed = True
while changed:
    changed = False
    for f, t in text.items():
        for m in re.finditer(r'ERL_NIF_TERM\s+(\w+)\s*\([^;{]*\)\s*\{(.*?)\n\}', t, re.S):
            name, body = m.group(1), m.group(2)
            # It may return a raised term when it calls one that does.
            if name not in raisers and any(re.search(r'\b' + r + r'\s*\(', body) for r in raisers):
                raisers.add(name)
                changed = True
for f, t in text.items():
    # A variable assigned from a raiser, then tested.
    for m in re.finditer(r'(\w+)\s*=\s*(\w+)\s*\(', t):
        var, fn = m.groups()
        if fn in raisers and re.search(r'if\s*\(\s*!?\s*' + var + r'\s*\)', t[m.end():m.end() + 600]):
            line = t[:m.start()].count("\n") + 1
            print(f"check_c: {src}/{f}:{line}: '{var}' holds the result of {fn} (it raises) and is tested later")
            failed = True
    for r in raisers:
        for m in re.finditer(r'if\s*\(\s*!?\s*' + r + r'\s*\(', t):
            line = t[:m.start()].count("\n") + 1
            print(f"check_c: {src}/{f}:{line}: the result of {r} (it raises) is tested")
            failed = True
    for m in re.finditer(r'if\s*\(\s*!?\s*exc\s*\)', t):
        line = t[:m.start()].count("\n") + 1
        print(f"check_c: {src}/{f}:{line}: an exception term is tested")
        failed = True
print("check_c: %d files, %d raising functions, %s" % (len(files), len(raisers), "FAILED" if failed else "ok"))
sys.exit(1 if failed else 0)
PY
