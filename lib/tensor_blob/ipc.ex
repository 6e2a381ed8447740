defmodule TensorBlob.IPC do
  @moduledoc """
  Tensors shared between OS processes (CPU: POSIX shared memory).

      # in one OS process
      handle = TensorBlob.IPC.export(t)          # %TensorBlob.IPC.Handle{}
      send_somehow(handle.handle)                # the region's name, a binary

      # in another
      t2 = TensorBlob.IPC.open(name, :float32, {1024, 1024})

  Within one OS process, to show both ends:

      iex> handle = TensorBlob.IPC.export(TensorBlob.IPC.zeros({4}, :uint8))
      iex> opened = TensorBlob.IPC.open(handle.handle, :uint8, {4})
      iex> TensorBlob.Tensor.write!(opened, <<1, 2, 3, 4>>)
      iex> TensorBlob.Tensor.to_binary(handle.tensor)
      <<1, 2, 3, 4>>
      iex> TensorBlob.IPC.open(%{handle | address: 0}, :uint8, {4})
      ** (TensorBlob.Error) handle: a CUDA IPC handle (device 0): CUDA IPC is not supported by this build; only CPU shared memory is

  Both tensors map the same memory: writes through one are read through the
  other. A tensor made by `zeros/2` (or `open/3`) is exported without a copy;
  any other CPU tensor is copied once into a new region. Regions are created
  with owner-only permissions (0600).

  The name lives while the exporting handle's tensor is reachable in the
  exporting VM: open it elsewhere before dropping it (a mapping stays valid
  after that). Re-exporting a tensor made by `open/3` hands on the same name,
  which still lives only as long as the creator's tensor. Handles follow Nx's `%Nx.Pointer{kind: :ipc}`: `handle` is
  the name, `address` is nil for CPU memory (a device index for CUDA), and
  `open/3` takes an `%Nx.Pointer{}` as well. CUDA IPC handles (an integer
  `address`) are not supported yet: `open/3` raises `TensorBlob.Error` for
  them (the Erlang API, `:tensor_blob.ipc_open/3`, decides so for both).
  """

  import TensorBlob.Raise

  alias TensorBlob.Tensor

  defmodule Handle do
    @moduledoc "An exported region: `handle` (its name), `data_size` in bytes, and the exporter's `tensor`."
    defstruct kind: :ipc, handle: nil, address: nil, data_size: 0, tensor: nil

    @type t :: %__MODULE__{kind: :ipc, handle: binary(), address: nil, data_size: non_neg_integer(), tensor: Tensor.t()}
  end

  @doc "A tensor of zeros in a new shared-memory region."
  @spec zeros(tuple(), Tensor.dtype()) :: Tensor.t()
  def zeros(shape, dtype), do: translating(do: Tensor.wrap(:tensor_blob.ipc_zeros(shape, dtype)))

  @doc """
  Removes the shared-memory names of creators that are gone (a VM that
  halted runs no destructor) and returns how many. Done at load too.
  """
  @spec reclaim() :: non_neg_integer()
  def reclaim, do: :tensor_blob.ipc_reclaim()

  @doc "A handle for a CPU tensor's memory (copied once unless it was made by `zeros/2` or `open/3`)."
  @spec export(Tensor.t()) :: Handle.t()
  def export(tensor) do
    %{handle: name, data_size: size, tensor: shared} = translating(do: :tensor_blob.ipc_export(Tensor.ref(tensor)))
    shared = if shared == Tensor.ref(tensor), do: tensor, else: Tensor.wrap(shared)
    %Handle{handle: name, data_size: size, tensor: shared}
  end

  @doc """
  A tensor over the region a handle names: a `%Handle{}`, an
  `%Nx.Pointer{kind: :ipc}` (or any map with `kind: :ipc` and `handle`), or
  the name itself. The region must hold `shape` of `dtype`.
  """
  @spec open(Handle.t() | map() | binary(), Tensor.dtype(), tuple()) :: Tensor.t()
  def open(handle, dtype, shape) do
    translating(do: Tensor.wrap(:tensor_blob.ipc_open(handle, dtype, shape)))
  end
end
