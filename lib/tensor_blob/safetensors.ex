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

  @typedoc "What `open/2` answers."
  @type file :: %{tensors: %{String.t() => Tensor.t()}, metadata: %{String.t() => String.t()}}

  @doc """
  The tensors of a safetensors file by name, and its `__metadata__` (an
  empty map when it has none). A symbolic link to a regular file is
  followed; a FIFO, a device or a directory is refused without opening it.

  Options: `only: names` opens those tensors alone; `misaligned: :copy`
  (the default) copies once a tensor whose offset in the file does not fit
  its element size (reported as a telemetry copy event, reason
  `:misaligned`), `misaligned: :refuse` raises instead.

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
  @spec open(Path.t(), only: [String.t()], misaligned: :copy | :refuse) :: file()
  def open(path, opts \\ []) do
    reported {__MODULE__, :open, 2} do
      %{tensors: tensors} = file = :tensor_blob_safetensors.open(path, :tensor_blob_options.keywords(opts))
      %{file | tensors: Map.new(tensors, fn {name, t} -> {name, Tensor.wrap(t)} end)}
    end
  end

  @doc """
  Writes `tensors` (a map or a list of `{name, tensor}`) and `metadata` (a
  map of strings to strings) as a safetensors file at `path`, replacing it.
  A tensor is any tensor of the library (a strided view is written
  row-major, a device's tensor copied to the host one at a time), a
  `TensorBlob.BlobView`, or `{binary, dtype, shape}`. Tensors go in the
  order the reference writes them (largest element first, then by name),
  so each one's offset fits its element size.
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
  defp input(t), do: Tensor.ref(t)
end
