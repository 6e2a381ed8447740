"""The Python module shipped with tensor_blob (priv/python/tensor_blob.py),
against a BEAM node: the maps it prints and reads, both ways, in both
formats, on the PyTorch the interpreter has (1.13 on Debian 12, 2.6 on
Debian 13).

Run by `make python-test`:

    python3 test/python/module_test.py

The BEAM side is test/python/peer.exs (see sharing_test.py). Every test
drops the tensors in both orders where both sides hold one, and the run
checks that /dev/shm holds none of the regions it made at its end. With TB_EXPECT_TORCH=1 (as
`make python-test` sets unless told otherwise), a Python without torch
fails the run instead of skipping the PyTorch tests.
"""

import gc
import json
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "priv", "python"))

import tensor_blob  # noqa: E402
from sharing_test import Peer, check, create_block, drop_block, exists, refcount, run, shm_names  # noqa: E402

try:
    import torch
except ImportError:
    torch = None


def beam_json(peer, command):
    """The map a peer command prints, as the BEAM printed it."""
    line = " ".join(peer.call(command))
    return line, json.loads(line)


def opened(peer, text):
    """The BEAM opens a map (IPC.open/1): the shape it sees, and its values."""
    words = peer.call("open_json " + text)
    return words[0], [float(v) for v in words[1:]]


# ---- PyTorch's file_system regions -----------------------------------------


def beam_torch_to_python(peer, python_drops_first):
    line, spec = beam_json(peer, "export_torch_json int64 2x3 0 1 2 3 4 -5")
    name = spec["handle"]
    check(spec["dtype"] == "int64" and spec["shape"] == [2, 3] and spec["data_size"] == 48, f"the BEAM's map: {spec}")
    check(refcount(name) == 1, "the exporter holds one reference")

    t = tensor_blob.open(line)
    check(t.dtype == torch.int64 and tuple(t.shape) == (2, 3), f"the tensor's dtype and shape: {t.dtype} {t.shape}")
    check(t.tolist() == [[0, 1, 2], [3, 4, -5]], f"Python reads the BEAM's data: {t.tolist()}")
    check(refcount(name) == 2, "Python takes a reference")
    t[0, 1] = 77
    check(peer.floats(f"read {name}")[1] == 77, "Python's write is seen by the BEAM")
    peer.call(f"set {name} 1 -9")
    check(t.tolist() == [[0, 77, 2], [-9, -9, -9]], f"the BEAM's write is seen by Python: {t.tolist()}")

    if python_drops_first:
        del t
        gc.collect()
        check(refcount(name) == 1, "Python's drop gives its reference back")
        peer.call(f"drop {name}")
    else:
        peer.call(f"drop {name}")
        check(refcount(name) == 1, "the BEAM's drop leaves Python's reference")
        check(t[0, 1].item() == 77, "Python still reads the data")
        del t
        gc.collect()
    check(not exists(name), "the last user removed the name")


def python_torch_to_beam(peer, python_drops_first):
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    spec = tensor_blob.export(t)
    name = spec["handle"]
    check(os.path.basename(name).startswith("torch_"), f"a region in PyTorch's format: {name}")
    check(spec["dtype"] == "float32" and spec["shape"] == [2, 3] and spec["data_size"] == 24, f"Python's map: {spec}")
    check(refcount(name) == 1, "PyTorch holds one reference")

    shape, values = opened(peer, tensor_blob.dumps(spec))
    check(shape == "2x3" and values == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], f"the BEAM reads {shape} {values}")
    check(refcount(name) == 2, "the BEAM takes a reference")
    check(peer.call(f"memory {name}") == ["ipc"], "the BEAM's tensor is a mapping")
    t[0, 2] = 42.0
    check(peer.floats(f"read {name}")[2] == 42.0, "Python's write is seen by the BEAM")

    if python_drops_first:
        del t
        gc.collect()
        check(refcount(name) == 1, "Python's drop leaves the BEAM's reference")
        check(peer.floats(f"read {name}")[2] == 42.0, "the BEAM still reads the data")
        peer.call(f"drop {name}")
    else:
        peer.call(f"drop {name}")
        check(refcount(name) == 1, "the BEAM's drop leaves PyTorch's reference")
        del t
        gc.collect()
    check(not exists(name), "the last user removed the name")


