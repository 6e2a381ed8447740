"""Tensors shared between a BEAM node and Python processes on this machine.

Run by `make python-test` (and so by `make test` and `make compat-test`):

    python3 test/python/sharing_test.py

The BEAM side is test/python/peer.exs under `mix run`, driven one command a
line. PyTorch's `file_system` sharing is tested where torch imports (and
the run fails without torch where TB_EXPECT_TORCH=1, as `make python-test`
sets); Python's multiprocessing.shared_memory everywhere. Every test drops the tensors in
both orders, reads the reference count from PyTorch's header, and checks
that /dev/shm holds none of the regions the run made at its end.
"""

import gc
import os
import re
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHM = "/dev/shm"
HEADER = 64  # PyTorch's map_alloc_alignment: the reference count, then padding

try:
    import torch
    import torch.multiprocessing
except ImportError:
    torch = None

from multiprocessing import resource_tracker, shared_memory


class Peer:
    """The BEAM node, over a pipe."""

    def __init__(self):
        env = dict(os.environ, MIX_ENV=os.environ.get("MIX_ENV", "test"))
        self.proc = subprocess.Popen(
            ["mix", "run", "--no-compile", "test/python/peer.exs"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.call("") == ["ready"], "the BEAM peer did not start"

    def call(self, command):
        if command:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the BEAM peer exited")
        word, _, rest = line.rstrip("\n").partition(" ")
        if word != "ok":
            raise PeerError(rest)
        return rest.split()

    def floats(self, command):
        return [float(v) for v in self.call(command)]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


class PeerError(Exception):
    pass


def shm_names():
    return set(os.listdir(SHM))


CREATED_BLOCKS = set()  # the names of the SharedMemory blocks this run made


def create_block(size):
    shm = shared_memory.SharedMemory(create=True, size=size)
    CREATED_BLOCKS.add(shm.name)
    return shm


def left_behind(before, peer_pid):
    """The regions this run made that are still there: the BEAM peer's
    (tensor_blob.<pid>-..., torch_tensor_blob.<pid>...), PyTorch's of this
    process (torch_<pid>_...) and its SharedMemory blocks. Other programs'
    regions, made meanwhile, are not this run's."""
    ours = re.compile(r"^(?:(?:torch_)?tensor_blob\.%s[-.]|torch_%d_)" % (peer_pid, os.getpid()))
    return {n for n in shm_names() - before if ours.match(n) or n in CREATED_BLOCKS}


def refcount(name):
    """The reference count in PyTorch's header of region `name`."""
    with open(SHM + "/" + name.lstrip("/"), "rb") as f:
        return struct.unpack("=i", f.read(4))[0]


def exists(name):
    return os.path.exists(SHM + "/" + name.lstrip("/"))


def check(cond, message):
    if not cond:
        raise AssertionError(message)


# ---- PyTorch's file_system strategy ---------------------------------------


def untyped(t):
    # Tensor.untyped_storage() is PyTorch 2's; 1.13 has storage().untyped().
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage().untyped()


def write_then_drop(peer, name, held, python_drops_first, i, python_value, beam_value):
    """Both mapped: each side's write is seen by the other (Python writes
    element i, the BEAM element 0); then one side drops its tensor and the
    other still reads the data, until the last user removes the name.
    held: a list of the one reference to Python's tensor, taken over."""
    t = held.pop()
    t[i] = python_value
    check(peer.floats(f"read {name}")[i] == python_value, "Python's write is seen by the BEAM")
    peer.call(f"set {name} 0 {beam_value}")
    check(t[0].item() == beam_value, "the BEAM's write is seen by Python")
    check(refcount(name) == 2, "writing element 0 leaves the header's count alone")

    if python_drops_first:
        del t
        check(refcount(name) == 1, "Python's drop leaves the BEAM's reference")
        check(peer.floats(f"read {name}")[i] == python_value, "the BEAM still reads the data")
        peer.call(f"drop {name}")
    else:
        peer.call(f"drop {name}")
        check(refcount(name) == 1, "the BEAM's drop leaves PyTorch's reference")
        check(t[i].item() == python_value and t[0].item() == beam_value, "Python still reads the data")
        del t
    check(not exists(name), "the last user removed the name")


def torch_to_beam(peer, python_drops_first):
    """PyTorch shares a tensor; the BEAM opens it as PyTorch's consumers do."""
    t = torch.arange(16, dtype=torch.float32)
    t.share_memory_()
    _manager, handle, _size = untyped(t)._share_filename_cpu_()
    name = handle.decode()
    check(name.startswith("/torch_"), f"PyTorch's region name {name}")
    check(refcount(name) == 1, "PyTorch holds one reference")

    values = peer.floats(f"open {name} 16")
    check(values == t.tolist(), f"the BEAM reads the data after the header: {values}")
    check(refcount(name) == 2, "the BEAM takes a reference")
    check(peer.call(f"memory {name}") == ["ipc"], "the BEAM's tensor is a mapping")

    held = [t]
    del t  # write_then_drop holds the only reference
    write_then_drop(peer, name, held, python_drops_first, 3, 42.0, -7.5)
    try:
        peer.call(f"open {name} 16")
        raise AssertionError("opened a freed region")
    except PeerError as e:
        check("no shared memory named" in str(e), str(e))


def beam_to_torch(peer, python_drops_first):
    """The BEAM exports in PyTorch's format; PyTorch rebuilds the storage
    with the call torch.multiprocessing's rebuild_storage_filename makes."""
    name, size = peer.call("export_torch " + " ".join(f"{float(i)}" for i in range(16)))
    size = int(size)
    check(size == 16 * 4, "the handle's data size")
    check(refcount(name) == 1, "the exporter holds one reference")

    storage = torch.UntypedStorage._new_shared_filename_cpu(b"", name.encode(), size)
    t = torch.tensor([], dtype=torch.float32).set_(storage)
    del storage
    check(t.tolist() == [float(i) for i in range(16)], f"PyTorch reads the data: {t.tolist()}")
    check(refcount(name) == 2, "PyTorch takes a reference")

    held = [t]
    del t  # write_then_drop holds the only reference
    write_then_drop(peer, name, held, python_drops_first, 1, 11.0, 99.0)


# ---- multiprocessing.shared_memory ----------------------------------------

TRACK_PARAM = sys.version_info >= (3, 13)  # SharedMemory(..., track=False)


def attach(name):
    """Attaches to a region another process owns, without handing it to
    this process's resource tracker (which would unlink it at exit)."""
    if TRACK_PARAM:
        return shared_memory.SharedMemory(name=name, track=False)
    shm = shared_memory.SharedMemory(name=name)
    resource_tracker.unregister(shm._name, "shared_memory")
    return shm


def drop_block(peer, shm, name, python_drops_first, index, value):
    """Drops Python's block and the BEAM's mapping of it (`name`), in the
    order asked: the side that lets go last still reads float `index` as
    `value`."""
    if python_drops_first:
        shm.close()
        shm.unlink()
        check(peer.floats(f"read {name}")[index] == value, "the BEAM's mapping outlives the name")
        peer.call(f"drop {name}")
    else:
        peer.call(f"drop {name}")
        check(struct.unpack_from("=f", shm.buf, 4 * index)[0] == value, "Python still uses its block")
        shm.close()
        shm.unlink()


def python_region_to_beam(peer, python_drops_first):
    shm = create_block(16 * 4)
    struct.pack_into("=16f", shm.buf, 0, *[float(i) for i in range(16)])
    name = shm.name
    check(peer.floats(f"open {name} 16") == [float(i) for i in range(16)], "the BEAM reads Python's region")
    peer.call(f"set {name} 2 5.5")
    check(struct.unpack_from("=f", shm.buf, 8)[0] == 5.5, "the BEAM's write is seen by Python")
    drop_block(peer, shm, name, python_drops_first, 2, 5.5)
    check(not exists(name), "the creator removed the name")


def beam_region_to_python(peer, python_drops_first):
    name, size = peer.call("export " + " ".join(f"{float(i)}" for i in range(16)))
    check(int(size) == 64, "the handle's data size")
    shm = attach(name.lstrip("/"))
    check(list(struct.unpack_from("=16f", shm.buf, 0)) == [float(i) for i in range(16)], "Python reads the region")
    struct.pack_into("=f", shm.buf, 4, -1.0)
    check(peer.floats(f"read {name}")[1] == -1.0, "Python's write is seen by the BEAM")
    if python_drops_first:
        shm.close()
        check(exists(name), "Python's close leaves the BEAM's region")
        peer.call(f"drop {name}")
    else:
        peer.call(f"drop {name}")
        check(not exists(name), "the creator's drop removes the name")
        check(struct.unpack_from("=f", shm.buf, 4)[0] == -1.0, "Python's mapping outlives the name")
        shm.close()
    check(not exists(name), "the creator removed the name")


def tracker_caveat(peer):
    """What the guide warns about: a process that attaches with the defaults
    (track=True on 3.13 too) unlinks the region when it exits; attach()
    does not."""
    name, _ = peer.call("export 1.0 2.0")
    default = "from multiprocessing import shared_memory as s; s.SharedMemory(name=%r).close()" % name.lstrip("/")
    subprocess.run([sys.executable, "-W", "ignore", "-c", default], check=True, stderr=subprocess.DEVNULL)
    # The child's tracker process unlinks after the child has exited.
    deadline = time.monotonic() + 10
    while exists(name) and time.monotonic() < deadline:
        time.sleep(0.05)
    check(not exists(name), "the resource tracker unlinks an attached region at exit")
    check(peer.floats(f"read {name}") == [1.0, 2.0], "the BEAM's mapping outlives the name")
    peer.call(f"drop {name}")

    name, _ = peer.call("export 1.0 2.0")
    careful = (
        "import sys; sys.path.insert(0, %r); import sharing_test as t; t.attach(%r).close()"
        % (os.path.dirname(os.path.abspath(__file__)), name.lstrip("/"))
    )
    subprocess.run([sys.executable, "-c", careful], check=True)
    check(exists(name), "a process that attached with attach() leaves the region")
    peer.call(f"drop {name}")
    check(not exists(name), "the creator removed the name")


def run(peer, tests, before):
    """Runs each (title, fun, arg) against the peer, then checks that the
    BEAM holds no tensor and that /dev/shm holds none of this run's names:
    the exit status."""
    failures = 0
    for title, fun, arg in tests:
        try:
            fun(peer, arg)
            print("ok     " + title)
        except Exception as e:  # noqa: BLE001 - report every failure, then exit 1
            failures += 1
            print(f"FAILED {title}: {type(e).__name__}: {e}")
    gc.collect()
    check(peer.call("tensors") == ["0"], "the BEAM holds no tensor at the end")
    peer_pid = peer.call("pid")[0]
    peer.close()
    left = left_behind(before, peer_pid)
    if left:
        failures += 1
        print("FAILED /dev/shm is left with " + ", ".join(sorted(left)))
    version = "torch %s" % torch.__version__ if torch is not None else "no torch"
    print(f"{len(tests)} tests, {failures} failures (Python {sys.version.split()[0]}, {version})")
    return 1 if failures else 0


def main():
    before = shm_names()
    peer = Peer()
    tests = []
    if torch is not None:
        torch.multiprocessing.set_sharing_strategy("file_system")
        for first in (True, False):
            tests.append((f"pytorch -> beam, {'python' if first else 'beam'} drops first", torch_to_beam, first))
            tests.append((f"beam -> pytorch, {'python' if first else 'beam'} drops first", beam_to_torch, first))
    elif os.environ.get("TB_EXPECT_TORCH") == "1":
        print("FAILED torch is not importable by %s, and TB_EXPECT_TORCH=1 (make setup installs python3-torch)" % sys.executable)
        sys.exit(1)
    else:
        print("torch is not importable by %s: the PyTorch tests are skipped" % sys.executable)
    for first in (True, False):
        tests.append((f"shared_memory -> beam, {'python' if first else 'beam'} drops first", python_region_to_beam, first))
        tests.append((f"beam -> shared_memory, {'python' if first else 'beam'} drops first", beam_region_to_python, first))
    tests.append(("the resource tracker's caveat", lambda p, _: tracker_caveat(p), None))

    sys.exit(run(peer, tests, before))

if __name__ == "__main__":
    main()
