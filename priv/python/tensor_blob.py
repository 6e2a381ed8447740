"""Tensors shared with a BEAM node that runs tensor_blob, on this machine.

Shipped with tensor_blob (its priv/python folder), no installation needed:
put that folder on sys.path (or PYTHONPATH) and `import tensor_blob`.
From Elixir, `Path.join(:code.priv_dir(:tensor_blob), "python")` names it.

Both sides describe a shared tensor with the same small map, printed as one
line of JSON:

    {"handle": "/torch_tensor_blob.1234_0", "dtype": "float32", "shape": [2, 2], "data_size": 16}

`handle` names a POSIX shared-memory region (/dev/shm): one whose name
starts with `torch_` is in PyTorch's `file_system` format (a 64-byte header
holding a reference count, then the data), any other is a plain region (the
data from byte 0, as `multiprocessing.shared_memory` makes). `dtype` is a
tensor_blob dtype name (PyTorch's, without "torch."), `shape` the sizes,
`data_size` the region's data bytes. `TensorBlob.IPC.to_json/1` prints it
in Elixir and `TensorBlob.IPC.open/1` opens it there.

    open(spec)                 a tensor over the region a map names
    export(tensor)             the map of a CPU torch tensor, shared in
                               PyTorch's file_system format
    describe(shm, dtype, shape)
                               the map of a multiprocessing.shared_memory
                               block that holds a tensor

Works with PyTorch 1.13 and 2.x; plain regions open without PyTorch too
(as a memoryview).
"""

import json
import mmap
import os

__all__ = ["open", "export", "describe", "dumps", "loads"]

SHM_DIR = "/dev/shm"
TORCH_HEADER = 64  # PyTorch's map_alloc_alignment: the reference count, then padding

# The element size of each tensor_blob dtype, and its struct format where
# memoryview has one.
_DTYPES = {
    "bool": (1, "?"),
    "uint8": (1, "B"),
    "int8": (1, "b"),
    "int16": (2, "h"),
    "int32": (4, "i"),
    "int64": (8, "q"),
    "uint16": (2, "H"),
    "uint32": (4, "I"),
    "uint64": (8, "Q"),
    "float16": (2, "e"),
    "bfloat16": (2, None),
    "float32": (4, "f"),
    "float64": (8, "d"),
    "complex32": (4, None),
    "complex64": (8, None),
    "complex128": (16, None),
    "float8_e4m3fn": (1, None),
    "float8_e5m2": (1, None),
}


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError("tensor_blob: this needs PyTorch (Debian: apt-get install python3-torch)") from None
    return torch


def loads(text):
    """The map from its JSON text."""
    return json.loads(text)


def dumps(spec):
    """The map as one line of JSON, as TensorBlob.IPC.open/1 takes it."""
    return json.dumps(spec)


def _parse(spec):
    if isinstance(spec, (str, bytes)):
        spec = json.loads(spec)
    if not isinstance(spec, dict):
        raise TypeError("tensor_blob: expected the map tensor_blob prints (a dict or its JSON), got %r" % (spec,))
    missing = [k for k in ("handle", "dtype", "shape") if k not in spec]
    if missing:
        raise ValueError("tensor_blob: the map lacks %s: %r" % (", ".join(missing), spec))
    handle, dtype, shape = spec["handle"], spec["dtype"], spec["shape"]
    if dtype not in _DTYPES:
        raise ValueError("tensor_blob: unknown dtype %r (one of %s)" % (dtype, ", ".join(_DTYPES)))
    if not isinstance(handle, str) or not handle.strip("/") or "/" in handle.strip("/"):
        raise ValueError("tensor_blob: handle %r is not a shared-memory region's name" % (handle,))
    if not all(isinstance(n, int) and n >= 0 for n in shape):
        raise ValueError("tensor_blob: shape %r is not a list of sizes" % (shape,))
    count = 1
    for n in shape:
        count *= n
    nbytes = count * _DTYPES[dtype][0]
    data_size = spec.get("data_size", nbytes)
    if data_size < nbytes:
        raise ValueError("tensor_blob: %s %r needs %d bytes, the region holds %d" % (dtype, shape, nbytes, data_size))
    return handle.strip("/"), dtype, tuple(shape), count, nbytes, data_size


def is_torch_region(handle):
    """Whether a region's name is of PyTorch's file_system format."""
    return handle.strip("/").startswith("torch_")


def _untyped(tensor):
    # Tensor.untyped_storage() is PyTorch 2's; 1.13 has storage().untyped().
    if hasattr(tensor, "untyped_storage"):
        return tensor.untyped_storage()
    return tensor.storage().untyped()


def _torch_dtype(torch, dtype):
    found = getattr(torch, dtype, None)
    if not isinstance(found, torch.dtype):
        raise ValueError("tensor_blob: PyTorch %s has no dtype %s" % (torch.__version__, dtype))
    return found


