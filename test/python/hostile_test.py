"""The Python module (priv/python/tensor_blob.py) against what another
program of this user may plant in /dev/shm or write in a map: the rules of
the library's C side (c_src/system/tb_shm_names.c, tb_shm.c), in Python.

Run by `make python-test`:

    python3 test/python/hostile_test.py

Files are planted in a private /dev/shm: the script runs itself again
under `unshare -m` with a tmpfs of its own mounted there. Where the
machine allows no mount namespace (not root, no unshare), every case is
reported as skipped, not passed. Cases that need PyTorch are skipped
without it, unless TB_EXPECT_TORCH=1 (as `make python-test` sets), which
fails the run instead.
"""

import errno
import gc
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "priv", "python"))

import tensor_blob  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

SHM = "/dev/shm"
HEADER = 64
PRIVATE = "TB_PRIVATE_SHM"


def path(name):
    return os.path.join(SHM, name.lstrip("/"))


def plant(name, data):
    with open(path(name), "wb") as f:
        f.write(data)
    return "/" + name


def torch_region(name, count, data):
    """A file laid out as PyTorch lays out a file_system region."""
    return plant(name, struct.pack("=i", count) + bytes(HEADER - 4) + data)


def read(name):
    with open(path(name), "rb") as f:
        return f.read()


def count_of(name):
    return struct.unpack("=i", read(name)[:4])[0]


def check(cond, message):
    if not cond:
        raise AssertionError(message)


def refused(exc_type, words, fun, *args, **kwargs):
    """fun(*args) raises exc_type whose message holds each of words."""
    try:
        result = fun(*args, **kwargs)
    except exc_type as e:
        text = str(e)
        for w in words:
            check(w in text, "the message %r does not say %r" % (text, w))
        return text
    raise AssertionError("accepted (gave %r), expected %s saying %s" % (result, exc_type.__name__, words))


def spec(handle, dtype="float32", shape=(4,), **more):
    return dict({"handle": handle, "dtype": dtype, "shape": list(shape)}, **more)


# ---- plain regions ----------------------------------------------------------


def symlink_refused(_):
    target = plant("target", bytes(16))
    os.symlink(path(target), path("link"))
    refused(OSError, ["/link", "a symbolic link, refused"], tensor_blob.open, spec("/link"), torch=False)
    check(read(target) == bytes(16), "the link's target is untouched")
    if torch is not None:
        refused(OSError, ["/link", "a symbolic link, refused"], tensor_blob.open, spec("/link"), torch=True)
    os.symlink(path(torch_region("torch_target", 1, bytes(16))), path("torch_link"))
    if torch is not None:
        refused(OSError, ["/torch_link", "a symbolic link, refused"], tensor_blob.open, spec("/torch_link"))
        check(count_of("torch_target") == 1, "the PyTorch region's count is untouched")
        check(os.path.getsize(path("torch_target")) == HEADER + 16, "the PyTorch region's size is untouched")


def not_regular_refused(_):
    os.mkfifo(path("fifo"), 0o600)
    refused(OSError, ["/fifo", "not a regular file"], tensor_blob.open, spec("/fifo"), torch=False)
    os.mkfifo(path("torch_fifo"), 0o600)
    if torch is not None:
        refused(OSError, ["/torch_fifo", "not a regular file"], tensor_blob.open, spec("/torch_fifo"))
    os.mkdir(path("dir"), 0o700)
    refused(OSError, ["/dir"], tensor_blob.open, spec("/dir"), torch=False)


def other_users_refused(_):
    name = plant("theirs", bytes(16))
    torch_name = torch_region("torch_theirs", 1, bytes(16))
    try:
        os.chown(path(name), 65534, 65534)
        os.chown(path(torch_name), 65534, 65534)
    except PermissionError:
        raise Skip("chown to another user is not allowed here")
    refused(PermissionError, ["/theirs", "belongs to another user"], tensor_blob.open, spec(name), torch=False)
    if torch is not None:
        refused(PermissionError, ["/torch_theirs", "belongs to another user"], tensor_blob.open, spec(torch_name))
        check(count_of(torch_name) == 1, "the other user's count is untouched")


