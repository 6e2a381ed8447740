"""The Python side of TensorBlob.Python (priv/python/tensor_blob_pythonx.py),
tested outside the VM: what it does without the library's builtins, and
with stand-ins for them. The VM's side (the builtins, the C API bound by
name) is test/python_in_vm_test.exs.

Run by `make python-test`:

    python3 test/python/pythonx_module_test.py

Cases that need PyTorch are skipped without it, unless TB_EXPECT_TORCH=1
(as `make python-test` sets), which fails the run instead.
"""

import gc
import os
import sys
import sysconfig
import tempfile
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "priv", "python"))

import tensor_blob_pythonx as m  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

failures = []
skipped = []


def case(fn):
    try:
        fn()
        print(f"ok   {fn.__name__}")
    except Skip as s:
        skipped.append(fn.__name__)
        print(f"skip {fn.__name__}: {s}")
    except Exception as e:  # noqa: BLE001
        failures.append(fn.__name__)
        print(f"FAIL {fn.__name__}: {type(e).__name__}: {e}")


class Skip(Exception):
    pass


def need_torch():
    if torch is None:
        if os.environ.get("TB_EXPECT_TORCH") == "1":
            raise AssertionError("no torch, and TB_EXPECT_TORCH=1")
        raise Skip("no torch")


def raises(kind, fn, text):
    try:
        fn()
    except kind as e:
        assert text in str(e), f"{kind.__name__} says {str(e)!r}, not {text!r}"
        return
    raise AssertionError(f"no {kind.__name__}")


def maps_with(lines):
    f = tempfile.NamedTemporaryFile("w", delete=False)
    f.write("".join(lines))
    f.close()
    return f.name


# library(): the mapped file under the library's own name, or a clear error.
def library_is_the_mapped_file():
    name = sysconfig.get_config_var("INSTSONAME")
    path = f"/opt/python/lib/{name}"
    maps = maps_with([
        "7f00-7f10 r--p 00000000 08:01 1 /usr/lib/libc.so.6\n",
        f"7f10-7f20 r-xp 00000000 08:01 2 {path}\n",
        "7f20-7f30 rw-p 00000000 00:00 0 \n",
    ])
    try:
        assert m.library(maps) == path.encode(), m.library(maps)
    finally:
        os.unlink(maps)


def library_not_mapped_is_an_error():
    maps = maps_with(["7f00-7f10 r--p 00000000 08:01 1 /usr/lib/libc.so.6\n"])
    try:
        raises(RuntimeError, lambda: m.library(maps), "is not loaded in this process")
    finally:
        os.unlink(maps)


def library_of_this_process():
    # Debian's python3 links its interpreter into the program: then the
    # error; a shared one (as Pythonx's): the mapped file.
    try:
        path = m.library()
    except RuntimeError as e:
        assert "not loaded in this process" in str(e) or "without a shared libpython" in str(e), e
        return
    assert os.path.isabs(path), path
    assert path.decode() in open("/proc/self/maps").read()


# take(): the legacy producers' types, held weakly.
class Versioned:
    def __init__(self):
        self.asked = []

    def __dlpack__(self, max_version=None):
        self.asked.append(max_version)
        return "capsule"


def legacy_producer_types_are_held_weakly():
    taken = []
    m.take_capsule = lambda capsule, k: taken.append((capsule, k)) or m.TAKEN

    def make():
        class Legacy:
            def __dlpack__(self):
                return "legacy capsule"

        return Legacy

    Legacy = make()
    m.take(Legacy(), 3)
    assert Legacy in m._legacy_types
    assert taken == [("legacy capsule", 3)]
    m.take(Legacy(), 4)  # asked once per type: no second TypeError
    assert taken[-1] == ("legacy capsule", 4)
    gone = weakref.ref(Legacy)
    del Legacy
    gc.collect()
    assert gone() is None, "the legacy producer's type is kept alive"
    assert len(m._legacy_types) == 0


def versioned_producer_asked_for_1_0():
    m.take_capsule = lambda capsule, k: m.TAKEN
    v = Versioned()
    m.take(v, 0)
    assert v.asked == [(1, 0)]
    assert type(v) not in m._legacy_types


def take_refuses_what_is_no_producer():
    raises(TypeError, lambda: m.take(object(), 0), "has no __dlpack__")


