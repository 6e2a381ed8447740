#!/usr/bin/env bash
# Checks over the facades (src/ and lib/), run by `make check-c`:
#  1. No code decides by reading text: an error carries its reason and
#     argument as data (c_src/beam/tb_raise.h), and code matches those,
#     never a message. So src/ and lib/ hold no text search or text-prefix
#     match (binary:match, string:find, re:run, <<"text", _/binary>>,
#     <<Head:N/binary, Tail/binary>>; =~, String.contains?,
#     String.starts_with?, Regex, "text" <> rest) but the uses listed in
#     ALLOWED below, each with why its text is no message of ours.
#  2. Every reason the facades raise or match (reason => R, reason := R,
#     reason: :r, badarg(R, ...), raise(Kind, R, ...), Message |>
#     badarg!(:r, ...), Message |> error!(:r, ...)) is a row of the reason
#     table, TB_REASONS in c_src/beam/tb_raise.h (tables/0 gives it).
#  3. lib/ raises ArgumentError and TensorBlob.Error only through
#     TensorBlob.Raise.badarg!/3 and error!/3, which give the reason and
#     argument.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 - <<'PY'
import os, re, sys

# (a text the line holds, why it is no error message of ours)
ALLOWED = [
    ('open(<<"/torch_", _/binary>>', "a region's name: PyTorch's names begin so"),
    ('open(<<"torch_", _/binary>>', "a region's name: PyTorch's names begin so"),
    ('re:run(Status, "^Uid:', "/proc/<pid>/status, read for the owner's uid"),
    ('string:find(Text, "libtorch")', "the dynamic loader's text, to say which library to install"),
    ('string:find(Text, "libc10")', "the dynamic loader's text, to say which library to install"),
    ('message =~ "deallocated"', "an Nx backend's own error (not ours), to say the tensor was freed"),
    ('defp complex(re, "-" <> im)', "a complex number's text, for Inspect"),
    ('Path.basename(path) =~ ~r/^libtorch_cpu', "a file mapped in /proc/self/maps, to count the libtorch_cpu loaded"),
]
# Files whose text matching reads data, not messages.
ALLOWED_FILES = {
    "src/tensor_blob_json.erl": "a JSON reader: its text is the JSON it reads",
}

ERLANG = [
    r'\bbinary:match(es)?\(', r'\bstring:(find|str|rstr|prefix)\(', r'\bre:run\(',
    r'<<"[^"]*"\s*,\s*\w*\s*/binary>>',            # <<"text", Rest/binary>>
    r'<<\w+:\w+/binary\s*,\s*\w+/binary>>',         # <<Head:N/binary, Tail/binary>>
]
ELIXIR = [
    r'=~', r'\bString\.(contains\?|starts_with\?|ends_with\?)\(', r'\bRegex\.', r':binary\.match(es)?\(',
    r':re\.run\(', r'"[^"]*"\s*<>\s*\w+\s*(->|,|\)|<-)',  # "text" <> rest, in a pattern
]

failed = False
def fail(msg):
    global failed
    print("check_errors: " + msg)
    failed = True

def sources():
    for top, exts in (("src", (".erl", ".hrl")), ("lib", (".ex",))):
        for d, _, fs in os.walk(top):
            for f in sorted(fs):
                if f.endswith(exts):
                    yield os.path.join(d, f)

used_allowed = set()
for path in sources():
    if path in ALLOWED_FILES:
        continue
    patterns = ERLANG if path.endswith((".erl", ".hrl")) else ELIXIR
    comment = "%" if path.endswith((".erl", ".hrl")) else "#"
    for n, line in enumerate(open(path), 1):
        code = line.split(comment, 1)[0] if not line.lstrip().startswith(('"', "'")) else line
        if not any(re.search(p, code) for p in patterns):
            continue
        allowed = [a for a, _ in ALLOWED if a in line]
        if allowed:
            used_allowed.update(allowed)
            continue
        fail(f"{path}:{n}: matches text: decide on an error's reason and argument, not its message "
             f"(or add the use to ALLOWED in scripts/check_errors.sh, saying why the text is no message): "
             f"{line.strip()}")
for a, _ in ALLOWED:
    if a not in used_allowed:
        fail(f"ALLOWED holds {a!r}, which no file of src/ or lib/ has any more: remove it")

# The reason table.
table = open("c_src/beam/tb_raise.h").read()
reasons = set(re.findall(r'^\s*X\(\w+,\s*(\w+)\)', table, re.M))
if not reasons:
    fail("no reason found in TB_REASONS (c_src/beam/tb_raise.h)")
USES = [
    r'\breason\s*(?:=>|:=)\s*(\w+)\b(?!\()',              # Erlang maps (not a type: atom())
    r'\breason:\s*:(\w+)',                                 # Elixir keywords and maps
    r'\bbadarg\(\s*(\w+)\s*,',                             # badarg(Reason, Argument, Message)
    r'\braise\(\s*(?:badarg|tensor_blob)\s*,\s*(\w+)\s*,', # raise(Kind, Reason, Argument, Message)
    r'\|>\s*(?:TensorBlob\.Raise\.)?(?:badarg|error)!\(\s*:(\w+)\s*,',  # Elixir: msg |> badarg!(:reason, :arg)
]
count = 0
for path in sources():
    comment = "%" if path.endswith((".erl", ".hrl")) else "#"
    # Comments and specs blanked (lines kept, for the line numbers).
    code = "".join("\n" if line.lstrip().startswith((comment, "-spec", "-type", "@spec")) else line
                   for line in open(path))
    for p in USES:
        for m in re.finditer(p, code):
            r = m.group(1)
            if r[0].isupper() or r[0] == "_":
                continue  # a variable
            count += 1
            if r not in reasons:
                n = code[:m.start()].count("\n") + 1
                fail(f"{path}:{n}: reason {r} is no row of TB_REASONS (c_src/beam/tb_raise.h)")

# The Elixir facade's raises.
for path in sources():
    if not path.endswith(".ex") or path == "lib/tensor_blob/raise.ex":
        continue
    code = "".join(line.split("#", 1)[0] if line.lstrip().startswith("#") else line for line in open(path))
    for m in re.finditer(r'\braise\(?\s*(ArgumentError|TensorBlob\.Error)\b', code):
        n = code[:m.start()].count("\n") + 1
        fail(f"{path}:{n}: raise {m.group(1)} with TensorBlob.Raise.badarg!/3 or error!/3, which give its reason "
             f"and argument")

print(f"check_errors: {len(reasons)} reasons, {count} uses in src/ and lib/, "
      f"{len(ALLOWED)} allowed text matches, {'FAILED' if failed else 'ok'}")
sys.exit(1 if failed else 0)
PY
