defmodule TensorBlob.IPC do
  @moduledoc """
  Tensors shared between OS processes: CPU tensors through POSIX shared
  memory, CUDA tensors through CUDA IPC handles.

      # in one OS process
      handle = TensorBlob.IPC.export(t)          # %TensorBlob.IPC.Handle{}
      send_somehow(handle)                       # or %{kind: :ipc, handle: ..., address: ...}

      # in another
      t2 = TensorBlob.IPC.open(handle, :float32, {1024, 1024})

  Within one OS process, to show both ends (CPU memory):

      iex> handle = TensorBlob.IPC.export(TensorBlob.IPC.zeros({4}, :uint8))
      iex> opened = TensorBlob.IPC.open(handle.handle, :uint8, {4})
      iex> TensorBlob.Tensor.write!(opened, <<1, 2, 3, 4>>)
      iex> TensorBlob.Tensor.to_binary(handle.tensor)
      <<1, 2, 3, 4>>

  Both tensors map the same memory: writes through one are read through the
  other. Handles follow Nx's `%Nx.Pointer{kind: :ipc}`, and `open/3` takes
  an `%Nx.Pointer{}` as well.

  ## CPU tensors

  `handle` is the name of a shared-memory region and `address` is nil. A
  tensor made by `zeros/2` (or `open/3`) is exported without a copy; any
  other CPU tensor is copied once into a new region. Regions are created
  with owner-only permissions (0600). The name lives while the exporting
  handle's tensor is reachable in the exporting VM: open it elsewhere before
  dropping it (a mapping stays valid after that). Re-exporting a tensor made
  by `open/3` hands on the same name, which still lives only as long as the
  creator's tensor.

  ## CUDA tensors

  `handle` is the `cudaIpcMemHandle_t` of the tensor's allocation and
  `address` is its device index (Torchx's convention). A handle names a
  whole allocation, and libtorch's caching allocator places tensors inside
  larger ones, so a tensor that does not start at its allocation's base
  carries its byte offset: the handle is then 72 bytes (the 64-byte
  `cudaIpcMemHandle_t`, then the offset as an unsigned 64-bit
  little-endian integer) instead of 64. A 64-byte handle, Torchx's too,
  means offset 0; Torchx refuses a 72-byte one rather than read the wrong
  place.

  Export copies nothing unless the tensor is not contiguous (then a
  contiguous copy on the device is shared, and is the handle's `tensor`),
  and waits until the work libtorch queued on the memory is done. `open/3`
  maps the allocation (`cudaIpcOpenMemHandle`) on the device the handle
  names, checks that it holds `shape` of `dtype` from the offset, and gives
  a CUDA tensor whose `Tensor.memory/1` is `:ipc`; the last tensor over the
  mapping (slices included) closes it, once. `TensorBlob.CUDA.runtime/0`
  counts open mappings (`ipc_mappings`).

  The exporter must keep the handle's `tensor` reachable until every opener
  has dropped its tensors: when it is freed, its memory returns to
  libtorch's allocator, which hands it to the next tensor, and openers would
  read that. A handle opens only in another OS process (CUDA refuses the
  exporter's own). Re-exporting a tensor made by `open/3` hands on the
  exporter's handle. Builds and machines that cannot do CUDA IPC (built
  with `TB_CUDA=0`, a libtorch without CUDA, no runtime or GPU) raise
  `TensorBlob.Error` from `open/3`, saying which.
  """

  import TensorBlob.Raise

  alias TensorBlob.Tensor

  defmodule Handle do
    @moduledoc """
    An exported tensor: `handle` (a region's name, or a CUDA IPC handle),
    `address` (nil, or the CUDA device index), `data_size` in bytes, and the
    exporter's `tensor`, which keeps the memory alive.
    """
    defstruct kind: :ipc, handle: nil, address: nil, data_size: 0, tensor: nil

    @type t :: %__MODULE__{
            kind: :ipc,
            handle: binary(),
            address: nil | non_neg_integer(),
            data_size: non_neg_integer(),
            tensor: Tensor.t()
          }
  end

  @doc "A tensor of zeros in a new shared-memory region."
  @spec zeros(tuple(), Tensor.dtype()) :: Tensor.t()
  def zeros(shape, dtype), do: translating(do: Tensor.wrap(:tensor_blob.ipc_zeros(shape, dtype)))

  @doc """
  Releases what creators that are gone left in shared memory (their lock is
  free: a VM that halted runs no destructor, and its reaper may have died
  with it, as when it was its PID namespace's init): the references their
  journals list in PyTorch-format headers (a name whose count that takes to
  zero is removed), then their plain names; returns how many plain names
  were removed. Done at load too.
  """
  @spec reclaim() :: non_neg_integer()
  def reclaim, do: :tensor_blob.ipc_reclaim()

  @doc """
  A handle for a tensor's memory: a shared-memory region for a CPU tensor
  (copied once unless it was made by `zeros/2` or `open/3`), a CUDA IPC
  handle for a CUDA tensor (no copy unless it is not contiguous).
  """
  @spec export(Tensor.input()) :: Handle.t()
  def export(tensor) do
    %{handle: handle, address: address, data_size: size, tensor: shared} =
      reported({__MODULE__, :export, 1}, do: :tensor_blob.ipc_export(Tensor.ref(tensor)))

    shared = if shared == Tensor.ref(tensor) and is_struct(tensor, Tensor), do: tensor, else: Tensor.wrap(shared)
    address = if address == :undefined, do: nil, else: address
    %Handle{handle: handle, address: address, data_size: size, tensor: shared}
  end

  @doc """
  A tensor of zeros in a new region of PyTorch's CPU sharing format (the
  `file_system` strategy): a 64-byte header that holds a reference count,
  then the data. `export_torch/1` shares it without a copy.
  """
  @spec torch_zeros(tuple(), Tensor.dtype()) :: Tensor.t()
  def torch_zeros(shape, dtype),
    do: translating(do: Tensor.wrap(:tensor_blob.ipc_torch_zeros(shape, dtype)))

  @doc """
  A handle a PyTorch process opens with
  `torch.UntypedStorage._new_shared_filename_cpu(b"", name, data_size)`
  (the call `torch.multiprocessing` makes to rebuild a `file_system`
  storage). A tensor made by `torch_zeros/2`, or opened from a PyTorch
  region, is shared without a copy; any other CPU tensor is copied once.
  Each side holds one reference in the region's header while it maps it;
  whoever drops the last one removes the name, whichever side that is.
  """
  @spec export_torch(Tensor.input()) :: Handle.t()
  def export_torch(tensor) do
    %{handle: handle, data_size: size, tensor: shared} =
      reported({__MODULE__, :export_torch, 1}, do: :tensor_blob.ipc_torch_export(Tensor.ref(tensor)))

    shared = if shared == Tensor.ref(tensor) and is_struct(tensor, Tensor), do: tensor, else: Tensor.wrap(shared)
    %Handle{handle: handle, address: nil, data_size: size, tensor: shared}
  end

  @doc """
  A tensor over the memory a handle names: a `%Handle{}`, an
  `%Nx.Pointer{kind: :ipc}` (or any map with `kind: :ipc` and `handle`), or
  a region's name. With an integer `address` the handle is a CUDA IPC
  handle of that device. The memory must hold `shape` of `dtype`.

  A name that starts with `torch_` is a region in PyTorch's CPU sharing
  format (PyTorch's `/torch_<pid>_<n>_<k>`, or one of `export_torch/1`):
  the tensor is its data, after the 64-byte header, and holds one
  reference in that header until the last tensor over it is freed, as
  PyTorch's own openers do.
  """
  @spec open(Handle.t() | map() | binary(), Tensor.dtype(), tuple()) :: Tensor.t()
  def open(handle, dtype, shape) do
    translating(do: Tensor.wrap(:tensor_blob.ipc_open(handle, dtype, shape)))
  end

  @doc """
  A handle of a CPU region as the map that other languages read: its
  `handle` (the region's name), `dtype` and `shape` (of the exporting
  tensor) and `data_size`, with string keys. The `tensor_blob` Python
  module shipped in the library's `priv/python` opens it
  (`tensor_blob.open(spec)`); `to_json/1` prints it.

      iex> handle = TensorBlob.IPC.export_torch(TensorBlob.IPC.torch_zeros({2, 2}, :float32))
      iex> spec = TensorBlob.IPC.to_map(handle)
      iex> {spec["dtype"], spec["shape"], spec["data_size"]}
      {"float32", [2, 2], 16}
  """
  @spec to_map(Handle.t()) :: %{String.t() => String.t() | [non_neg_integer()] | non_neg_integer()}
  def to_map(%Handle{address: nil, handle: name, data_size: size, tensor: tensor}) do
    %{
      "handle" => name,
      "dtype" => to_string(Tensor.dtype(tensor)),
      "shape" => Tuple.to_list(Tensor.shape(tensor)),
      "data_size" => size
    }
  end

  def to_map(%Handle{address: device}) when is_integer(device) do
    ("a CUDA IPC handle has no map for other languages: " <>
       "PyTorch takes CUDA tensors by TensorBlob.CUDA.export_torch_share/1")
    |> badarg!(:unsupported, :none)
  end

  @doc """
  `to_map/1` as one line of JSON, for a Python process (or any other) to
  read: `tensor_blob.open(line)` in the shipped Python module.

      iex> handle = TensorBlob.IPC.export(TensorBlob.IPC.zeros({3}, :int64))
      iex> TensorBlob.IPC.to_json(handle) == ~s({"handle": "\#{handle.handle}", "dtype": "int64", "shape": [3], "data_size": 24})
      true
  """
  @spec to_json(Handle.t()) :: String.t()
  def to_json(handle) do
    spec = to_map(handle)
    TensorBlob.IPC.JSON.encode_object(for k <- ~w(handle dtype shape data_size), do: {k, spec[k]})
  end

  @doc """
  A tensor over the region a map names: the map `to_map/1` gives, or the
  one the Python module's `tensor_blob.export(t)` and
  `tensor_blob.describe(shm, dtype, shape)` print (its JSON text, or the
  map with string or atom keys `handle`, `dtype`, `shape`). The same as
  `open(spec["handle"], dtype, shape)`.
  """
  @spec open(map() | String.t()) :: Tensor.t()
  def open(spec) when is_binary(spec) do
    case TensorBlob.IPC.JSON.decode(spec) do
      {:ok, map} when is_map(map) ->
        open(map)

      _ ->
        ("expected a shared tensor's map as JSON " <>
           ~s({"handle": ..., "dtype": ..., "shape": [...]}, got: #{inspect(spec)}))
        |> badarg!(:bad_value, :none)
    end
  end

  def open(%{} = spec) do
    field = fn key -> Map.get(spec, key, Map.get(spec, Atom.to_string(key))) end

    with name when is_binary(name) <- field.(:handle),
         dtype when is_binary(dtype) or is_atom(dtype) <- field.(:dtype),
         shape when is_list(shape) <- field.(:shape),
         true <- Enum.all?(shape, &(is_integer(&1) and &1 >= 0)) do
      open(name, dtype_atom(dtype), List.to_tuple(shape))
    else
      _ ->
        ("expected a shared tensor's map with handle (a region's name), " <>
           "dtype and shape (a list of sizes), got: #{inspect(spec)}")
        |> badarg!(:bad_value, :none)
    end
  end

  defp dtype_atom(dtype) when is_atom(dtype), do: dtype

  defp dtype_atom(dtype) do
    String.to_existing_atom(dtype)
  rescue
    ArgumentError ->
      "unknown dtype #{inspect(dtype)}"
      |> badarg!(:bad_dtype, :none)
  end
end
