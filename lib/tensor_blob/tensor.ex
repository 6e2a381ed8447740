defmodule TensorBlob.Tensor do
  @moduledoc """
  A libtorch tensor held by the BEAM.

  Each `%TensorBlob.Tensor{}` holds one strong libtorch reference; the memory
  lives as long as any tensor using it. Functions that copy say so.

      iex> t = TensorBlob.Tensor.from_binary(<<1, 2, 3, 4, 5, 6>>, :uint8, {2, 3})
      iex> TensorBlob.Tensor.shape(t)
      {2, 3}
      iex> t |> TensorBlob.Tensor.transpose(0, 1) |> TensorBlob.Tensor.to_binary()
      <<1, 4, 2, 5, 3, 6>>
  """
  import TensorBlob.Raise

  @enforce_keys [:ref]
  defstruct [:ref]

  @type t :: %__MODULE__{ref: reference()}
  @type shape :: tuple()
  @type dtype :: atom() | {atom(), pos_integer()}

  @doc false
  def wrap(ref), do: %__MODULE__{ref: ref}

  @doc false
  def ref(%__MODULE__{ref: ref}), do: ref
  def ref(other), do: other

  @doc """
  A tensor over `binary` (row-major bytes).

  By default the bytes are copied into a new tensor. With `copy: false`,
  nothing is copied: the tensor is a read-only view of the binary's own
  bytes, and pins the binary until the last tensor using them is freed.
  `write!/2` raises on it, for a binary is immutable.

      t = Tensor.from_binary(payload, :float32, {1024, 1024}, copy: false)

  A binary of 64 bytes or less lives on a process heap, so the pin holds a
  copy of it and the tensor views that copy (read-only all the same).
  Bytes whose address is not a multiple of the element size raise
  `ArgumentError` (a part of a larger binary may start anywhere, and a
  binary of 64 bytes or less is aligned to 8 bytes only). `copy: :if_needed`
  views the bytes when they are aligned and copies them when they are not
  (`memory/1` then says `:owned`).
  """
  @spec from_binary(binary(), dtype(), shape(), copy: boolean() | :if_needed) :: t()
  def from_binary(binary, dtype, shape, opts \\ [])

  def from_binary(binary, dtype, shape, []) do
    translating(do: wrap(:tensor_blob.from_binary(binary, dtype, shape)))
  end

  def from_binary(binary, dtype, shape, opts) do
    translating(do: wrap(:tensor_blob.from_binary(binary, dtype, shape, copy_option(opts))))
  end

  @doc """
  The elements as row-major bytes.

  By default a copy, whatever the strides. With `copy: false`, nothing is
  copied: the binary shows the tensor's own memory, and keeps it alive as
  long as the binary lives (the tensor itself may be dropped). The tensor
  must be a contiguous CPU tensor, or `ArgumentError` is raised.

  A binary is immutable, so while such a binary lives, `write!/2` raises on
  every tensor whose memory overlaps it. Memory written by other means (a
  DLPack consumer, or foreign code given the pointer) shows through the
  binary: do not hand out a writable export of memory you have shown as a
  binary.
  """
  @spec to_binary(t(), copy: boolean()) :: binary()
  def to_binary(tensor, opts \\ [])
  def to_binary(tensor, []), do: translating(do: :tensor_blob.to_binary(ref(tensor)))

  def to_binary(tensor, opts) do
    translating(do: :tensor_blob.to_binary(ref(tensor), copy_option(opts)))
  end

  defp copy_option(copy: copy), do: %{copy: copy}

  defp copy_option(opts),
    do: raise(ArgumentError, "options: expected [copy: boolean or :if_needed], got #{inspect(opts)}")

  @doc "A new tensor of zeros."
  @spec zeros(shape(), dtype()) :: t()
  def zeros(shape, dtype), do: translating(do: wrap(:tensor_blob.zeros(shape, dtype)))

  @doc """
  Overwrites the elements in place with `binary` (row-major order). Every
  view of the same memory sees the new values. Returns the tensor.

  Raises `ArgumentError` on a read-only tensor (a DLPack import flagged
  READ_ONLY, a view of a binary's bytes, a view of a read-only tensor, and
  their slices), and while a binary made by `to_binary(t, copy: false)`
  shows any of the memory it would write.
  """
  @spec write!(t(), binary()) :: t()
  def write!(tensor, binary) do
    translating(do: :tensor_blob.write(ref(tensor), binary))
    tensor
  end

  @doc """
  A copy on `device` (`:cpu` or `{:cuda, index}`): the explicit copy between
  the host and a GPU. Always a new tensor, even on the same device.
  `to_binary/1` and `write!/2` also copy to and from a CUDA tensor.
  """
  @spec to_device(t(), :cpu | {:cuda, non_neg_integer()}) :: t()
  def to_device(tensor, device), do: translating(do: wrap(:tensor_blob.to_device(ref(tensor), device)))

  @doc "A view of `length` elements of dimension `dim` from `start`; shares memory."
  @spec narrow(t(), non_neg_integer(), non_neg_integer(), non_neg_integer()) :: t()
  def narrow(tensor, dim, start, length) do
    translating(do: wrap(:tensor_blob.narrow(ref(tensor), dim, start, length)))
  end

  @doc "A view with dimensions `dim0` and `dim1` swapped; shares memory."
  @spec transpose(t(), non_neg_integer(), non_neg_integer()) :: t()
  def transpose(tensor, dim0, dim1) do
    translating(do: wrap(:tensor_blob.transpose(ref(tensor), dim0, dim1)))
  end

  @spec shape(t()) :: shape()
  def shape(tensor), do: translating(do: :tensor_blob.shape(ref(tensor)))

  @doc "Element strides, one per dimension."
  @spec strides(t()) :: [non_neg_integer()]
  def strides(tensor), do: translating(do: :tensor_blob.strides(ref(tensor)))

  @doc "The canonical dtype atom."
  @spec dtype(t()) :: atom()
  def dtype(tensor), do: translating(do: :tensor_blob.dtype(ref(tensor)))

  @spec device(t()) :: :cpu | {:cuda, non_neg_integer()}
  def device(tensor), do: translating(do: :tensor_blob.device(ref(tensor)))

  @doc """
  What the memory is, and who keeps it alive: `:owned` (libtorch allocated
  it), `:pinned` (a view that keeps an owner term or tensor alive),
  `:unpinned` (a view the caller answers for), `:dlpack` (a DLPack import:
  the producer's memory), `:binary` (a view of a binary's bytes), `:ipc` (a
  mapping of a shared-memory region). Slices answer as what they view.
  """
  @spec memory(t()) :: :owned | :pinned | :unpinned | :dlpack | :binary | :ipc
  def memory(tensor), do: translating(do: :tensor_blob.memory(ref(tensor)))

  @doc "True when the tensor views memory whose owner it keeps alive (`:pinned`, `:dlpack` or `:binary`)."
  @spec pinned?(t()) :: boolean()
  def pinned?(tensor), do: translating(do: :tensor_blob.pinned(ref(tensor)))

  defimpl Inspect do
    import Inspect.Algebra

    def inspect(%{ref: ref} = tensor, opts) do
      if is_reference(ref) do
        shape = ref |> :tensor_blob.shape() |> Tuple.to_list() |> Enum.map_join(&"[#{&1}]")
        device = ref |> :tensor_blob.device() |> format_device()

        pinned =
          case :tensor_blob.memory(ref) do
            :pinned -> "pinned?: true"
            :unpinned -> "pinned?: false"
            memory -> Atom.to_string(memory)
          end

        concat(["#TensorBlob.Tensor<", "#{:tensor_blob.dtype(ref)}#{shape} #{device} #{pinned}", ">"])
      else
        Inspect.Any.inspect(tensor, opts)
      end
    end

    defp format_device(:cpu), do: "cpu"
    defp format_device({:cuda, i}), do: "cuda:#{i}"
  end
end
