"""The Python side of scripts/docs_test.exs: runs the python blocks of one
Markdown file in one namespace, in order, as one Python session would.

Requests and replies are packets (a 4-byte big-endian length, then the
bytes) on stdin and stdout. A request is four lines and the code:

    op            probe (does torch import?), parse, run, or quit (drop
                  the session's names, then exit)
    line          the block's first line in the file (for tracebacks)
    expect        none, value or raise
    text          what the block says the code gives (value: the repr of
                  the last line's value, "..." matching anything; raise:
                  "ExceptionName: message" the last line raises, a prefix)

A reply is "ok" or "fail\\n" and why. What the code prints is not part of
the protocol: it goes to stderr.
"""

import contextlib
import gc
import re
import struct
import sys
import traceback

FILE = sys.argv[1] if len(sys.argv) > 1 else "<docs>"
namespace = {"__name__": "__main__"}


def receive():
    header = sys.stdin.buffer.read(4)
    if len(header) < 4:
        return None
    (size,) = struct.unpack(">I", header)
    return sys.stdin.buffer.read(size).decode()


def send(text):
    data = text.encode()
    sys.stdout.buffer.write(struct.pack(">I", len(data)) + data)
    sys.stdout.buffer.flush()


def squash(text):
    return " ".join(text.split())


def matches(shown, expected):
    pattern = ".*".join(re.escape(part) for part in squash(expected).split("..."))
    return re.fullmatch(pattern, squash(shown)) is not None


def compiled(code, line, mode):
    # Padding puts the code at its line of the file in tracebacks.
    return compile("\n" * (line - 1) + code, FILE, mode)


def run(code, line, expect, text):
    lines = code.split("\n")
    if expect == "none":
        exec(compiled(code, line, "exec"), namespace)
        return "ok"
    # The last line is the expression (value) or statement (raise) that the
    # expectation is about; the lines before it run as usual.
    last = len(lines) - 1
    while last > 0 and not lines[last].strip():
        last -= 1
    exec(compiled("\n".join(lines[:last]), line, "exec"), namespace)
    if expect == "value":
        value = eval(compiled(lines[last].strip(), line + last, "eval"), namespace)
        if matches(repr(value), text):
            return "ok"
        return "fail\ngives %r, the block says %s" % (value, text)
    try:
        exec(compiled(lines[last].strip(), line + last, "exec"), namespace)
    except Exception as e:  # noqa: BLE001 - the block says which
        shown = "%s: %s" % (type(e).__name__, e)
        if squash(shown).startswith(squash(text)):
            return "ok"
        return "fail\nraises %s, the block says ** %s" % (shown, text)
    return "fail\nshould raise %s, but does not" % text


def main():
    while True:
        request = receive()
        if request is None:
            return
        op, line, expect, text, code = request.split("\n", 4)
        line = int(line)
        try:
            with contextlib.redirect_stdout(sys.stderr):
                if op == "quit":
                    # The session's tensors go before the BEAM node stops.
                    namespace.clear()
                    gc.collect()
                    reply = "ok"
                elif op == "probe":
                    try:
                        import torch  # noqa: F401

                        reply = "ok"
                    except ImportError:
                        reply = "fail\nno torch"
                elif op == "parse":
                    compiled(code, line, "exec")
                    reply = "ok"
                else:
                    reply = run(code, line, expect, text)
        except Exception:  # noqa: BLE001 - any failure is the block's
            reply = "fail\n" + traceback.format_exc()
        send(reply)
        if op == "quit":
            return


if __name__ == "__main__":
    main()
