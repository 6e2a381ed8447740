defmodule TensorBlob.SafeTensors do
  @moduledoc """
  Files of tensors in the safetensors format (model weights), both ways,
  without a copy on the way in.

      %{tensors: params, metadata: meta} = TensorBlob.SafeTensors.open("model.safetensors")
      params["embed.weight"]          # %TensorBlob.Tensor{}: a view of the mapped file

  `open/2` maps the file and checks its header as the format's reference
  implementation does; no tensor byte is read. Each tensor keeps the
  mapping alive: it lives until the last tensor, view, DLPack export or
  binary over it is gone. The tensors are `Nx.LazyContainer`s (when Nx is
  loaded): a params map of them goes to `defn` and `Nx.Defn.jit/2` as it is.

  Writes through a tensor go to pages of this VM's own (copied on first
  write): the file is never written. Another program may shrink the file
  while it is mapped: the library's own copies of it (`Tensor.to_binary/1`,
  `Tensor.write!/2`, `write/3`) then raise instead of killing the VM, and a
  zero-copy binary of it is refused unless asked for (`copy: false,
  unsafe_shared_memory: true`), as for shared-memory regions. What a
  consumer that reads the memory itself (libtorch, NumPy through DLPack)
  meets then is a SIGBUS, as with any mapped file: guides/safetensors.md.

  `write/3` writes tensors into a temporary file beside the target, one
  after another, and renames it over the target, so a reader's mapping of
  the old file stays valid.

  The Erlang API is `:tensor_blob_safetensors`.
  """

  import TensorBlob.Raise

  alias TensorBlob.Tensor

  @typedoc """
  What `open/2` answers: the tensors, the metadata, and the tensors the
  linked libtorch cannot hold (left out, or opened as their bytes, with
  `unsupported: :skip | :bytes`), each with its safetensors dtype, its
  shape as the file gives it and why.
  """
  @type file :: %{
          tensors: %{String.t() => Tensor.t()},
          metadata: %{String.t() => String.t()},
          unsupported: %{
            String.t() => %{dtype: String.t(), shape: tuple(), opened: :bytes | :skipped, why: String.t()}
          }
        }

  @typedoc """
  What `info/1` answers: a file's header, read alone (`data_start`,
  `file_size`), or every shard's of a sharded checkpoint (`shards`; each
  tensor names its `shard`).
  """
  @type info :: %{
          optional(:data_start) => non_neg_integer(),
          optional(:file_size) => non_neg_integer(),
          optional(:shards) => %{String.t() => %{data_start: non_neg_integer(), file_size: non_neg_integer()}},
          tensors: %{String.t() => entry_info()},
          metadata: %{String.t() => String.t()}
        }

  @typedoc "A tensor of a header, as `info/1` gives it."
  @type entry_info :: %{
          optional(:shard) => String.t(),
          dtype: String.t(),
          shape: tuple(),
          data_offsets: {non_neg_integer(), non_neg_integer()},
          tensor_dtype: atom() | nil,
          opens: boolean()
        }

  @doc """
  The tensors of a safetensors file by name, and its `__metadata__` (an
  empty map when it has none). A symbolic link to a regular file is
  followed; a FIFO, a device or a directory is refused without opening it.

  A sharded checkpoint opens whole: `path` names its index
  (`model.safetensors.index.json`, whose `weight_map` places each tensor
  in a shard file beside it) or the folder that holds it. Every shard is
  mapped once, pinned by its own tensors, and the answer is one map of
  every shard's tensors with the index's `metadata`. A shard the index
  names that is missing raises (`:missing`), and so does a tensor held by
  two shards, or by another shard than the index says (`:bad_file`).

  Options: `only: names` opens those tensors alone (of a sharded
  checkpoint, only the shards that hold them are mapped); `nested: true` gives
  the tensors as nested maps, each name split at its `"."` (the form of a
  model's parameters, and what `write/3` takes); `misaligned: :copy`
  (the default) copies once a tensor whose offset in the file does not fit
  its element size, read from the file straight into the tensor's own
  memory (reported as a telemetry copy event, reason `:misaligned`),
  `misaligned: :refuse` raises instead, before any byte is read;
  `unsupported: :refuse` (the default) raises on a tensor whose dtype the
  linked libtorch cannot hold (`F6_E2M3` and `F6_E3M2` have no libtorch
  dtype; `F8_E8M0`, `F4` and others need a newer libtorch:
  `TensorBlob.tables().safetensors`), `unsupported: :skip` opens the rest,
  and `unsupported: :bytes` opens such a tensor as its bytes (`:uint8`,
  its last dimension in bytes: never read as another dtype). Either way
  the answer's `:unsupported` map names each such tensor with its dtype,
  shape and why.

  `F4` and `F6_*` are packed (two 4-bit values a byte, four 6-bit values
  in three bytes): a tensor's shape counts values, and its last
  dimension's bits fill whole bytes. `F4` opens as libtorch's
  `:float4_e2m1fn_x2` (two values an element): its last dimension halved.

  A file that is not a valid safetensors file raises `ArgumentError`
  naming the file and the tensor, with reason `:bad_file` (or `:bad_dtype`
  for a dtype the format and this library do not share, `:unsupported` for
  one the linked libtorch lacks, `:missing` for no such file or a name not
  in it):

      iex> path = Path.join(System.tmp_dir!(), "tb_doc_#{System.unique_integer([:positive])}.safetensors")
      iex> :ok = TensorBlob.SafeTensors.write(path, %{"w" => TensorBlob.Tensor.from_binary(<<1, 2, 3>>, :uint8, {3})}, %{"k" => "v"})
      iex> %{tensors: %{"w" => w}, metadata: %{"k" => "v"}} = TensorBlob.SafeTensors.open(path)
      iex> {TensorBlob.Tensor.to_binary(w), TensorBlob.Tensor.memory(w)}
      {<<1, 2, 3>>, :file}
      iex> File.write!(path, <<2, 0, 0, 0, 0, 0, 0, 0, "[]">>)
      iex> try do
      ...>   TensorBlob.SafeTensors.open(path)
      ...> rescue
      ...>   ArgumentError -> Map.take(:tensor_blob.error_reason(__STACKTRACE__), [:reason, :argument])
      ...> end
      %{reason: :bad_file, argument: :path}
  """
  @spec open(Path.t(),
          only: [String.t()],
          misaligned: :copy | :refuse,
          nested: boolean(),
          unsupported: :refuse | :skip | :bytes
        ) :: file()
  def open(path, opts \\ []) do
    reported {__MODULE__, :open, 2} do
      %{tensors: tensors} = file = :tensor_blob_safetensors.open(path, :tensor_blob_options.keywords(opts))
      %{file | tensors: wrap(tensors)}
    end
  end

  # References as tensors, in maps nested as deep as the names say.
  @doc """
  The header of a safetensors file alone: the data are neither mapped nor
  read. Each tensor's safetensors dtype, shape and `data_offsets` (in the
  data buffer, which starts at `data_start`), the dtype of this library
  that holds it (`tensor_dtype`, `nil` where none does) and whether this
  build opens it (`opens`: the linked libtorch holds that dtype); the
  metadata and the file's size. The header is checked as `open/2` checks
  it, and refused the same way. Of a sharded checkpoint (its index, or the
  folder holding it) it reads every shard's header: each tensor also names
  its `shard`, the metadata is the index's, and `shards` maps each shard
  file to its `data_start` and `file_size`.

      iex> path = Path.join(System.tmp_dir!(), "tb_doc_#{System.unique_integer([:positive])}.safetensors")
      iex> :ok = TensorBlob.SafeTensors.write(path, %{"w" => TensorBlob.Tensor.zeros({2, 3}, :float32)}, %{"k" => "v"})
      iex> %{tensors: %{"w" => w}, metadata: %{"k" => "v"}} = TensorBlob.SafeTensors.info(path)
      iex> w
      %{dtype: "F32", shape: {2, 3}, data_offsets: {0, 24}, tensor_dtype: :float32, opens: true}
  """
  @spec info(Path.t()) :: info()
  def info(path) do
    translating do
      :tensor_blob_safetensors.info(path)
    end
  end

  defp wrap(tensors), do: Map.new(tensors, fn {name, t} -> {name, if(is_map(t), do: wrap(t), else: Tensor.wrap(t))} end)

  @doc """
  Writes `tensors` (a map or a list of `{name, tensor}`) and `metadata` (a
  map of strings to strings) as a safetensors file at `path`, replacing it.
  A tensor is any tensor of the library (a strided view is written
  row-major, a device's tensor copied to the host one at a time), a
  `TensorBlob.BlobView`, an `Nx.Tensor` (of any backend: converted as
  `TensorBlob.Nx.from_nx/1` does, so a binary backend's bytes are not
  copied first), or `{binary, dtype, shape}`. A map in place of a tensor
  holds tensors (or maps of them) by name, and its names are joined to
  its own with `"."`: the parameters of a model, layer by layer, go as
  they are (`%{"dense" => %{"kernel" => k}}` writes `"dense.kernel"`).
  Tensors go in the order the reference writes them (largest element
  first, then by name), so each one's offset fits its element size.

      iex> path = Path.join(System.tmp_dir!(), "tb_doc_#{System.unique_integer([:positive])}.safetensors")
      iex> params = %{"dense" => %{"kernel" => TensorBlob.Tensor.zeros({2, 2}, :float32), "bias" => TensorBlob.Tensor.zeros({2}, :float32)}}
      iex> :ok = TensorBlob.SafeTensors.write(path, params)
      iex> path |> TensorBlob.SafeTensors.open() |> Map.fetch!(:tensors) |> Map.keys() |> Enum.sort()
      ["dense.bias", "dense.kernel"]
      iex> %{tensors: %{"dense" => %{"kernel" => kernel}}} = TensorBlob.SafeTensors.open(path, nested: true)
      iex> TensorBlob.Tensor.shape(kernel)
      {2, 2}
  """
  @spec write(Path.t(), map() | [{String.t(), term()}], %{optional(String.t()) => String.t()}) :: :ok
  def write(path, tensors, metadata \\ %{}) do
    translating do
      :tensor_blob_safetensors.write(path, inputs(tensors), metadata)
    end
  end

  # The Erlang API's tensors; what is not a map or a proper list of pairs
  # goes through as it is, for the Erlang API to refuse.
  defp inputs(tensors) when is_map(tensors), do: inputs(Map.to_list(tensors))

  defp inputs(tensors) when is_list(tensors) do
    if proper_list?(tensors),
      do:
        Enum.map(tensors, fn
          {name, t} -> {name, input(t)}
          other -> other
        end),
      else: tensors
  end

  defp inputs(other), do: other

  defp proper_list?([]), do: true
  defp proper_list?([_ | tail]), do: proper_list?(tail)
  defp proper_list?(_), do: false

  defp input({binary, _dtype, _shape} = spec) when is_binary(binary), do: spec

  defp input(%{__struct__: Nx.Tensor} = nx) do
    # Nx is an optional dependency: TensorBlob.Nx exists where it is loaded.
    if Code.ensure_loaded?(TensorBlob.Nx),
      do: Tensor.ref(apply(TensorBlob.Nx, :from_nx, [nx])),
      else:
        badarg!(
          "tensors: an Nx.Tensor, and TensorBlob.Nx is not compiled in this build: add {:nx, \"~> 0.9\"} " <>
            "to the project's dependencies (and recompile tensor_blob), or pass TensorBlob tensors",
          :unsupported,
          :tensors
        )
  end

  defp input(nested) when is_map(nested) and not is_struct(nested), do: Map.new(nested, fn {k, v} -> {k, input(v)} end)
  defp input(t), do: Tensor.ref(t)
end