def plain_sizes_from_fstat(_):
    name = plant("small", bytes(16))
    refused(ValueError, ["/small", "4194304", "16"], tensor_blob.open, spec(name, data_size=4 << 20), torch=False)
    refused(ValueError, ["/small", "needs 32"], tensor_blob.open, spec(name, shape=(8,)), torch=False)
    check(os.path.getsize(path(name)) == 16, "the region keeps its size")
    view = tensor_blob.open(spec(name, data_size=16), torch=False)
    check(view.tolist() == [0.0] * 4, "a true map opens: %r" % view.tolist())


def missing_torch_name(_):
    text = refused(FileNotFoundError, ["/torch_1_2_3", "no shared memory named"], tensor_blob.open, spec("/torch_1_2_3"))
    check("must hold its tensor until this side has opened it" in text, text)


def hostile_maps(_):
    cases = [
        (spec("/x", shape=[2, True]), "shape"),
        (spec("/x", shape="4"), "shape"),
        (spec("/x", dtype=["float32"]), "unknown dtype"),
        (spec("/x", data_size="16"), "data_size"),
        (spec("/x", data_size=-1), "data_size"),
        (spec("/x\0y"), "handle"),
        (spec("/a/b"), "handle"),
    ]
    for m, word in cases:
        refused(ValueError, [word], tensor_blob.open, m, torch=False)


def repeated_keys(_):
    """A JSON map naming a key twice is refused, naming the key, before any
    region is opened: decoders differ on which value such a key has."""
    name = plant("twice", bytes(16))
    for line, key in [
        ('{"handle": "%s", "dtype": "float32", "shape": [4], "dtype": "float64"}' % name, "dtype"),
        ('{"handle": "%s", "shape": [4], "dtype": "float32", "shape": [2]}' % name, "shape"),
        ('{"handle": "%s", "dtype": "float32", "shape": [4], "x": {"y": 1, "y": 2}}' % name, "y"),
    ]:
        refused(ValueError, ["%r more than once" % key], tensor_blob.open, line, torch=False)
        refused(ValueError, ["%r more than once" % key], tensor_blob.loads, line)
        refused(ValueError, ["%r more than once" % key], tensor_blob.open, line.encode(), torch=False)
    check(tensor_blob.loads('[{"x": 1}, {"x": 2}]') == [{"x": 1}, {"x": 2}], "the same key in two objects")
    view = tensor_blob.open('{"handle": "%s", "dtype": "float32", "shape": [4]}' % name, torch=False)
    check(view.tolist() == [0.0] * 4, "the line without its repeat opens: %r" % view.tolist())


# ---- PyTorch's format -------------------------------------------------------


def torch_sizes_from_fstat(_):
    name = torch_region("torch_small", 1, bytes(16))
    refused(ValueError, ["/torch_small", "4194304", "16"], tensor_blob.open, spec(name, data_size=4 << 20))
    refused(ValueError, ["/torch_small", "needs 32"], tensor_blob.open, spec(name, shape=(8,)))
    check(os.path.getsize(path(name)) == HEADER + 16, "PyTorch did not grow the file: %d" % os.path.getsize(path(name)))
    check(count_of(name) == 1, "no reference was taken")
    short = plant("torch_short", bytes(10))
    refused(ValueError, ["/torch_short", "header"], tensor_blob.open, spec(short, shape=(0,)))
    check(os.path.getsize(path(short)) == 10, "the short file keeps its size")


def torch_dead_counts(_):
    for count in (0, -1, -(2**31)):
        name = torch_region("torch_dead", count, bytes(16))
        refused(ValueError, ["/torch_dead", "no live PyTorch region", str(count)], tensor_blob.open, spec(name))
        check(count_of(name) == count, "the count is untouched: %d" % count_of(name))
        os.unlink(path(name))


