#!/usr/bin/env bash
# Source checks over c_src, run by `make test` (the layers of c_src, every
# include and call, are checked from the compiler's output:
# scripts/check_layers.py):
#  2. No code tests a term that enif_raise_exception returned (it is 0 in a
#     normal emulator, so such a test never fires): errors travel as an int
#     result and an out-parameter, and the term is returned at once.
#  3. A raise's argument (tb_raise.h) is the argument its message names
#     first: a message that begins with a literal "word: " is raised with the
#     argument "word", or with NULL (none) when word names a call or a
#     concern, not an argument (NOT_ARGUMENTS below).
#  4. The list of NIFs (c_src/beam/tb_nifs.h) says where each NIF is and how
#     it runs: each row sits under a comment that names the file defining
#     its C function, `(folder/tb_x.c)`, and that file defines it; every
#     tb_nif_ function of c_src is listed; a NIF flagged TB_MAY_GO_DIRTY
#     reaches enif_schedule_nif (itself or through the functions it calls),
#     and a NIF flagged 0 does not.
#  5. No NIF calls a NIF: no function calls a tb_nif_ function but itself
#     (what two NIFs share is a C function of a lower layer, called with C
#     arguments).
#  7. No function pointer is made from an integer: the Python door binds the
#     interpreter's C API by name (dlsym), so no address an Erlang caller
#     passes can become a call target.
set -euo pipefail
cd "$(dirname "$0")/.."
# Every check runs, whichever fails first.
status=0

python3 - <<'PY' || status=1
import os, re, sys

src = "c_src"
files = sorted(os.path.relpath(os.path.join(d, f), src)
               for d, _, fs in os.walk(src) for f in fs if f.endswith((".c", ".h", ".cpp")))
failed = False

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
# The argument beside the message.
NOT_ARGUMENTS = {"ipc", "safetensors", "cuda", "dlpack", "to_dlpack", "from_dlpack", "from_blob", "to_binary", "from_binary"}
raises = 0
for f, t in text.items():
    for m in re.finditer(r'tb_raise_(?:badarg|error)\(\s*env,\s*([^,]+?),\s*([^,]+?),\s*"(?:([a-z_]+): )?', t):
        raises += 1
        argument, word = m.group(2).strip(), m.group(3)
        if word is None:
            continue
        expected = "NULL" if word in NOT_ARGUMENTS else '"%s"' % word
        if argument != expected:
            line = t[:m.start()].count("\n") + 1
            print(f"check_c: {src}/{f}:{line}: the message begins with '{word}: ', so its argument is {expected}, not {argument}")
            failed = True

print("check_c: %d raises, %d raising functions, %s" % (raises, len(raisers), "FAILED" if failed else "ok"))
sys.exit(1 if failed else 0)
PY

python3 - <<'PY' || status=1
import os, re, sys

src = "c_src"
LIST = os.path.join(src, "beam", "tb_nifs.h")
files = sorted(os.path.relpath(os.path.join(d, f), src)
               for d, _, fs in os.walk(src) for f in fs if f.endswith(".c"))
text = {f: open(os.path.join(src, f)).read() for f in files}
failed = False

# Every function of c_src with its body, by file: (file, name) -> body.
bodies = {}
for f, t in text.items():
    for m in re.finditer(r'^(static\s+)?[A-Za-z_][\w \t\*]*?\b(\w+)\s*\([^;{}]*\)\s*\{(.*?)^\}', t, re.S | re.M):
        bodies[(f, m.group(2))] = (bool(m.group(1)), m.group(3))
globals_ = {name: f for (f, name), (static, _) in bodies.items() if not static}

def callees(f, body):
    for name in set(re.findall(r'\b(\w+)\s*\(', body)):
        if (f, name) in bodies:
            yield (f, name)
        elif name in globals_:
            yield (globals_[name], name)

# The functions that reschedule (enif_schedule_nif), directly or not.
moves = set()
changed = True
while changed:
    changed = False
    for key, (_, body) in bodies.items():
        if key not in moves and (re.search(r'\benif_schedule_nif\s*\(', body) or
                                 any(c in moves for c in callees(key[0], body) if c != key)):
            moves.add(key)
            changed = True