def export_refuses_views(_peer, _arg):
    base = torch.arange(8, dtype=torch.float32)
    for view in (base[2:], base.reshape(2, 4).t()):
        try:
            tensor_blob.export(view)
            raise AssertionError("exported a view")
        except ValueError as e:
            check("clone()" in str(e), str(e))
    spec = tensor_blob.export(base[2:].clone())
    check(spec["shape"] == [6], f"a clone exports: {spec}")
    try:
        tensor_blob.open(dict(spec, dtype="float31"))
        raise AssertionError("opened an unknown dtype")
    except ValueError as e:
        check("unknown dtype 'float31'" in str(e), str(e))
    try:
        tensor_blob.open({"handle": spec["handle"], "dtype": "float32"})
        raise AssertionError("opened a map without a shape")
    except ValueError as e:
        check("lacks shape" in str(e), str(e))


# ---- plain regions: tensor_blob's and multiprocessing.shared_memory's ------


def beam_region_to_python(peer, use_torch):
    line, spec = beam_json(peer, "export_json float32 4 1.5 2.5 3.5 4.5")
    name = spec["handle"]
    check(spec == {"handle": name, "dtype": "float32", "shape": [4], "data_size": 16}, f"the BEAM's map: {spec}")
    t = tensor_blob.open(line, torch=use_torch)
    if use_torch:
        check(isinstance(t, torch.Tensor) and t.tolist() == [1.5, 2.5, 3.5, 4.5], f"a torch tensor: {t}")
        t[3] = -1.0
    else:
        check(isinstance(t, memoryview) and t.format == "f" and t.tolist() == [1.5, 2.5, 3.5, 4.5], f"a memoryview: {t}")
        t[3] = -1.0
    check(peer.floats(f"read {name}")[3] == -1.0, "Python's write is seen by the BEAM")
    # A process that opens the region with the module and exits leaves it
    # (no resource tracker is involved).
    child = "import sys; sys.path.insert(0, %r); import tensor_blob; print(tensor_blob.open(%r, torch=False).tolist())" % (
        os.path.join(ROOT, "priv", "python"),
        line,
    )
    out = subprocess.run([sys.executable, "-c", child], check=True, capture_output=True, text=True)
    check(out.stdout.strip() == "[1.5, 2.5, 3.5, -1.0]" and out.stderr == "", f"the child reads the region: {out}")
    check(exists(name), "a process that opened the region with the module leaves its name")
    peer.call(f"drop {name}")
    check(not exists(name), "the creator's drop removes the name")
    check(t[3] == -1.0 if not use_torch else t[3].item() == -1.0, "Python's mapping outlives the name")
    del t


def python_region_to_beam(peer, python_drops_first):
    shm = create_block(24)
    struct.pack_into("=6f", shm.buf, 0, *[float(i) for i in range(6)])
    spec = tensor_blob.describe(shm, "float32", (3, 2))
    check(spec == {"handle": "/" + shm.name, "dtype": "float32", "shape": [3, 2], "data_size": 24}, f"the map: {spec}")
    shape, values = opened(peer, json.dumps(spec))
    check(shape == "3x2" and values == [float(i) for i in range(6)], f"the BEAM reads {shape} {values}")
    name = spec["handle"]
    drop_block(peer, shm, name, python_drops_first, 5, 5.0)
    check(not exists(name), "the creator removed the name")
    small = create_block(8)
    try:
        tensor_blob.describe(small, "float32", (3,))
        raise AssertionError("described a block too small for the tensor")
    except ValueError as e:
        check("needs 12 bytes, the block holds 8" in str(e), str(e))
    finally:
        small.close()
        small.unlink()


def main():
    expect_torch = os.environ.get("TB_EXPECT_TORCH") == "1"
    before = shm_names()
    tests = []
    if torch is not None:
        for first in (True, False):
            drops = "python" if first else "beam"
            tests.append((f"module: beam torch region -> python, {drops} drops first", beam_torch_to_python, first))
            tests.append((f"module: python torch export -> beam, {drops} drops first", python_torch_to_beam, first))
        tests.append(("module: export refuses views, open refuses bad maps", export_refuses_views, None))
        tests.append(("module: beam region -> python (torch)", beam_region_to_python, True))
    elif expect_torch:
        print(f"FAILED torch is not importable by {sys.executable}, and TB_EXPECT_TORCH=1 (make setup installs python3-torch)")
        sys.exit(1)
    else:
        print(f"torch is not importable by {sys.executable}: the PyTorch tests are skipped")
    tests.append(("module: beam region -> python (memoryview)", beam_region_to_python, False))
    for first in (True, False):
        drops = "python" if first else "beam"
        tests.append((f"module: shared_memory -> beam, {drops} drops first", python_region_to_beam, first))

    sys.exit(run(Peer(), tests, before))

if __name__ == "__main__":
    main()
