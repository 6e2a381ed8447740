#!/usr/bin/env python3
"""The NIF stubs of src/tensor_blob_nif.erl, from the list of NIFs in
c_src/beam/tb_nifs.h (X(Name, Arity, C function, flags)): the export and one
stub a NIF, between the two marker lines of the module.

  scripts/gen_nifs.py           rewrites them
  scripts/gen_nifs.py --check   fails (exit 1) when they are out of date

The C side needs no generator: the function table and the prototypes are
the same list, expanded by the preprocessor."""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
LIST = "c_src/beam/tb_nifs.h"
STUBS = "src/tensor_blob_nif.erl"
BEGIN = "%% The NIFs of c_src/beam/tb_nifs.h, written by scripts/gen_nifs.py: edit the list, not these lines."
END = "%% End of the NIFs of c_src/beam/tb_nifs.h."


def nifs():
    text = open(os.path.join(ROOT, LIST)).read()
    body = text[text.index("#define TB_NIFS(X)"):]
    body = body[:body.index("\n\n")]
    body = re.sub(r"/\*.*?\*/", " ", body, flags=re.S)
    found = re.findall(r"\bX\(\s*(\w+)\s*,\s*(\d+)\s*,\s*(\w+)\s*,\s*([^)]*?)\s*\)", body)
    if not found:
        sys.exit(f"gen_nifs: no X(Name, Arity, Function, Flags) in {LIST}")
    names = [(n, int(a)) for n, a, _, _ in found]
    if len(set(names)) != len(names):
        sys.exit(f"gen_nifs: a NIF is listed twice in {LIST}")
    return names


def block(names):
    lines = [BEGIN, "-export(["]
    lines += [f"    {n}/{a}{',' if i < len(names) - 1 else ''}" for i, (n, a) in enumerate(names)]
    lines += ["]).", ""]
    lines += [f"{n}({', '.join(['_'] * a)}) -> ?NOT_LOADED." for n, a in names]
    lines.append(END)
    return "\n".join(lines)


def main():
    path = os.path.join(ROOT, STUBS)
    text = open(path).read()
    if BEGIN not in text or END not in text:
        sys.exit(f"gen_nifs: {STUBS} lacks the marker lines:\n{BEGIN}\n{END}")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    new = text[:start] + block(nifs()) + text[end:]
    if "--check" in sys.argv[1:]:
        if new != text:
            print(f"gen_nifs: {STUBS} is out of date with {LIST}: run scripts/gen_nifs.py")
            sys.exit(1)
        print(f"gen_nifs: {STUBS} matches {LIST}")
        return
    if new != text:
        open(path, "w").write(new)


main()
