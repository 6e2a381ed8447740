#!/usr/bin/env python3
"""The layers of c_src (c_src/LAYERS), read from the compiler, not from the
text: every #include the preprocessor takes (gcc/clang -E -dI, so comments,
strings and branches the build leaves out do not count) and every call or
address an object file leaves to another unit (nm: its undefined symbols
that another unit defines). A unit includes and calls only units of lower
lines of LAYERS; every file of c_src is in exactly one line, and each
folder is one band of lines, so the folders are layers too.

  check_layers.py --objects DIR [--reaper FILE.c] -- CC [FLAGS...] ++ CXX [FLAGS...]

DIR holds the build's objects (tb_x.o for c_src/*/tb_x.c, torch_shim.o);
FLAGS are the include and define flags of the build; files not built into
DIR (the reaper's program) are compiled here. After the check of the tree,
a planted upward include and a planted call across the layers must each
fail it: the check checks itself on every run.
"""
import os
import re
import subprocess
import sys
import tempfile

SRC = "c_src"
LINEMARKER = re.compile(r'^# (\d+) "([^"]*)"')
INCLUDE = re.compile(r'^#\s*include\s+[<"]([^>"]+)[>"]')


def files_of(src):
    return sorted(os.path.relpath(os.path.join(d, f), src)
                  for d, _, fs in os.walk(src) for f in fs if f.endswith((".c", ".h", ".cpp")))


def unit(path):
    return os.path.splitext(path)[0]


