"""The Python side of TensorBlob.Python: tensors between tensor_blob and the
Python embedded in the BEAM (Pythonx), by DLPack, with no copy.

The VM's interpreter imports this module once (TensorBlob.Python), asks it
where its libpython is (library), has the library bind the interpreter's C
API by name from there, and gives it back the library's two builtins
(configure). Each exchange then names a slot of the library: to_torch(k)
and to_numpy(k) make a tensor of the export in slot k; take(obj, k) puts
obj's managed tensor in slot k. The pointer work is the builtins' (C,
METH_FASTCALL); ctypes only makes them, once.
"""

import ctypes
import os
import sysconfig
import weakref

# The builtins of the library (configure): capsule_from_slot(k) gives a
# capsule over the export in slot k; take_capsule(capsule, k) takes an
# unused DLPack capsule's managed tensor into slot k and answers one of the
# codes below.
capsule_from_slot = None
take_capsule = None
# DLPack 1.3's C exchange API (configure): take_api(obj, api, k) takes obj's
# managed tensor into slot k through the table of api, its type's
# __dlpack_c_exchange_api__ capsule, and answers as take_capsule does;
# object_from_api(api, k) makes the producer's object over the export in
# slot k. Both check the capsule first, and raise ValueError on a bad one
# without calling anything in it.
take_api = None
object_from_api = None
# Batches, many tensors in one slot (configure): capsules_from_batch(k) and
# objects_from_batch(api, k) give a list over the exports of the batch in
# slot k; take_many(items, apis, k) puts a batch of the items (unused
# DLPack capsules, or objects whose type's table is the api beside each)
# in the empty slot k.
capsules_from_batch = None
objects_from_batch = None
take_many = None
# Containers, in one pass in C (configure): tree(desc, items) makes the
# container desc describes, its tensors the list items in order;
# take_tree(obj, capsule_of, k) takes the tensors of obj (nested dicts,
# lists and tuples) into a batch in the empty slot k that carries obj's
# description, each through its type's table, or through the capsule
# capsule_of(leaf) gives where its type has none.
tree = None
take_tree = None

# The attribute a type offers its table in.
EXCHANGE_API = "__dlpack_c_exchange_api__"

TAKEN, NOT_DLPACK, HOLDS_NULL, ODD_ADDRESS, SLOT_REFUSED = 1, 0, -1, -2, -3

# The capsule names a consumer gives the capsules it takes.
USED_NAMES = (b"used_dltensor_versioned", b"used_dltensor")

# The interpreter's own (ctypes.pythonapi: the program and what it loaded).
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)


def library(maps="/proc/self/maps"):
    """The path of the libpython this interpreter runs from, as mapped in
    this OS process (the file under the library's own name), as bytes. Where
    no maps can be read, its name, which the library's dlopen(RTLD_NOLOAD)
    finds among the loaded libraries. Raises RuntimeError when the
    interpreter has no shared libpython loaded: the library binds the C API
    from that file, and loads nothing."""
    name = sysconfig.get_config_var("INSTSONAME")
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or not name:
        raise RuntimeError("tensor_blob: this Python was built without a shared libpython to bind its C API from")
    try:
        with open(maps) as lines:
            paths = [fields[5].strip() for fields in (line.split(None, 5) for line in lines) if len(fields) == 6]
    except OSError:
        return name.encode()
    for path in paths:
        if os.path.basename(path) == name:
            return path.encode()
    raise RuntimeError(f"tensor_blob: this Python's libpython ({name}) is not loaded in this process: "
                       "its interpreter is linked into the program")


