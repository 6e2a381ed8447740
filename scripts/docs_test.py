"""The Python side of scripts/docs_test.exs, run as the start-up script of
an interactive interpreter: `python3 -q -i docs_test.py FILE`. The python
blocks of one Markdown file are written to that interpreter's standard
input as they are, in order, as a user pastes them into one `python3`
session: what does not paste (a line right after an indented block with
no blank line between) fails as it would there.

After each piece of a block, docs_test.exs writes `__docs_mark__(N)`, and
reads what the interpreter said up to the mark. The hooks below frame
what it needs in that output, between \\x01 and \\x02:

    \\x01value REPR\\x02        the value of an expression statement, as the
                              interpreter shows it (its repr)
    \\x01error TYPE: MSG\\x02   an exception the interpreter reported (the
                              traceback follows, for the failure message)
    \\x01mark N\\x02            everything before it belongs to piece N

Anything else (what the code prints) is left as it is.
"""

import base64
import code
import sys
import traceback

FILE = sys.argv[1] if len(sys.argv) > 1 else "<docs>"
sys.ps1 = ""
sys.ps2 = ""


def __docs_write(text, sys=sys):
    sys.stdout.write(text)
    sys.stdout.flush()


def __docs_displayhook(value, write=__docs_write):
    if value is None:
        return
    import builtins

    builtins._ = value
    write("\x01value %s\x02\n" % repr(value))


def __docs_excepthook(kind, value, tb, write=__docs_write, traceback=traceback):
    write("\x01error %s: %s\x02\n" % (kind.__name__, value))
    write("".join(traceback.format_exception(kind, value, tb)))


sys.displayhook = __docs_displayhook
sys.excepthook = __docs_excepthook


def __docs_mark__(n, write=__docs_write):
    write("\x01mark %d\x02\n" % n)


def __docs_has_torch__():
    try:
        import torch  # noqa: F401

        return True
    except ImportError:
        return False


class __DocsParser(code.InteractiveConsole):
    """Compiles lines as the interactive interpreter does, running none."""

    def runcode(self, _code):
        pass

    def showsyntaxerror(self, filename=None, **kwargs):
        raise sys.exc_info()[1]


def __docs_parse__(encoded, parser_class=__DocsParser, base64=base64):
    parser = parser_class()
    for line in base64.b64decode(encoded).decode().split("\n"):
        parser.push(line)
    parser.push("")


def __docs_quit__(sys=sys):
    # The session's tensors go before the BEAM node stops.
    import gc

    main = sys.modules["__main__"].__dict__
    for name in [n for n in main if not n.startswith("__")]:
        del main[name]
    gc.collect()
    raise SystemExit(0)
