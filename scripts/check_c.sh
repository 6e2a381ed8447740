#!/usr/bin/env bash
# Source checks over c_src, run by `make test`:
#  1. The files form the layers listed at the top of c_src/tb_nif.c: every
#     unit is listed, and includes only units of the layers below its own
#     (so no include circle either).
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

# The layers, top first, from the list at the top of tb_nif.c: a line
# "tb_a, tb_b,  description" names units; a trailing comma continues the
# list on the next line.
layer_of = {}
head = open(os.path.join(src, "tb_nif.c")).read().split("*/", 1)[0]
lines = head.split("Layers", 1)[1].splitlines()[1:]
layer, continued = 0, False
for line in lines:
    # Names stand three spaces after the "*"; descriptions further right.
    m = re.match(r"\s*\* {3}(?! )((?:(?:tb_\w+|tensor_blob_\w+|torch_shim),\s*)*(?:tb_\w+|tensor_blob_\w+|torch_shim)?,?)", line)
    names = re.findall(r"tb_\w+|tensor_blob_\w+|torch_shim", m.group(1)) if m else []
    if not names:
        continue
    for n in names:
        layer_of[n] = layer
    continued = m.group(1).rstrip().endswith(",")
    if not continued:
        layer += 1
for u in sorted({unit(f) for f in files} - set(layer_of)):
    print(f"check_c: {u} is in no layer of the list at the top of {src}/tb_nif.c")
    failed = True
for u in sorted(deps):
    for d in sorted(deps[u]):
        if u in layer_of and d in layer_of and layer_of[d] <= layer_of[u]:
            where = "beside it" if layer_of[d] == layer_of[u] else "above it"
            print(f"check_c: {u} includes {d}, a unit {where} (the layers at the top of {src}/tb_nif.c)")
            failed = True

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
print("check_c: %d files in %d layers, %d raising functions, %s" % (len(files), layer, len(raisers), "FAILED" if failed else "ok"))
sys.exit(1 if failed else 0)
PY