def configure(abi):
    """Makes the library's builtins from the PyMethodDefs whose addresses
    the library gave (tensor_blob_python:python_bind/1), as any builtin is made:
    PyCFunction_NewEx(def, NULL, NULL)."""
    global capsule_from_slot, take_capsule, take_api, object_from_api
    global capsules_from_batch, objects_from_batch, take_many, tree, take_tree
    abi = {k.decode() if isinstance(k, bytes) else k: v for k, v in abi.items()}
    new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
        ("PyCFunction_NewEx", ctypes.pythonapi)
    )
    capsule_from_slot = new(abi["capsule_from_slot"], None, None)
    take_capsule = new(abi["take_capsule"], None, None)
    take_api = new(abi["take_api"], None, None)
    object_from_api = new(abi["object_from_api"], None, None)
    capsules_from_batch = new(abi["capsules_from_batch"], None, None)
    objects_from_batch = new(abi["objects_from_batch"], None, None)
    take_many = new(abi["take_many"], None, None)
    tree = new(abi["tree"], None, None)
    take_tree = new(abi["take_tree"], None, None)


class Exported:
    """What NumPy's from_dlpack asks: an object with __dlpack__, handing its
    capsule once."""

    __slots__ = ("_capsule",)

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        capsule, self._capsule = self._capsule, None
        if capsule is None:
            raise BufferError("tensor_blob: this export was consumed already")
        return capsule

    def __dlpack_device__(self):
        return (1, 0)


def to_torch(k):
    import torch

    return torch.from_dlpack(capsule_from_slot(k))


def torch_api():
    """Whether torch.Tensor offers DLPack 1.3's C exchange API (the library
    then exports versioned and calls to_torch_api)."""
    import torch

    return getattr(torch.Tensor, EXCHANGE_API, None) is not None


def to_torch_api(k):
    """A PyTorch tensor over the versioned export in slot k, made by
    PyTorch's managed_tensor_to_py_object_no_sync."""
    import torch

    return object_from_api(getattr(torch.Tensor, EXCHANGE_API), k)


def to_numpy(k):
    import numpy

    return numpy.from_dlpack(Exported(capsule_from_slot(k)))


def describe():
    """This Python's version, and PyTorch's and NumPy's (None when absent)."""
    import importlib.util
    import sys

    def version(name):
        if importlib.util.find_spec(name) is None:
            return None
        return __import__(name).__version__.encode()

    return (sys.version.split()[0].encode(), version("torch"), version("numpy"))


# The producer types found to speak DLPack before 1.0 (their __dlpack__
# takes no max_version): asked once per type. Held weakly: a type, and
# through its methods' globals whatever its module holds, goes when its
# producer does.
_legacy_types = weakref.WeakSet()


def _capsule_of(obj):
    """obj's DLPack capsule, by __dlpack__: versioned where it takes
    max_version."""
    dlpack = getattr(obj, "__dlpack__", None)
    if dlpack is None:
        raise TypeError(f"a {type(obj).__name__} has no __dlpack__: not a DLPack producer")
    if type(obj) in _legacy_types:
        return dlpack()
    try:
        return dlpack(max_version=(1, 0))
    except TypeError:
        _legacy_types.add(type(obj))
        return dlpack()


# A container's shape crosses as one bytes object, its description (a
# Pythonx object for each key and leaf would cost more than the tensors).
# The library's builtins tree and take_tree read and write it in C, in one
# pass; _parse and _describe below are its reference in Python (the
# module's tests check the format with them):
#   node := b"t" (a tensor: the next one, in order)
#         | b"l" N b":" node*N                       (a list)
#         | b"d" N b":" (key node)*N                 (a dict)
#   key  := b"s" LEN b":" BYTES (str: UTF-8; bytes where it is not)
#         | b"a" LEN b":" BYTES (an atom's name: str) | b"i" INT b":"
def _parse(desc, pos, items):
    c = desc[pos]
    if c == 0x74:
        return next(items), pos + 1
    colon = desc.index(b":", pos)
    n, pos = int(desc[pos + 1:colon]), colon + 1
    if c == 0x6C:
        out = []
        for _ in range(n):
            value, pos = _parse(desc, pos, items)
            out.append(value)
        return out, pos
    if c != 0x64:
        raise ValueError("tensor_blob: a bad container description")
    out = {}
    for _ in range(n):
        key, pos = _parse_key(desc, pos)
        out[key], pos = _parse(desc, pos, items)
    return out, pos


