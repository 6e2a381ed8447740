defmodule TensorBlob.DLPack do
  @moduledoc """
  DLPack 1.x export and import: how native tensor libraries (PyTorch, JAX,
  CuPy, NumPy, TVM, other NIFs) hand memory to each other. No data is copied.

  ## The capsule model

  `export/2` returns a `%TensorBlob.DLPack{}` capsule. Its `ref` is a resource
  that owns one `DLManagedTensorVersioned*` (DLPack 1.3), or with
  `version: :legacy` one legacy `DLManagedTensor*`. The managed tensor holds a
  strong libtorch reference to the exported tensor, and its own shape and
  strides arrays: the memory stays valid until its deleter runs, whatever
  happens to the `%Tensor{}` that was exported.

  A capsule is in one of two states:

    * **armed**: it owns the managed tensor. When the capsule is
      garbage-collected it calls the deleter.
    * **consumed**: `consume/1` (or `import/2` of the capsule) took the managed
      tensor out. From then on whoever took it owes the deleter one call.
      Consuming or importing a consumed capsule raises `ArgumentError`; it
      never frees twice. Of two processes consuming one capsule at once,
      exactly one gets it.

  `TensorBlob.stats/0` reports `capsules`: exported managed tensors whose
  deleter has not run yet, armed or consumed. It returns to where it was once
  every capsule is collected and every consumer has called the deleter.

  ## Importing

  `import/2` takes a capsule or an integer address of a managed tensor and
  returns a `%TensorBlob.Tensor{}` over the same memory. The producer's deleter
  runs exactly once, when libtorch frees the imported storage: after the last
  tensor that uses the memory is gone, slices and transposes included.

  Everything that can be checked is checked: the version (major 1 for a
  versioned tensor), the flags, `ndim` (at most 64), the device type and type
  codes (unknown codes are named in the message), `lanes` (must be 1), shape
  (non-negative, no overflow of the element count or the byte extent), strides
  (`NULL` means row-major; the stride of a size-1 dimension may be anything),
  `byte_offset`, a `NULL` data pointer (allowed only without elements) and its
  alignment. Four device types are imported:

    * `kDLCPU`: a CPU tensor.
    * `kDLCUDA`: a CUDA tensor of its device. Where the linked libtorch has
      no CUDA it raises `TensorBlob.Error`; where it has, the CUDA runtime
      must confirm that the pointer is memory of that device (as for
      `TensorBlob.from_blob/2`).
    * `kDLCUDAHost` (page-locked host memory, `cudaMallocHost`): a CPU tensor,
      since the host reads it directly. Refused only when the runtime says
      the pointer is device memory.
    * `kDLCUDAManaged` (`cudaMallocManaged`): a CUDA tensor of the device the
      producer named, where libtorch runs its kernels (like `kDLCUDA`, it
      needs a libtorch with CUDA); the runtime must confirm managed memory.
      The host may read managed memory too: `TensorBlob.from_blob/2` of its
      pointer with `device: :cpu` views it from the CPU.

  `info/1` reports the DLPack `device_type` (`:cpu`, `:cuda`, `:cuda_host`,
  `:cuda_managed`) next to the `device` libtorch sees. A tensor imported from
  page-locked or managed memory is exported again as what libtorch sees
  (`kDLCPU`, `kDLCUDA`), both of which that memory is.

  ## Streams

  The array API's `__dlpack__(stream=...)` contract: a producer makes its
  data safe to use on the consumer's stream. A stream is an integer: a
  `cudaStream_t`, `1` for the legacy default stream, `2` for the per-thread
  default stream, `-1` for no synchronization (`0` is refused, as the array
  API says: it is ambiguous for CUDA). CPU tensors take none.

    * `export(t, stream: s)`: an event is recorded on libtorch's current
      stream of `t`'s device, and `s` is made to wait for it
      (`cudaStreamWaitEvent`), so work the consumer queues on `s` sees the
      data. The call does not wait.
    * `import(x, stream: s)`: `s` is the producer's stream, where its last
      writes were queued. For a CUDA (or managed) tensor libtorch's current
      stream waits for it; for page-locked host memory the call itself waits
      until `s`'s work is done (on a dirty I/O scheduler).
    * Without a stream, the array API's default: the consumer uses the
      legacy default stream. libtorch's current stream is its default
      stream, which is the legacy default stream, unless native code set
      another on the calling thread: then `export` makes the legacy
      default stream wait for it, and `import` makes it wait for the legacy
      default stream; otherwise nothing is done. For page-locked host memory
      without a stream, the producer must have finished writing.

  libtorch's current stream is that of the scheduler thread the call runs
  on; tensor_blob never changes it.

  A tensor with the `READ_ONLY` flag (or imported with `read_only: true`) is
  read-only: `TensorBlob.Tensor.write!/2` refuses it and every slice of it,
  and it can only be re-exported versioned, with the flag. `IS_COPIED` is
  accepted and changes nothing here; `IS_SUBBYTE_TYPE_PADDED` concerns only
  sub-byte types, which are refused anyway; other flag bits are refused.
  `TensorBlob.Tensor.memory/1` reports an imported tensor as `:dlpack`: its
  storage keeps the producer's memory alive until it calls the deleter.

  ## Who calls the deleter when an import is refused

    * A **capsule** is consumed by `import/2` whether the import succeeds or
      not: when it is refused, its deleter is called before the error is
      raised. (Capsules only ever hold our own exports, whose layout is known.)
    * An **address** is owned by the import once the structure is recognized as
      a DLPack managed tensor of the kind given by `version:`: for a versioned
      tensor, a version header of major 1 (or a later major, which the DLPack
      spec says to release unread); for a legacy tensor, which has no header,
      a known device type, a known type code and `0 <= ndim <= 64`. A
      recognized tensor that cannot be imported (a CUDA tensor, a dtype this
      build or the linked libtorch lacks, negative strides, ...) has its
      deleter called, once, before the error is raised, and the message says
      so. A structure that is not recognized (say a legacy tensor read as
      versioned) is left alone: nothing in it is called, since its deleter
      field may be garbage, and the message says the caller still owns it.

  ## Raw addresses

  An address this library handed out (`consume/1`, the C bridge) is known
  until one import takes it or its deleter runs: it is imported once, and
  refused after (a second import would free it twice). Any other address
  is refused unless the call says `unsafe_address: true`: then the caller
  is trusted. The library checks that the address is not `NULL` and is
  aligned, and the fields it reads, but it cannot tell a forged address, a
  freed one, or one already imported, from a live managed tensor: any of
  those is undefined behaviour, up to a crash of the VM. Pass such an
  address only once, and only one a DLPack producer handed to you with its
  ownership.

  ## Examples

      iex> tensor = TensorBlob.Tensor.from_binary(<<1, 2, 3, 4>>, :uint8, {4})
      iex> capsule = TensorBlob.DLPack.export(tensor)
      #TensorBlob.DLPack<versioned uint8[4] cpu armed>
      iex> same = TensorBlob.DLPack.import(capsule)
      iex> TensorBlob.to_blob(same).ptr == TensorBlob.to_blob(tensor).ptr
      true
      iex> capsule
      #TensorBlob.DLPack<versioned consumed>

  Handing a tensor to another library's NIF, which calls the deleter (here
  our own import stands in for it):

      iex> tensor = TensorBlob.Tensor.from_binary(<<1, 2, 3, 4>>, :uint8, {2, 2})
      iex> address = tensor |> TensorBlob.DLPack.export(version: :legacy) |> TensorBlob.DLPack.consume()
      iex> address |> TensorBlob.DLPack.import(version: :legacy) |> TensorBlob.Tensor.to_binary()
      <<1, 2, 3, 4>>
  """
  import TensorBlob.Raise

  alias TensorBlob.Tensor

  @enforce_keys [:ref, :version]
  defstruct [:ref, :version]

  @type version :: :versioned | :legacy
  @type t :: %__MODULE__{ref: reference(), version: version()}

  @doc """
  Exports a tensor as a DLPack capsule.

  Options:

    * `:max_version` - the newest DLPack version the consumer reads,
      negotiated as Python's `__dlpack__` does: `{1, minor}` gives a versioned
      tensor; `{0, minor}` or `:legacy` a legacy one; a major above 1 raises
      `TensorBlob.Error` (this library speaks DLPack 1.x). Default: versioned.
    * `:version` - `:versioned` or `:legacy`, said directly.
    * `:read_only` - sets the `READ_ONLY` flag (versioned only).
    * `:stream` - the consumer's CUDA stream (see "Streams"); CUDA tensors
      only.
  """
  @spec export(Tensor.input(), keyword()) :: t()
  def export(tensor, opts \\ [])

  # No options: a versioned export, with no option map to build and read.
  def export(tensor, []) do
    translating(do: capsule(__MODULE__, :tensor_blob.to_dlpack(Tensor.ref(tensor)), :versioned))
  end

  def export(tensor, opts) do
    translating do
      ref = :tensor_blob.to_dlpack(Tensor.ref(tensor), :tensor_blob_options.keywords(opts))
      %__MODULE__{ref: ref, version: :tensor_blob.dlpack_version(ref)}
    end
  end

  # Built from nothing, as TensorBlob.Tensor.wrap/1 is (see there).
  defp capsule(module, ref, version), do: %{__struct__: module, ref: ref, version: version}

  @doc """
  A tensor over the memory of a capsule (which this consumes) or of a managed
  tensor's integer address (see "Raw addresses").

  A capsule from `export/2` imported with no options gives the exported
  tensor back: the capsule keeps that tensor, and nothing new is made.

  Options:

    * `:version` - `:versioned` (default) or `:legacy`: how to read an
      address. A capsule knows its own, and so does an address this
      library handed out (`consume/1`, the C bridge): it is read as what it
      holds, and a `:version` that is not that is refused with
      `ArgumentError`, the address left to a later import.
    * `:read_only` - make the tensor read-only even without the flag.
    * `:stream` - the producer's CUDA stream (see "Streams"); not for
      `kDLCPU` tensors.
    * `:unsafe_address` - `true` imports an address another producer made
      (see "Raw addresses"): the caller answers for it.
    * `:defer_release` - `true` runs the producer's deleter on a thread of
      the library's own, never on a scheduler: for producers whose deleter
      may block (Python's take the GIL; `TensorBlob.Python` sets it).
      `TensorBlob.stats/0` counts such imports as `deferred` until their
      deleter has run.
  """
  @spec import(t() | reference() | non_neg_integer(), keyword()) :: Tensor.t()
  def import(capsule_or_address, opts \\ [])

  def import(capsule_or_address, []) do
    translating(do: Tensor.wrap(:tensor_blob.from_dlpack(source(capsule_or_address))))
  end

  def import(capsule_or_address, opts) do
    translating(
      do: Tensor.wrap(:tensor_blob.from_dlpack(source(capsule_or_address), :tensor_blob_options.keywords(opts)))
    )
  end

  @doc """
  Disarms a capsule and returns the address of its managed tensor, for a
  consumer that then owes the deleter one call. Raises `ArgumentError` if the
  capsule was already consumed.
  """
  @spec consume(t() | reference()) :: non_neg_integer()
  def consume(capsule), do: translating(do: :tensor_blob.consume_dlpack(source(capsule)))

  @doc """
  The metadata of a capsule's managed tensor (`device`, `device_type`,
  `dtype`, `ptr`, `shape`, `strides`, `read_only`), read without consuming it
  and without touching the memory. `device_type` is DLPack's (`:cpu`,
  `:cuda`, `:cuda_host`, `:cuda_managed`); `device` is where libtorch sees
  the memory once imported. Raises `ArgumentError` once the capsule is
  consumed.
  """
  @spec info(t() | reference()) :: map()
  def info(capsule), do: translating(do: :tensor_blob.dlpack_info(source(capsule)))

  defp source(%__MODULE__{ref: ref}), do: ref
  defp source(other), do: other

  defimpl Inspect do
    # The capsule's version, dtype, shape, device and state (armed, read-only,
    # consumed), read from its managed tensor without consuming it.
    import Inspect.Algebra

    def inspect(%{ref: ref, version: version} = capsule, opts) do
      if is_reference(ref) do
        concat(["#TensorBlob.DLPack<", describe(ref, version), ">"])
      else
        Inspect.Any.inspect(capsule, opts)
      end
    end

    defp describe(ref, version) do
      %{dtype: dtype, shape: shape, device: device, read_only: read_only} = :tensor_blob.dlpack_info(ref)
      dims = shape |> Tuple.to_list() |> Enum.map_join(&"[#{&1}]")
      flags = if read_only, do: " read_only", else: ""
      "#{version} #{dtype}#{dims} #{TensorBlob.Tensor.format_device(device)} armed#{flags}"
    catch
      # The managed tensor was taken out (consume/1 or import/2).
      :error, {:badarg, _} -> "#{version} consumed"
    end
  end
end