lines = open(LIST).read().split("\n")
start = next(i for i, l in enumerate(lines) if l.startswith("#define TB_NIFS(X)"))
where = None
listed = set()
for n, line in enumerate(lines[start + 1:], start + 2):
    if not line.strip():
        break
    row = re.search(r'\bX\(\s*(\w+)\s*,\s*(\d+)\s*,\s*(\w+)\s*,\s*(\w+)\s*\)', line)
    named = re.search(r'\(((?:\w+/)?tb_\w+\.c)\)', line)
    if named and not row:
        where = named.group(1)
        if where not in text:
            print(f"check_c: {LIST}:{n}: names {where}, which is no file of {src}")
            failed = True
        continue
    if not row:
        continue
    name, arity, fun, flags = row.groups()
    listed.add(fun)
    if where is None:
        print(f"check_c: {LIST}:{n}: {name}/{arity} is under no comment naming its file")
        failed = True
        continue
    if (where, fun) not in bodies:
        defined = [f for (f, g) in bodies if g == fun]
        print(f"check_c: {LIST}:{n}: {name}/{arity} is listed under {where}, but {fun} is defined in "
              f"{', '.join(defined) or 'no file'}")
        failed = True
        continue
    moving = (where, fun) in moves
    if flags == "TB_MAY_GO_DIRTY" and not moving:
        print(f"check_c: {LIST}:{n}: {name}/{arity} is flagged TB_MAY_GO_DIRTY, but never reschedules")
        failed = True
    if flags == "TB_SHORT" and moving:
        print(f"check_c: {LIST}:{n}: {name}/{arity} reschedules itself (enif_schedule_nif), so its flag is "
              f"TB_MAY_GO_DIRTY, not TB_SHORT")
        failed = True
for (f, fun) in sorted(bodies):
    if fun.startswith("tb_nif_") and fun not in listed and not bodies[(f, fun)][0]:
        print(f"check_c: {src}/{f}: {fun} is a NIF function in no row of {LIST}")
        failed = True
print("check_c: %d NIFs, each in the file its list names, %s" % (len(listed), "FAILED" if failed else "ok"))
sys.exit(1 if failed else 0)
PY

python3 - <<'PY' || status=1
import os, re, sys

src = "c_src"
files = sorted(os.path.relpath(os.path.join(d, f), src)
               for d, _, fs in os.walk(src) for f in fs if f.endswith(".c"))
text = {f: open(os.path.join(src, f)).read() for f in files}
line_of = lambda t, i: t[:i].count("\n") + 1
failed = False

# Functions with their bodies.
functions = []
for f, t in text.items():
    for m in re.finditer(r'^(static\s+)?[A-Za-z_][\w \t\*]*?\b(\w+)\s*\([^;{}]*\)\s*\{(.*?)^\}', t, re.S | re.M):
        functions.append((f, m.group(2), m.start(3), m.group(3)))

nifs = 0
for f, name, start, body in functions:
    for c in re.finditer(r'\b(\w+)\s*\(', body):
        callee = c.group(1)
        if callee.startswith("tb_nif_") and callee != name:
            nifs += 1
            print(f"check_c: {src}/{f}:{line_of(text[f], start + c.start())}: {name} calls the NIF {callee}: "
                  f"no NIF calls a NIF (share a C function of a lower layer, called with C arguments)")
            failed = True

# A cast to a function pointer type of an integer (an address from a term).
made = 0
for f, t in text.items():
    for m in re.finditer(r'\(\s*\*\s*\)\s*\((?:[^()]|\([^()]*\))*\)\s*\)\s*\(\s*(?:uintptr_t|intptr_t|uint64_t|'
                         r'ErlNifUInt64|ErlNifSInt64|unsigned long|long)\s*\)', t):
        made += 1
        print(f"check_c: {src}/{f}:{line_of(t, m.start())}: a function pointer made from an integer: "
              f"bind functions by name (dlsym), never by an address from a term")
        failed = True

print("check_c: %d functions, no NIF calling a NIF, no function pointer from an integer: %s"
      % (len(functions), "FAILED" if failed else "ok"))
sys.exit(1 if failed else 0)
PY
exit $status
