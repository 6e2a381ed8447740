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

  alias TensorBlob.{Blob, DLPack}

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
          :device => :cpu | {:cuda, non_neg_integer()},
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

  def info(other), do: raise(ArgumentError, "expected a DLPack capsule or a blob, got #{inspect(other)}")

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
end