def _parse_key(desc, pos):
    c, colon = desc[pos], desc.index(b":", pos)
    if c == 0x69:
        return int(desc[pos + 1:colon]), colon + 1
    n, start = int(desc[pos + 1:colon]), colon + 1
    raw = bytes(desc[start:start + n])
    try:
        return raw.decode(), start + n
    except UnicodeDecodeError:
        return raw, start + n


def many(k, how, desc):
    """The tensors of the batch in slot k, each made as how says (torch:
    from capsules; torch_api: by PyTorch's table; numpy), placed as desc
    describes."""
    if how == "numpy":
        import numpy

        items = [numpy.from_dlpack(Exported(c)) for c in capsules_from_batch(k)]
    elif how == "torch_api":
        import torch

        items = objects_from_batch(getattr(torch.Tensor, EXCHANGE_API), k)
    else:
        import torch

        items = [torch.from_dlpack(c) for c in capsules_from_batch(k)]
    return tree(desc, items)


def _describe(obj, items, apis, out):
    """Appends obj's description to out (dicts, lists and tuples of DLPack
    producers); each leaf's capsule, or the leaf and its type's table, to
    items and apis."""
    if isinstance(obj, dict):
        out.append(b"d%d:" % len(obj))
        for key, value in obj.items():
            if isinstance(key, str):
                key = key.encode()
            if isinstance(key, bytes):
                out.append(b"s%d:" % len(key))
                out.append(key)
            elif isinstance(key, int) and not isinstance(key, bool):
                out.append(b"i%d:" % key)
            else:
                raise TypeError(f"a dict key of type {type(key).__name__}: keys must be str, bytes or int")
            _describe(value, items, apis, out)
    elif isinstance(obj, (list, tuple)):
        out.append(b"l%d:" % len(obj))
        for value in obj:
            _describe(value, items, apis, out)
    else:
        api = getattr(type(obj), EXCHANGE_API, None)
        if api is None:
            items.append(_capsule_of(obj))
            apis.append(None)
        else:
            items.append(obj)
            apis.append(api)
        out.append(b"t")


def take_all(obj, k):
    """Puts a batch of the tensors of obj (nested dicts, lists and tuples
    of DLPack producers) in slot k, with obj's description, its tensors in
    the batch's order; one walk in C (take_tree)."""
    take_tree(obj, _capsule_of, k)


def take(obj, k):
    """Puts obj's managed tensor in slot k: through its type's DLPack C
    exchange API where it has one, else through __dlpack__, its capsule
    marked used."""
    api = getattr(type(obj), EXCHANGE_API, None)
    if api is not None:
        taken = take_api(obj, api, k)
        if taken != TAKEN:
            _refuse(type(obj).__name__, None, taken, k)
        return
    dlpack = getattr(obj, "__dlpack__", None)
    if dlpack is None:
        raise TypeError(f"a {type(obj).__name__} has no __dlpack__: not a DLPack producer")
    if type(obj) in _legacy_types:
        capsule = dlpack()
    else:
        try:
            capsule = dlpack(max_version=(1, 0))
        except TypeError:
            _legacy_types.add(type(obj))
            capsule = dlpack()
    taken = take_capsule(capsule, k)
    if taken != TAKEN:
        _refuse(type(obj).__name__, capsule, taken, k)


def _refuse(producer, capsule, taken, k):
    what = f"__dlpack__ of a {producer} gave" if capsule is not None else f"the DLPack C exchange API of a {producer} gave"
    if taken == HOLDS_NULL:
        raise ValueError(f"{what} a DLPack capsule holding NULL")
    if taken == ODD_ADDRESS:
        raise ValueError(f"{what} a DLPack capsule at an odd address")
    if taken == SLOT_REFUSED:
        raise BufferError(f"tensor_blob: slot {k} is not open and empty")
    if type(capsule).__name__ == "PyCapsule":
        for name in USED_NAMES:
            if _capsule_is_valid(capsule, name):
                raise ValueError(f"{what} a capsule a consumer took already ({name.decode()})")
    raise TypeError(f"{what} a {type(capsule).__name__}, not a DLPack capsule")