def read_layers(src, files):
    """unit -> line index (0 is the top), and the problems of the list.
    A "[folder] what it holds" line opens a folder's band; the units of the
    lines under it are named within that folder, so each folder is one band
    of layers and the folders stand in call order."""
    layer_of, problems, index, folder, seen = {}, [], 0, None, []
    units = {unit(f) for f in files}
    for n, line in enumerate(open(os.path.join(src, "LAYERS")), 1):
        line = line.split("#", 1)[0].split("|", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            folder = line[1:line.index("]")]
            if folder in seen:
                problems.append(f"{src}/LAYERS:{n}: the folder {folder} opens a second band")
            seen.append(folder)
            continue
        if folder is None:
            problems.append(f"{src}/LAYERS:{n}: a layer before any [folder] line")
            continue
        for name in line.split():
            u = f"{folder}/{name}"
            if u in layer_of:
                problems.append(f"{src}/LAYERS:{n}: {u} is listed twice")
            if u not in units:
                problems.append(f"{src}/LAYERS:{n}: {u} names no file of {src}")
            layer_of[u] = index
        index += 1
    for u in sorted(units - set(layer_of)):
        problems.append(f"{src}/{u} is in no layer of {src}/LAYERS")
    for d in sorted({u.split("/")[0] for u in units} - set(seen)):
        problems.append(f"{src}/{d} has no [{d}] band in {src}/LAYERS")
    return layer_of, index, problems


def includes(command, path, as_unit, headers):
    """(from unit, to unit, where) for each include of a c_src header the
    preprocessor takes while reading path."""
    out = subprocess.run(command + ["-E", "-dI", path], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"check_layers: preprocessing {path} failed:\n{out.stderr}")
    edges, current, line = [], None, 0
    for text in out.stdout.split("\n"):
        m = LINEMARKER.match(text)
        if m:
            current, line = m.group(2), int(m.group(1))
            continue
        m = INCLUDE.match(text)
        if m and current is not None:
            name = os.path.basename(m.group(1))
            source = as_unit(current)
            if source is not None and name in headers and unit(headers[name]) != source:
                edges.append((source, unit(headers[name]), f"{current}:{line}"))
        line += 1
    return edges


def symbols(obj, kinds="TDBRVWC"):
    """(defined, undefined) global symbols of an object file; defined:
    those of the nm kinds given (T: functions)."""
    out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for row in out.split("\n"):
        parts = row.split()
        if len(parts) >= 2 and parts[1] == "U":
            undefined.add(parts[0])
        elif len(parts) >= 2 and parts[1] in kinds:
            defined.add(parts[0])
    return defined, undefined


def calls(objects):
    """(from unit, to unit, symbol) for each symbol an object leaves to
    another unit's object. objects: unit -> object file."""
    table = {u: symbols(o) for u, o in objects.items()}
    owner = {s: u for u, (defined, _) in table.items() for s in defined}
    return [(u, owner[s], s) for u, (_, undefined) in table.items() for s in sorted(undefined)
            if s in owner and owner[s] != u]


def judge(edges, layer_of, what):
    problems = []
    for source, target, where in edges:
        if source in layer_of and target in layer_of and layer_of[target] <= layer_of[source]:
            side = "beside it" if layer_of[target] == layer_of[source] else "above it"
            problems.append(f"{where}: {source} {what} {target}, a unit {side} ({SRC}/LAYERS)")
    return problems


def compile_to(command, path, obj):
    out = subprocess.run(command + ["-c", path, "-o", obj], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"check_layers: compiling {path} failed:\n{out.stderr}")


def main(argv):
    args = argv[1:]
    objdir, reaper = None, []
    while args and args[0] != "--":
        if args[0] == "--objects":
            objdir, args = args[1], args[2:]
        elif args[0] == "--reaper":
            reaper, args = reaper + [args[1]], args[2:]
        else:
            sys.exit(__doc__)
    if objdir is None or not args:
        sys.exit(__doc__)
    rest = args[1:]
    cc = rest[:rest.index("++")] if "++" in rest else rest
    cxx = rest[rest.index("++") + 1:] if "++" in rest else None

    files = files_of(SRC)
    headers = {os.path.basename(f): f for f in files if f.endswith(".h")}
    layer_of, count, problems = read_layers(SRC, files)
    root = os.path.abspath(SRC)

    def as_unit(path):
        path = os.path.abspath(path)
        return unit(os.path.relpath(path, root)) if path.startswith(root + os.sep) else None

    def preprocess(f, path=None):
        path = path or os.path.join(SRC, f)
        if f.endswith(".cpp"):
            return includes(cxx, path, as_unit, headers) if cxx else []
        return includes(cc + (["-x", "c"] if f.endswith(".h") else []), path, as_unit, headers)

    include_edges = sorted({e for f in files for e in preprocess(f)})
    problems += judge(include_edges, layer_of, "includes")

    with tempfile.TemporaryDirectory() as tmp:
        objects = {}
        for f in files:
            if f.endswith((".c", ".cpp")):
                obj = os.path.join(objdir, os.path.basename(unit(f)) + ".o")
                if os.path.join(SRC, f) in reaper:
                    obj = os.path.join(tmp, os.path.basename(unit(f)) + ".o")
                    compile_to(cc, os.path.join(SRC, f), obj)
                if not os.path.exists(obj):
                    sys.exit(f"check_layers: {obj} is missing: build first (make nif)")
                objects[unit(f)] = obj
        call_edges = calls(objects)
        problems += judge([(a, b, f"{SRC}/{a}: {s}") for a, b, s in call_edges], layer_of, "calls")

        for p in problems:
            print(f"check_layers: {p}")
        print(f"check_layers: {len(files)} files in {count} layers, {len({(a, b) for a, b, _ in include_edges})} unit pairs including and "
              f"{len({(a, b) for a, b, _ in call_edges})} unit pairs calling (from the preprocessor and nm), "
              f"{'FAILED' if problems else 'ok'}")

        # The drawing by folder: each folder and the folders it reaches
        # (includes and calls), all below it when the check passes.
        reach = {}
        for a, b_, _ in include_edges + [(a, b_, s) for a, b_, s in call_edges]:
            if a.split("/")[0] != b_.split("/")[0]:
                reach.setdefault(a.split("/")[0], set()).add(b_.split("/")[0])
        folders = sorted({u.split("/")[0] for u in layer_of}, key=lambda d: min(layer_of[u] for u in layer_of if u.startswith(d + "/")))
        for d in folders:
            print(f"check_layers:   {d:<7} -> {' '.join(sorted(reach.get(d, ()), key=folders.index)) or '(nothing)'}")

        # The check checks itself: the lowest unit planted with an include of
        # the top unit's header, then with a call to the top unit.
        order = sorted((u for u in layer_of if os.path.exists(os.path.join(SRC, u + ".c"))), key=layer_of.get)
        top, bottom = order[0], order[-1]
        top_header = os.path.basename(top) + ".h"
        if top_header not in headers:
            top = next(u for u in order if os.path.basename(u) + ".h" in headers)
            top_header = os.path.basename(top) + ".h"
        planted = os.path.join(tmp, os.path.basename(bottom) + ".c")
        source = open(os.path.join(SRC, bottom + ".c")).read()
        with open(planted, "w") as out:
            out.write(f'#include "{top_header}"\n' + source)
        caught_include = judge([e for e in includes(cc + ["-I", os.path.dirname(os.path.join(SRC, bottom))],
                                                    planted, lambda p: bottom if p == planted else as_unit(p),
                                                    headers) if e[0] == bottom], layer_of, "includes")
        target = sorted(symbols(objects[top], "T")[0])[0]
        with open(planted, "w") as out:
            out.write(source + f"\nint {target}();\nint tb_planted_call(void);\n"
                      f"int tb_planted_call(void) {{ return {target}(); }}\n")
        planted_obj = os.path.join(tmp, "planted.o")
        compile_to(cc + ["-I", os.path.dirname(os.path.join(SRC, bottom)), "-w"], planted, planted_obj)
        caught_call = judge([(a, b, s) for a, b, s in calls(dict(objects, **{bottom: planted_obj})) if a == bottom],
                            layer_of, "calls")
        if not caught_include or not caught_call:
            print(f"check_layers: a planted {'include' if not caught_include else 'call'} of {top} in {bottom} "
                  f"passed the check: it reads nothing")
            return 1
        print(f"check_layers: a planted include and a planted call of {top} in {bottom} fail it, as they must")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
