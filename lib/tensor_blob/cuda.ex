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
  libtorch has CUDA).
  """
  @spec runtime() :: %{
          built: boolean(),
          runtime: boolean(),
          runtime_path: binary() | nil,
          devices: non_neg_integer(),
          libtorch: boolean()
        }
  def runtime, do: :tensor_blob.cuda_info()

  @doc "Waits until `device` has finished its queued work (on a dirty scheduler)."
  @spec synchronize(non_neg_integer()) :: :ok
  def synchronize(device \\ 0), do: translating(do: :tensor_blob.cuda_synchronize(device))

  @doc """
  Device, pointer, shape, strides and dtype of a DLPack capsule (not
  consumed) or a blob, read without touching the memory and without a host
  copy, whatever the device and whether this build can view it.
  """
  @spec info(DLPack.t() | Blob.t()) :: %{
          device: :cpu | {:cuda, non_neg_integer()},
          ptr: non_neg_integer(),
          shape: tuple(),
          strides: [non_neg_integer()],
          dtype: atom()
        }
  def info(%DLPack{ref: ref}), do: translating(do: :tensor_blob.dlpack_info(ref))

  def info(%Blob{} = blob), do: Map.take(blob, [:device, :ptr, :shape, :strides, :dtype])

  def info(other), do: raise(ArgumentError, "expected a DLPack capsule or a blob, got #{inspect(other)}")
end
