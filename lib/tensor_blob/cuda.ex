defmodule TensorBlob.CUDA do
  @moduledoc """
  CUDA devices, as far as this build and machine can see them.

  The library loads and answers everywhere: without CUDA headers at build
  time (`TB_CUDA=0`), without libcudart, driver or GPU at run time, and with
  a libtorch built without CUDA (Debian's). Then `available?/0` is false,
  and operations that need a CUDA tensor raise `TensorBlob.Error` saying
  that this libtorch was built without CUDA; CUDA memory is never viewed as
  CPU memory. `info/1` still reads the metadata of CUDA memory.
  """

  import TensorBlob.Raise

  alias TensorBlob.{Blob, DLPack, Tensor}

  @doc "True when a CUDA device answers and the linked libtorch has CUDA."
  @spec available?() :: boolean()
  def available? do
    %{devices: n, libtorch: torch} = runtime()
    n > 0 and torch
  end

  @doc "CUDA devices the runtime sees (0 without a runtime, driver or GPU)."
  @spec device_count() :: non_neg_integer()
  def device_count, do: runtime().devices

  @doc """
  What this build knows: `built` (compiled with CUDA headers), `runtime`
  (libcudart found), `runtime_path` (its file: the one already loaded in the
  process, libtorch's, when there is one), `devices`, `libtorch` (the linked
  libtorch has CUDA), `ipc_mappings` (CUDA IPC handles opened by this build
  and not yet closed; see `TensorBlob.IPC`).
  """
  @spec runtime() :: %{
          built: boolean(),
          runtime: boolean(),
          runtime_path: binary() | nil,
          devices: non_neg_integer(),
          libtorch: boolean(),
          ipc_mappings: non_neg_integer()
        }
  def runtime, do: :tensor_blob.cuda_info()

  @doc "Waits until `device` has finished its queued work (on a dirty scheduler)."
  @spec synchronize(non_neg_integer()) :: :ok
  def synchronize(device \\ 0), do: translating(do: :tensor_blob.cuda_synchronize(device))

  @doc """
  Device, pointer, shape, strides and dtype of a DLPack capsule (not
  consumed) or a blob, read without touching the memory and without a host
  copy, whatever the device and whether this build can view it, and
  `memory`: what the CUDA runtime says the pointer is (see `memory/1`). A
  capsule's info also has `device_type` and `read_only` (`DLPack.info/1`).
  """
  @spec info(DLPack.t() | Blob.t()) :: %{
          :device => Tensor.device(),
          :ptr => non_neg_integer(),
          :shape => tuple(),
          :strides => [non_neg_integer()],
          :dtype => atom(),
          :memory => memory(),
          optional(atom()) => term()
        }
  def info(%DLPack{ref: ref}) do
    translating do
      info = :tensor_blob.dlpack_info(ref)
      Map.put(info, :memory, :tensor_blob.cuda_memory(info.ptr))
    end
  end

  def info(%Blob{} = blob) do
    blob |> Map.take([:device, :ptr, :shape, :strides, :dtype]) |> Map.put(:memory, memory(blob.ptr))
  end

  def info(other),
    do:
      "capsule: expected a DLPack capsule or a blob, got #{TensorBlob.Raise.inspect_term(other)}"
      |> badarg!(:bad_value, :capsule)

  @typedoc "What the CUDA runtime says memory is: the names of DLPack's device types, or `:unknown`."
  @type memory :: :cpu | :cuda_host | :cuda | :cuda_managed | :unknown

  @doc """
  What the CUDA runtime says the memory at an address is, without touching
  it: `:cpu` (ordinary host memory), `:cuda_host` (page-locked host memory),
  `:cuda` (device memory), `:cuda_managed` (managed memory), or `:unknown`
  (no runtime, driver or GPU, or the runtime cannot place it).

      iex> TensorBlob.CUDA.memory(0x1000) in [:cpu, :unknown]
      true
  """
  @spec memory(non_neg_integer()) :: memory()
  def memory(ptr), do: translating(do: :tensor_blob.cuda_memory(ptr))

  @typedoc """
  The eight fields of PyTorch's `storage._share_cuda_()`, by name: what
  `torch.multiprocessing` sends for a CUDA storage.
  """
  @type torch_share :: %{
          device: non_neg_integer(),
          handle: binary(),
          storage_size_bytes: non_neg_integer(),
          storage_offset_bytes: non_neg_integer(),
          ref_counter_handle: binary(),
          ref_counter_offset: non_neg_integer(),
          event_handle: binary(),
          event_sync_required: boolean()
        }

  @doc """
  A CUDA tensor over a storage a PyTorch process shared with
  `torch.multiprocessing` (`share` holds the fields of
  `storage._share_cuda_()`, see `t:torch_share/0`). `dtype` and `shape`
  say what the storage's bytes are, from its start.

  As PyTorch's own receivers do: libtorch's current stream waits on the
  producer's event when `event_sync_required`; the block is mapped and the
  tensor starts `storage_offset_bytes` into it. The producer counted this
  receiver in its counter file when it shared; the count is dropped by one
  when the last tensor over the storage is freed (after the work queued on
  it), so that the producer may free the memory. A share opens once.

  Not yet run on a GPU: see the guide "Sharing with Python and PyTorch".
  """
  @spec open_torch_share(torch_share(), Tensor.dtype(), tuple()) :: Tensor.t()
  def open_torch_share(share, dtype, shape) do
    translating(do: Tensor.wrap(:tensor_blob_ipc.cuda_torch_open(share, dtype, shape)))
  end

  @doc """
  A CUDA tensor in PyTorch's CUDA sharing format: the fields that
  `torch.UntypedStorage._new_shared_cuda(*fields)` takes (what
  `torch.multiprocessing.reductions.rebuild_cuda_tensor` calls), in the
  order of `t:torch_share/0`, plus `tensor` (the memory shared: the tensor,
  or a contiguous copy of it) and `counter` (the counter file), which this
  process keeps until `torch_share_pending/1` is 0.

  The work libtorch queued on the memory is finished before this returns,
  so `event_sync_required` is false. Not yet run on a GPU.
  """
  @spec export_torch_share(Tensor.input()) ::
          %{:tensor => Tensor.t(), :counter => Tensor.t(), optional(atom()) => term()}
  def export_torch_share(tensor) do
    export = reported({__MODULE__, :export_torch_share, 1}, do: :tensor_blob_ipc.cuda_torch_export(Tensor.ref(tensor)))

    shared =
      if export.tensor == Tensor.ref(tensor) and is_struct(tensor, Tensor), do: tensor, else: Tensor.wrap(export.tensor)

    %{export | tensor: shared, counter: Tensor.wrap(export.counter)}
  end

  @doc "Receivers of an `export_torch_share/1` that have not yet freed it: 1, then 0."
  @spec torch_share_pending(%{counter: Tensor.t(), ref_counter_offset: non_neg_integer()}) :: integer()
  def torch_share_pending(%{counter: counter, ref_counter_offset: slot}) do
    translating(do: :tensor_blob_ipc.cuda_torch_pending(%{counter: Tensor.ref(counter), ref_counter_offset: slot}))
  end

  def torch_share_pending(other) do
    ("export: expected what export_torch_share/1 returned (counter and ref_counter_offset), got " <>
       TensorBlob.Raise.inspect_term(other))
    |> badarg!(:bad_value, :export)
  end
end
