defmodule TensorBlob do
  @moduledoc """
  Zero-copy tensor exchange for the BEAM.

  `to_blob/1` describes a tensor's memory as a `TensorBlob.Blob`;
  `from_blob/2` views described memory as a tensor, keeping the memory's
  owner alive until libtorch frees the last tensor that uses it. No data is
  copied.

  ## Lifetime rules

    1. `to_blob(t)` sets `owner: t`: the pointer is valid while the blob, or
       `t`, is reachable.
    2. `from_blob(%Blob{})` keeps `blob.owner` alive; `from_blob(map, owner: o)`
       keeps `o` alive. A view inside one of our tensors shares that tensor's
       storage, as a slice does (`Tensor.memory/1` answers as the tensor
       does); any other owner term is *pinned*: held by the view's storage
       (`Tensor.memory/1` says `:pinned`, `stats().pins` counts it). An
       unpinned view must be asked for: `owner: :none` gives a view that
       keeps nothing alive (`owner: :none` in the `%BlobView{}`), and the
       caller answers for the memory (its inspect shows `unpinned` and the
       address, never the values: the library cannot vouch for that memory). A map
       with no owner at all raises `ArgumentError`.
    3. The owner is released only when libtorch frees the storage: after the
       last tensor that uses the memory is gone, slices and transposes
       included. Dropping the `%BlobView{}` while keeping `view.tensor` is
       safe.
    4. When the owner is one of our tensors or a binary, `[ptr, ptr + byte_size)`
       must lie inside it, or the call raises.
    5. A view of a binary's bytes is read-only (binaries are immutable), and
       so is a view of a read-only tensor: `Tensor.write!/2` raises.

  ## dtypes

  The canonical atoms are the names of `tables/0` (the dtypes guide shows
  the table); `dtypes/0` lists those the linked libtorch holds.
  Also accepted on input: ExTorch's names (`:float`, `:double`, `:half`,
  `:byte`, `:char`, `:short`, `:int`, `:long`, `:complex_half`, `:chalf`,
  `:complex_float`, `:complex_double`, `:cfloat`, `:cdouble`), Nx types (`{:f, 32}`,
  `{:bf, 16}`, `{:c, 64}`, `{:u, 8}`, `{:s, 64}`, `{:f, 8}`, ...) and Nx's
  shorthands (`:f32`, `:f64`, `:f16`, `:bf16`, `:c64`, `:c128`, `:u8` to
  `:u64`, `:s8` to `:s64`). An unknown dtype raises `ArgumentError` listing
  the valid ones.

  ## Errors

  Bad input raises `ArgumentError` naming the field and the value; failures
  that are not the caller's raise `TensorBlob.Error`.

  ## Telemetry

  Where the telemetry library is loaded, every copy of tensor data and
  every transfer to another framework, process or node is a span in the
  shape of `:telemetry.span/3`: `[:tensor_blob, :copy | :transfer, :start |
  :stop | :exception]`, the `:stop` event with its bytes, duration and
  reason (guides/telemetry.md).
  """
  import TensorBlob.Raise

  alias TensorBlob.{Blob, BlobView, Tensor}

  @doc """
  The blob describing a tensor's memory. O(1): nothing is copied.

      iex> t = TensorBlob.Tensor.from_binary(<<1, 2, 3, 4, 5, 6>>, :uint8, {2, 3})
      iex> blob = TensorBlob.to_blob(t)
      iex> {blob.shape, blob.strides, blob.dtype, blob.device, blob.byte_size}
      {{2, 3}, [3, 1], :uint8, :cpu, 6}
      iex> blob.owner == t
      true
      iex> TensorBlob.to_blob(TensorBlob.Tensor.transpose(t, 0, 1)).strides
      [1, 3]
  """
  @spec to_blob(Tensor.input()) :: Blob.t()
  def to_blob(%BlobView{tensor: tensor}), do: to_blob(tensor)

  def to_blob(tensor) do
    translating(do: :tensor_blob_door.to_blob_struct(Tensor.ref(tensor), tensor, Blob))
  end

  @doc """
  A tensor over the memory a blob or spec map describes. O(1): nothing is
  copied.

  The spec needs `:ptr`, `:shape` and `:dtype`; `:strides` (element
  strides, default row-major) and `:device` (default `:cpu`) are optional.
  The owner, the term that keeps the memory alive, comes from the spec's
  `:owner` (a `%Blob{}` from `to_blob/1` names its tensor) or from the
  `owner:` option, which takes precedence:

    * an owner term (the safe choice): the tensor or struct the memory
      belongs to. It is kept alive until the last tensor using the memory
      is freed (one of our tensors by sharing its storage, any other term
      by a pin).
    * or no view at all: copy the data into a tensor of its own
      (`TensorBlob.Tensor.from_binary/3`), which owns its memory.
    * `owner: :none`, last and unsafe: an unpinned view; nothing is kept
      alive and **the caller answers for the memory**: reading the view
      after the memory is freed kills the VM (its inspect shows `unpinned`
      and the address, not the values).
    * no owner at all (or `nil`): raises `ArgumentError`, which offers the
      same choices in this order.

  The result is always a `%BlobView{tensor, owner}` (`owner` is `:none` for
  an unpinned view). Every function that takes a tensor takes it as it is
  (the `TensorBlob.Tensor` functions, `to_blob/1`, `TensorBlob.DLPack`,
  `TensorBlob.IPC`, `TensorBlob.Nodes`, `TensorBlob.Nx`, the Nx calls
  guides/nx.md lists, and other NIF libraries through
  `priv/include/tensor_blob.h`); `view.tensor` is the bare
  `%TensorBlob.Tensor{}`.

  ExTorch's `%ExTorch.Tensor.Blob{}` (`ExTorch.Tensor.Blob.to_blob/1`) is
  such a spec, as it is: its owner, the ExTorch tensor, is pinned
  (`TensorBlob.ExTorch`, guides/extorch.md).

  A spec that describes one of our tensors exactly (a blob from
  `to_blob/1`, unchanged) gives that tensor back, as `numpy.asarray` gives
  an array back: nothing is made and nothing is pinned. Any other layout
  inside a tensor's storage (another shape, dtype, offset or strides) is a
  new tensor sharing that storage.

  Examples:

      iex> t = TensorBlob.Tensor.from_binary(<<1, 2, 3, 4>>, :uint8, {4})
      iex> %TensorBlob.BlobView{tensor: view, owner: ^t} = TensorBlob.from_blob(TensorBlob.to_blob(t))
      iex> TensorBlob.Tensor.to_binary(view)
      <<1, 2, 3, 4>>
      iex> blob = TensorBlob.to_blob(t)
      iex> TensorBlob.from_blob(%{ptr: blob.ptr, shape: {2}, dtype: :uint8}, owner: t).owner == t
      true
      iex> unpinned = TensorBlob.from_blob(%{ptr: blob.ptr, shape: {2}, dtype: :uint8}, owner: :none)
      iex> TensorBlob.Tensor.memory(unpinned.tensor)
      :unpinned
      iex> TensorBlob.Tensor.to_binary(unpinned)
      <<1, 2>>
      iex> TensorBlob.from_blob(%{ptr: blob.ptr, shape: {2}, dtype: :uint8})
      ** (ArgumentError) owner: the spec names no owner. Pass the term that keeps the memory alive, owner: term (the tensor or struct the memory belongs to; a blob from to_blob/1 names its tensor already), or copy the data into a tensor of its own (TensorBlob.Tensor.from_binary/3). Last, and unsafe: owner: :none gives an unpinned view for which the caller answers: nothing keeps the memory alive, and reading the view after the memory is freed kills the VM
  """
  @spec from_blob(Blob.t() | map(), owner: term()) :: BlobView.t()
  def from_blob(spec, opts \\ [])

  # ExTorch's blob, owned by its ExTorch tensor: checked against what ExTorch
  # says of that tensor (TensorBlob.ExTorch.from_extorch/1), as the pinned
  # memory is the owner's. With an owner given, the caller answers.
  def from_blob(%{__struct__: ExTorch.Tensor.Blob, owner: %{__struct__: ExTorch.Tensor}} = blob, []) do
    if Code.ensure_loaded?(TensorBlob.ExTorch),
      do: apply(TensorBlob.ExTorch, :from_extorch, [blob]),
      else: from_blob(blob, owner: blob.owner)
  end

  def from_blob(spec, opts) do
    {ref, owner} = translating(do: :tensor_blob_door.blob_view(spec, :tensor_blob_options.keywords(opts)))
    BlobView.new(Tensor.wrap(ref), owner)
  end

  @doc """
  Live counts, for leak checks: `tensors` (tensor resources), `pins` (owner
  terms pinned by views; a view sharing one of our tensors' storage holds
  none), `capsules` (DLPack exports whose deleter has not run: Python's
  references to tensor_blob memory among them), `binaries` (binaries from
  `Tensor.to_binary(t, copy: false)`) and `deferred` (DLPack imports with
  `defer_release`, as `TensorBlob.Python.from_python/1` makes, whose
  producer's deleter has not run: Python's memory held here). After
  everything is dropped and collected, each returns to where it was.
  """
  @spec stats() :: %{
          tensors: non_neg_integer(),
          pins: non_neg_integer(),
          capsules: non_neg_integer(),
          binaries: non_neg_integer(),
          deferred: non_neg_integer()
        }
  def stats, do: translating(do: :tensor_blob.stats())

  @doc "The canonical dtypes the linked libtorch can hold."
  @spec dtypes() :: [atom()]
  def dtypes, do: translating(do: :tensor_blob.dtypes())

  @doc """
  The library's dtype, device, storage kind and error-reason tables, in
  table order: every dtype it knows (`available: true` where the linked
  libtorch holds it), with its element size, kind and bits, DLPack
  `{code, bits, lanes}`, Nx type, other names and the libtorch release that
  brought it; every device type; every kind of memory, with what
  `Tensor.memory/1` answers for it, whether it keeps its owner alive
  (`Tensor.pinned?/1`) and whether it is a named shared-memory region;
  every reason an error may carry (`TensorBlob.Error`'s `reason`); and
  every dtype of the safetensors format, with the bits of one value and
  the dtype that holds its values (`nil` where none does).
  """
  @spec tables() :: %{
          dtypes: [:tensor_blob.dtype_info()],
          devices: [:tensor_blob.device_info()],
          storage: [:tensor_blob.storage_info()],
          reasons: [atom()],
          safetensors: [:tensor_blob.safetensors_dtype_info()]
        }
  def tables, do: :tensor_blob.tables()

  @doc "The version of the linked libtorch."
  @spec torch_version() :: String.t()
  def torch_version, do: translating(do: :tensor_blob.torch_version())
end