def open(spec, *, torch=None):
    """A tensor over the region `spec` names (a dict, or its JSON text).

    A region in PyTorch's format opens as PyTorch opens the storages
    torch.multiprocessing sends: the process takes a reference in the
    header, gives it back when the storage is freed, and whichever side
    drops the last one removes the name. A plain region is mapped; the
    mapping lives while the tensor does (it outlives the name).

    The result is a torch.Tensor when PyTorch imports (torch=True requires
    it), else a memoryview of the shape (torch=False asks for one; dtypes
    without a struct format, such as bfloat16, need PyTorch)."""
    name, dtype, shape, count, nbytes, data_size = _parse(spec)
    if torch is None:
        try:
            import torch as _t  # noqa: F401
            torch = True
        except ImportError:
            torch = False
    if is_torch_region(name):
        if not torch:
            raise ValueError("tensor_blob: a region in PyTorch's format (%s) opens as a torch tensor only" % name)
        return _open_torch_region(name, dtype, shape, data_size)
    view = _map(name, nbytes)
    if torch:
        return _buffer_tensor(view, dtype, shape, count)
    fmt = _DTYPES[dtype][1]
    if fmt is None:
        raise ValueError("tensor_blob: a memoryview cannot hold %s: open it with PyTorch" % dtype)
    return view.cast("B").cast(fmt, shape) if shape else view.cast(fmt)


def _open_torch_region(name, dtype, shape, data_size):
    torch = _torch()
    dt = _torch_dtype(torch, dtype)
    # The call torch.multiprocessing.reductions.rebuild_storage_filename
    # makes (1.13 and 2.x); an empty manager handle starts PyTorch's
    # torch_shm_manager if none runs.
    storage = torch.UntypedStorage._new_shared_filename_cpu(b"", ("/" + name).encode(), data_size)
    strides = []
    step = 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= max(n, 1)
    return torch.empty(0, dtype=dt).set_(storage, 0, shape, tuple(strides))


def _map(name, nbytes):
    """The region's first nbytes, mapped: a memoryview that keeps the
    mapping alive. os.open, not SharedMemory: attaching through
    multiprocessing.shared_memory hands the block to this process's
    resource tracker, which removes its name when the process exits."""
    fd = os.open(os.path.join(SHM_DIR, name), os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        if size < nbytes:
            raise ValueError("tensor_blob: region %s holds %d bytes, the tensor needs %d" % (name, size, nbytes))
        if size == 0:
            return memoryview(bytearray())
        return memoryview(mmap.mmap(fd, size))[:nbytes]
    finally:
        os.close(fd)


def _buffer_tensor(view, dtype, shape, count):
    torch = _torch()
    dt = _torch_dtype(torch, dtype)
    if count == 0:
        return torch.empty(shape, dtype=dt)
    # frombuffer keeps the buffer (and so the mapping) alive with the tensor.
    return torch.frombuffer(view, dtype=dt, count=count).view(shape)


def export(tensor):
    """The map of a CPU torch tensor, shared in PyTorch's file_system format
    (moved into shared memory first, as Tensor.share_memory_() does, if it
    is not there yet): TensorBlob.IPC.open/1 opens it in the BEAM node.

    The tensor must be the whole of its storage (contiguous, from its
    start); for a view, export view.clone(). The name lives while a process
    holds a reference: keep the tensor until the BEAM node has opened it."""
    torch = _torch()
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("tensor_blob: export takes a torch.Tensor, got %r" % (type(tensor),))
    if tensor.device.type != "cpu":
        raise ValueError("tensor_blob: export shares CPU tensors; a %s tensor goes by CUDA IPC" % tensor.device)
    storage = _untyped(tensor)
    nbytes = tensor.numel() * tensor.element_size()
    if not tensor.is_contiguous() or tensor.storage_offset() != 0 or storage.nbytes() != nbytes:
        raise ValueError(
            "tensor_blob: the tensor is a view of a larger storage (or not contiguous): "
            "export tensor.clone(), a copy of exactly the tensor"
        )
    _manager, handle, size = storage._share_filename_cpu_()
    return {
        "handle": handle.decode(),
        "dtype": str(tensor.dtype).replace("torch.", ""),
        "shape": list(tensor.shape),
        "data_size": size,
    }


def describe(shm, dtype, shape):
    """The map of a multiprocessing.shared_memory.SharedMemory block that
    holds a `dtype` tensor of `shape` from its first byte. Its creator
    removes the name (shm.unlink()); a mapping made before stays valid."""
    spec = {"handle": "/" + shm.name.lstrip("/"), "dtype": dtype, "shape": list(shape)}
    _name, _dtype, _shape, _count, nbytes, _size = _parse(spec)
    if nbytes > shm.size:
        raise ValueError("tensor_blob: %s %r needs %d bytes, the block holds %d" % (dtype, list(shape), nbytes, shm.size))
    spec["data_size"] = nbytes
    return spec