def torch_good_region_opens(_):
    # The rules refuse nothing a true region holds.
    name = torch_region("torch_good", 1, struct.pack("=4f", 1, 2, 3, 4))
    t = tensor_blob.open(spec(name, data_size=16))
    check(t.tolist() == [1.0, 2.0, 3.0, 4.0], "the data: %r" % t.tolist())
    check(count_of(name) == 2, "the opener holds a reference")
    del t
    gc.collect()
    check(count_of(name) == 1, "the reference is given back")


class Skip(Exception):
    pass


TESTS = [
    ("a symbolic link is refused, its target untouched", symlink_refused, False),
    ("a FIFO or a directory is refused", not_regular_refused, False),
    ("another user's file is refused", other_users_refused, False),
    ("a plain region's sizes come from fstat", plain_sizes_from_fstat, False),
    ("maps with fields of the wrong type are refused", hostile_maps, False),
    ("a JSON map naming a key twice is refused, naming it", repeated_keys, False),
    ("a missing PyTorch name says the exporter must hold its tensor", missing_torch_name, True),
    ("a PyTorch region's sizes come from fstat: no file grows", torch_sizes_from_fstat, True),
    ("a PyTorch header with no live count is refused", torch_dead_counts, True),
    ("a true PyTorch region opens and counts", torch_good_region_opens, True),
]


def report(results):
    failures = sum(1 for r in results if r == "FAILED")
    skipped = sum(1 for r in results if r == "skipped")
    version = "torch %s" % torch.__version__ if torch is not None else "no torch"
    print("%d tests, %d failures, %d skipped (Python %s, %s)" % (len(results), failures, skipped, sys.version.split()[0], version))
    return 1 if failures else 0


def skip_all(why):
    for title, _fun, _needs in TESTS:
        print("skipped hostile: %s: %s" % (title, why))
    return report(["skipped"] * len(TESTS))


def main():
    expect_torch = os.environ.get("TB_EXPECT_TORCH") == "1"
    if torch is None and expect_torch:
        print("FAILED torch is not importable by %s, and TB_EXPECT_TORCH=1 (make setup installs python3-torch)" % sys.executable)
        return 1
    if os.environ.get(PRIVATE) != "1":
        # Again, in a mount namespace of its own with a tmpfs on /dev/shm;
        # 77: the mount was refused.
        script = 'mount -t tmpfs -o size=16m tmpfs /dev/shm || exit 77; exec "$0" "$@"'
        env = dict(os.environ, **{PRIVATE: "1"})
        try:
            done = subprocess.run(
                ["unshare", "-m", "sh", "-c", script, sys.executable, os.path.abspath(__file__)],
                env=env,
                capture_output=True,
                text=True,
            )
        except FileNotFoundError:
            return skip_all("no unshare here")
        if done.returncode == 77 or (done.returncode == 1 and "unshare" in done.stderr):
            return skip_all("no private /dev/shm here: " + done.stderr.strip())
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
        return done.returncode
    results = []
    for title, fun, needs_torch in TESTS:
        for entry in os.listdir(SHM):
            p = path(entry)
            os.rmdir(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
        if needs_torch and torch is None:
            print("skipped hostile: %s: torch is not importable" % title)
            results.append("skipped")
            continue
        try:
            fun(None)
            print("ok     hostile: " + title)
            results.append("ok")
        except Skip as e:
            print("skipped hostile: %s: %s" % (title, e))
            results.append("skipped")
        except Exception as e:  # noqa: BLE001 - report every failure, then exit 1
            print("FAILED hostile: %s: %s: %s" % (title, type(e).__name__, e))
            results.append("FAILED")
    return report(results)


if __name__ == "__main__":
    sys.exit(main())
