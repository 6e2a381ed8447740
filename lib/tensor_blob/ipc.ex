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

  The Erlang API is `:tensor_blob_ipc`.
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
  def zeros(shape, dtype), do: translating(do: Tensor.wrap(:tensor_blob_ipc.zeros(shape, dtype)))

  @doc """
  Releases what creators that are gone left in shared memory (their lock is
  free: a VM that halted runs no destructor, and its reaper may have died
  with it, as when it was its PID namespace's init): the references their
  journals list in PyTorch-format headers (a name whose count that takes to
  zero is removed), then their plain names; returns how many plain names
  were removed. Done at load too.
  """
  @spec reclaim() :: non_neg_integer()
  def reclaim, do: :tensor_blob_ipc.reclaim()

  @doc """
  A handle for a tensor's memory: a shared-memory region for a CPU tensor
  (copied once unless it was made by `zeros/2` or `open/3`), a CUDA IPC
  handle for a CUDA tensor (no copy unless it is not contiguous).
  """
  @spec export(Tensor.input()) :: Handle.t()
  def export(tensor) do
    %{handle: handle, address: address, data_size: size, tensor: shared} =
      reported({__MODULE__, :export, 1}, do: :tensor_blob_ipc.export(Tensor.ref(tensor)))

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
    do: translating(do: Tensor.wrap(:tensor_blob_ipc.torch_zeros(shape, dtype)))

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
      reported({__MODULE__, :export_torch, 1}, do: :tensor_blob_ipc.torch_export(Tensor.ref(tensor)))

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
    translating(do: Tensor.wrap(:tensor_blob_ipc.open(handle, dtype, shape)))
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
    |> badarg!(:unsupported, :handle)
  end

  def to_map(other),
    do:
      "handle: expected an IPC handle (TensorBlob.IPC.export/2), got #{inspect_term(other)}"
      |> badarg!(:bad_value, :handle)

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

  # The longest JSON line open/1 reads: a region's name is at most 255
  # bytes, and a dtype and the sizes of a shape fit many times over.
  @max_line 8192

  # The fields of a map from outside.
  @fields [:handle, :dtype, :shape, :data_size]

  @doc """
  A tensor over the region a map names: the map `to_map/1` gives, or the
  one the Python module's `tensor_blob.export(t)` and
  `tensor_blob.describe(shm, dtype, shape)` print (its JSON text, or the
  map with string or atom keys `handle`, `dtype`, `shape` and an optional
  `data_size`). The same as `open(spec["handle"], dtype, shape)`.

  The map comes from outside the VM, and is read as such: a line is at
  most #{@max_line} bytes, the dtype is looked up in the library's dtype
  table (`TensorBlob.tables/0`: a name or an alias, as a string or an
  atom), and a missing or malformed field raises `ArgumentError` naming
  it.
  """
  @spec open(map() | String.t()) :: Tensor.t()
  def open(spec) when is_binary(spec) do
    if byte_size(spec) > @max_line do
      ("expected a shared tensor's map as one line of JSON of at most #{@max_line} bytes " <>
         "(a region's name, a dtype and a shape), got #{byte_size(spec)} bytes")
      |> badarg!(:bad_value, :spec)
    end

    case TensorBlob.IPC.JSON.decode(spec) do
      {:ok, map} when is_map(map) ->
        open(map)

      {:error, {:duplicate_key, key}} ->
        # Decoders disagree on a repeated key's value: refused, whichever.
        field = Enum.find(@fields, :spec, &(Atom.to_string(&1) == key))

        ("#{field}: the JSON names the key #{TensorBlob.Raise.inspect_term(key)} more than once; " <>
           "decoders differ on which value a repeated key has (the first or the last), so a map that " <>
           "repeats one is refused")
        |> badarg!(:bad_value, field)

      _ ->
        ("expected a shared tensor's map as JSON " <>
           ~s({"handle": ..., "dtype": ..., "shape": [...]}, got: #{TensorBlob.Raise.inspect_term(spec)}))
        |> badarg!(:bad_value, :spec)
    end
  end

  def open(%{} = spec) do
    name = spec_handle(field(spec, :handle))
    {dtype, element_size} = spec_dtype(field(spec, :dtype))
    shape = spec_shape(field(spec, :shape))
    spec_data_size(field(spec, :data_size), bytes(shape, element_size), dtype, shape)
    open(name, dtype, List.to_tuple(shape))
  end

  def open(spec) do
    ("expected a shared tensor's map (with handle, dtype and shape) or its line of JSON, " <>
       "got: #{TensorBlob.Raise.inspect_term(spec)}")
    |> badarg!(:bad_value, :spec)
  end

  # A field of a map from outside: its atom key or its string key, :missing
  # where it has neither.
  defp field(spec, key) do
    case spec do
      %{^key => value} -> value
      %{} -> Map.get(spec, Atom.to_string(key), :missing)
    end
  end

  defp spec_handle(name) when is_binary(name), do: name

  defp spec_handle(:missing),
    do: badarg!("handle: the map names no region (a handle such as \"/torch_...\" is required)", :missing, :handle)

  defp spec_handle(other),
    do:
      badarg!(
        "handle: expected a region's name (a string), got #{TensorBlob.Raise.inspect_term(other)}",
        :bad_value,
        :handle
      )

  # The dtype's canonical atom and element size, from the library's dtype
  # table: never the atom table (a string from outside names a dtype before
  # any module that spells it is loaded).
  defp spec_dtype(missing) when missing in [:missing, nil],
    do: badarg!("dtype: the map names no dtype (one of #{dtype_names()})", :missing, :dtype)

  defp spec_dtype(dtype) when is_binary(dtype) or (is_atom(dtype) and not is_boolean(dtype)) do
    text = to_string(dtype)

    found =
      Enum.find(TensorBlob.tables().dtypes, fn d ->
        Atom.to_string(d.name) == text or Enum.any?(d.aliases, &(Atom.to_string(&1) == text))
      end)

    case found do
      %{name: name, element_size: size} ->
        {name, size}

      nil ->
        "dtype: unknown dtype #{TensorBlob.Raise.inspect_term(dtype)} (one of #{dtype_names()})"
        |> badarg!(:bad_dtype, :dtype)
    end
  end

  defp spec_dtype(other),
    do:
      badarg!(
        "dtype: expected a dtype's name (a string), got #{TensorBlob.Raise.inspect_term(other)} (one of #{dtype_names()})",
        :bad_dtype,
        :dtype
      )

  defp dtype_names, do: Enum.map_join(TensorBlob.tables().dtypes, ", ", &Atom.to_string(&1.name))

  defp spec_shape(:missing),
    do: badarg!("shape: the map has no shape (a list of sizes, such as [2, 3])", :missing, :shape)

  defp spec_shape(shape) when is_tuple(shape), do: spec_shape(Tuple.to_list(shape), shape)
  defp spec_shape(shape), do: spec_shape(shape, shape)

  # A proper list of non-negative integers, checked element by element (an
  # improper list, or anything else, is refused without Enum).
  defp spec_shape(list, given) do
    if sizes?(list),
      do: list,
      else:
        badarg!(
          "shape: expected a list of sizes (non-negative integers), got #{TensorBlob.Raise.inspect_term(given)}",
          :bad_shape,
          :shape
        )
  end

  # The bytes a shape needs, counted up to 2^64 at most (past that no
  # region holds it, and a product of huge sizes is not worth computing).
  defp bytes(shape, element_size) do
    Enum.reduce_while(shape, element_size, fn n, acc ->
      if acc * n > 0xFFFFFFFFFFFFFFFF, do: {:halt, 0x10000000000000000}, else: {:cont, acc * n}
    end)
  end

  defp sizes?([]), do: true
  defp sizes?([n | rest]) when is_integer(n) and n >= 0, do: sizes?(rest)
  defp sizes?(_), do: false

  defp spec_data_size(:missing, _needed, _dtype, _shape), do: :ok
  defp spec_data_size(size, needed, _dtype, _shape) when is_integer(size) and size >= needed, do: :ok

  defp spec_data_size(size, needed, dtype, shape) when is_integer(size) and size >= 0,
    do:
      badarg!(
        "data_size: #{size} bytes is less than the #{needed} that #{dtype} #{inspect(shape)} needs",
        :bad_value,
        :data_size
      )

  defp spec_data_size(other, _needed, _dtype, _shape),
    do:
      badarg!(
        "data_size: expected the region's data bytes (a non-negative integer), got #{TensorBlob.Raise.inspect_term(other)}",
        :bad_value,
        :data_size
      )
end