def refusals_say_what():
    for code, kind, text in [
        (m.HOLDS_NULL, ValueError, "holding NULL"),
        (m.ODD_ADDRESS, ValueError, "odd address"),
        (m.SLOT_REFUSED, BufferError, "slot 7 is not open and empty"),
        (m.NOT_DLPACK, TypeError, "a str, not a DLPack capsule"),
    ]:
        m.take_capsule = lambda capsule, k, code=code: code
        raises(kind, lambda: m.take(Versioned(), 7), text)


def a_used_capsule_is_named():
    need_torch()
    capsule = torch.utils.dlpack.to_dlpack(torch.arange(3))
    torch.utils.dlpack.from_dlpack(capsule)  # renamed used_dltensor
    raises(ValueError, lambda: m._refuse("Tensor", capsule, m.NOT_DLPACK, 0), "(used_dltensor)")


def exported_hands_its_capsule_once():
    e = m.Exported("capsule")
    assert e.__dlpack__() == "capsule"
    raises(BufferError, e.__dlpack__, "consumed already")
    assert e.__dlpack_device__() == (1, 0)


def to_torch_and_to_numpy_over_a_capsule():
    need_torch()
    t = torch.arange(6, dtype=torch.float32)
    m.capsule_from_slot = lambda k: torch.utils.dlpack.to_dlpack(t[k:])
    back = m.to_torch(2)
    back[0] = 42
    assert t[2].item() == 42
    a = m.to_numpy(1)
    assert a.tolist() == [1.0, 42.0, 3.0, 4.0, 5.0]


def describe_gives_versions():
    python, torch_version, _numpy = m.describe()
    assert python == sys.version.split()[0].encode()
    assert torch_version == (torch.__version__.encode() if torch is not None else None)


# DLPack 1.3's C exchange API: a type that offers a table goes to
# take_api (never __dlpack__); one without, to __dlpack__.
def a_type_with_a_table_goes_to_take_api():
    calls = []
    m.take_api = lambda obj, api, k: calls.append((type(obj).__name__, api, k)) or m.TAKEN

    class WithTable:
        __dlpack_c_exchange_api__ = "the table's capsule"

        def __dlpack__(self, *args, **kwargs):
            raise AssertionError("__dlpack__ called where the type has a table")

    m.take(WithTable(), 5)
    assert calls == [("WithTable", "the table's capsule", 5)]
    m.take_api = lambda obj, api, k: m.HOLDS_NULL
    raises(ValueError, lambda: m.take(WithTable(), 5), "the DLPack C exchange API of a WithTable gave")


# Batches: a container's description, both ways, with the items and
# tables beside it in the description's order.
def a_container_is_described_and_rebuilt():
    class WithTable:
        __dlpack_c_exchange_api__ = "table"

    m.take_capsule = None
    items, apis, out = [], [], []
    a, b, c = WithTable(), WithTable(), Versioned()
    tree = {"w": a, b"raw\xff": [b, (c,)], 7: {}}
    m._describe(tree, items, apis, out)
    desc = b"".join(out)
    assert desc == b"d3:s1:wts4:raw\xffl2:tl1:ti7:d0:", desc
    assert items[:2] == [a, b] and apis == ["table", "table", None]
    assert items[2] == "capsule" and c.asked == [(1, 0)]
    back = m._parse(desc, 0, iter(["A", "B", "C"]))[0]
    assert back == {"w": "A", b"raw\xff": ["B", ["C"]], 7: {}}, back
    # An atom's name, as Elixir describes it, is a str key.
    assert m._parse(b"d1:a4:namet", 0, iter(["T"]))[0] == {"name": "T"}
    raises(TypeError, lambda: m._describe({1.5: a}, [], [], []), "keys must be str, bytes or int")
    raises(TypeError, lambda: m._describe([object()], [], [], []), "has no __dlpack__")


for c in [library_is_the_mapped_file, library_not_mapped_is_an_error, library_of_this_process,
          legacy_producer_types_are_held_weakly, versioned_producer_asked_for_1_0,
          take_refuses_what_is_no_producer, refusals_say_what, a_used_capsule_is_named,
          exported_hands_its_capsule_once, to_torch_and_to_numpy_over_a_capsule, describe_gives_versions,
          a_type_with_a_table_goes_to_take_api, a_container_is_described_and_rebuilt]:
    case(c)
print(f"pythonx_module_test: {len(failures)} failed, {len(skipped)} skipped")
sys.exit(1 if failures else 0)
