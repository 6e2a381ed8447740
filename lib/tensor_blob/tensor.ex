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
      iex> TensorBlob.Tensor.zeros({2}, :f32)
      #TensorBlob.Tensor<float32[2] cpu owned [0.0, 0.0]>
  """
  import TensorBlob.Raise

  @enforce_keys [:ref]
  defstruct [:ref]

  @type t :: %__MODULE__{ref: reference()}
  @typedoc """
  What every function that takes a tensor takes: a `%TensorBlob.Tensor{}`,
  or what `TensorBlob.from_blob/2` returns (a `%TensorBlob.BlobView{}`,
  whose tensor is used).
  """
  @type input :: t() | TensorBlob.BlobView.t()
  @type shape :: tuple()
  @type dtype :: atom() | {atom(), pos_integer()}
  @typedoc """
  A device: `:cpu`, or `{:cuda, index}`. The one definition is Erlang's
  `:tensor_blob.device()`, written from the device table (`TensorBlob.tables/0`).
  """
  @type device :: :tensor_blob.device()

  @doc false
  def wrap(ref), do: struct_of(__MODULE__, ref)

  # A map built from nothing, not from the struct's literal: the VM then
  # shares the literal keys, where `%__MODULE__{ref: ref}` merges a new map.
  defp struct_of(module, ref), do: %{__struct__: module, ref: ref}

  @doc false
  # The reference behind what a function was given as a tensor: a
  # %Tensor{}, a %BlobView{} (what from_blob/2 returns), or anything else,
  # passed on for the Erlang API to say what it is.
  def ref(%__MODULE__{ref: ref}), do: ref
  def ref(%{__struct__: TensorBlob.BlobView, tensor: %__MODULE__{ref: ref}}), do: ref
  def ref(other), do: other

  @doc false
  # The row-major strides (in elements) of a shape tuple, as the library's
  # own layouts have them: a dimension of 0 or 1 steps as one of 1.
  def row_major_strides(shape) when is_tuple(shape) do
    shape
    |> Tuple.to_list()
    |> List.foldr({[], 1}, fn size, {strides, step} -> {[step | strides], step * max(size, 1)} end)
    |> elem(0)
  end

  @doc """
  A tensor over `binary` (row-major bytes).

  By default the bytes are copied into a new tensor. With `copy: false`,
  nothing is copied: the tensor is a read-only view of the binary's own
  bytes, and pins the binary until the last tensor using them is freed.
  `write!/2` raises on it, for a binary is immutable.

      iex> payload = :binary.copy(<<1.0::float-32-native>>, 1024)
      iex> t = TensorBlob.Tensor.from_binary(payload, :float32, {32, 32}, copy: false)
      iex> TensorBlob.Tensor.memory(t)
      :binary
      iex> TensorBlob.Tensor.write!(t, payload)
      ** (ArgumentError) tensor: read-only (a view of a binary's bytes; binaries are immutable); write! refuses it. To change the values, copy it first (Tensor.copy(t)) and write the copy

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
    reported({__MODULE__, :from_binary, 3}, do: wrap(:tensor_blob.from_binary(binary, dtype, shape)))
  end

  def from_binary(binary, dtype, shape, opts) do
    reported({__MODULE__, :from_binary, 4},
      do: wrap(:tensor_blob.from_binary(binary, dtype, shape, :tensor_blob_options.keywords(opts)))
    )
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

  A tensor viewing a binary's bytes (`from_binary/4` with `copy: false`)
  gives that binary back, or the part of it its elements occupy: those
  bytes are a binary already.

  Memory in a shared-memory region (`TensorBlob.IPC`, and views of it) is
  refused with `copy: false`: another program can shrink the region, and a
  read of the binary would then kill the VM with SIGBUS. Add
  `unsafe_shared_memory: true` to accept that risk. `copy: :if_needed`
  gives a view where one can be made, and a copy otherwise (a tensor that
  is not contiguous, not on the CPU, or in a region).

      iex> t = TensorBlob.Tensor.from_binary(<<1, 2, 3, 4>>, :uint8, {2, 2})
      iex> TensorBlob.Tensor.to_binary(t, copy: false)
      <<1, 2, 3, 4>>
      iex> t |> TensorBlob.Tensor.transpose(0, 1) |> TensorBlob.Tensor.to_binary()
      <<1, 3, 2, 4>>
  """
  @spec to_binary(input(), copy: boolean() | :if_needed, unsafe_shared_memory: boolean()) :: binary()
  def to_binary(tensor, opts \\ [])
  def to_binary(tensor, []), do: reported({__MODULE__, :to_binary, 1}, do: :tensor_blob.to_binary(ref(tensor)))

  def to_binary(tensor, opts) do
    reported({__MODULE__, :to_binary, 2}, do: :tensor_blob.to_binary(ref(tensor), :tensor_blob_options.keywords(opts)))
  end

  @doc "A new tensor whose every byte is 0: zeros of every dtype (`:float8_e8m0fnu` has no zero; its 0 byte is 2^-127)."
  @spec zeros(shape(), dtype()) :: t()
  def zeros(shape, dtype), do: translating(do: wrap(:tensor_blob.zeros(shape, dtype)))

  @doc """
  Overwrites the elements in place with `binary` (row-major order). Every
  view of the same memory sees the new values. Returns the tensor.

  Raises `ArgumentError` on a read-only tensor (a DLPack import flagged
  READ_ONLY, a view of a binary's bytes, a view of a read-only tensor, and
  their slices), while a binary made by `to_binary(t, copy: false)`
  shows any of the memory it would write, and on a view whose elements
  share memory (two indices on one element: a stride of 0, sliding
  windows, or strides such as `{4, 3}` with `[2, 3]`, where index `{3, 0}`
  and `{0, 2}` meet). Whether elements meet is decided exactly for the
  layouts of slices, permutations, steps and windows; a layout whose
  answer would take longer than a bounded search is refused too, saying
  to write a contiguous copy instead.
  """
  @spec write!(tensor, binary()) :: tensor when tensor: input()
  def write!(tensor, binary) do
    reported({__MODULE__, :write!, 2}, do: :tensor_blob.write(ref(tensor), binary))
    tensor
  end

  @doc """
  A copy on `device` (`:cpu` or `{:cuda, index}`): the explicit copy between
  the host and a GPU. Always a new tensor, even on the same device.
  `to_binary/1` and `write!/2` also copy to and from a CUDA tensor.
  """
  @spec to_device(input(), device()) :: t()
  def to_device(tensor, device),
    do: reported({__MODULE__, :to_device, 2}, do: wrap(:tensor_blob.to_device(ref(tensor), device)))

  @doc """
  A copy of `tensor` on its own device: a new tensor that owns its memory,
  contiguous and writable, whatever the original's memory was (a view of a
  binary, a read-only DLPack import, a shared-memory region, a mapped file).

      iex> t = TensorBlob.Tensor.from_binary(<<1, 2, 3>>, :uint8, {3}, copy: false)
      iex> c = TensorBlob.Tensor.copy(t)
      iex> {TensorBlob.Tensor.memory(t), TensorBlob.Tensor.memory(c)}
      {:binary, :owned}
      iex> TensorBlob.Tensor.write!(c, <<4, 5, 6>>) |> TensorBlob.Tensor.to_binary()
      <<4, 5, 6>>
      iex> TensorBlob.Tensor.to_binary(t)
      <<1, 2, 3>>
  """
  @spec copy(input()) :: t()
  def copy(tensor), do: reported({__MODULE__, :copy, 1}, do: wrap(:tensor_blob.copy(ref(tensor))))

  @doc "A view of `length` elements of dimension `dim` from `start`; shares memory."
  @spec narrow(input(), non_neg_integer(), non_neg_integer(), non_neg_integer()) :: t()
  def narrow(tensor, dim, start, length) do
    translating(do: wrap(:tensor_blob.narrow(ref(tensor), dim, start, length)))
  end

  @doc "A view with dimensions `dim0` and `dim1` swapped; shares memory."
  @spec transpose(input(), non_neg_integer(), non_neg_integer()) :: t()
  def transpose(tensor, dim0, dim1) do
    translating(do: wrap(:tensor_blob.transpose(ref(tensor), dim0, dim1)))
  end

  @doc "The dimensions, as a tuple (`{}` for a scalar)."
  @spec shape(input()) :: shape()
  def shape(tensor), do: translating(do: :tensor_blob.shape(ref(tensor)))

  @doc "Element strides, one per dimension."
  @spec strides(input()) :: [non_neg_integer()]
  def strides(tensor), do: translating(do: :tensor_blob.strides(ref(tensor)))

  @doc "The canonical dtype atom."
  @spec dtype(input()) :: atom()
  def dtype(tensor), do: translating(do: :tensor_blob.dtype(ref(tensor)))

  @doc "Where the memory is: `:cpu`, or `{:cuda, index}` for a GPU's."
  @spec device(input()) :: device()
  def device(tensor), do: translating(do: :tensor_blob.device(ref(tensor)))

  @doc """
  What the memory is, and who keeps it alive: `:owned` (libtorch allocated
  it), `:pinned` (a view that keeps an owner term alive; a view inside one of
  our tensors shares that tensor's storage and answers as it does),
  `:unpinned` (a view the caller answers for), `:dlpack` (a DLPack import:
  the producer's memory), `:binary` (a view of a binary's bytes), `:ipc` (a
  mapping of a shared-memory region, or of another process's CUDA memory opened
  with `TensorBlob.IPC.open/3`), `:file` (a private mapping of a file, as
  `TensorBlob.SafeTensors.open/2` makes). Slices answer as what they view.
  """
  @spec memory(input()) :: :tensor_blob.memory()
  def memory(tensor), do: translating(do: :tensor_blob.memory(ref(tensor)))

  @doc """
  True when the tensor views memory whose owner it keeps alive (`:pinned`,
  `:dlpack` or `:binary`: the kinds whose `keeps_owner` is true in
  `TensorBlob.tables().storage`).
  """
  @spec pinned?(input()) :: boolean()
  def pinned?(tensor), do: translating(do: :tensor_blob.pinned(ref(tensor)))

  @doc """
  True when the bytes `a`'s elements span (from its first element to its
  last) and the bytes `b`'s span overlap: a write through one may change
  what the other reads. Memory in a shared-memory region compares by the
  region's file, so two mappings of one region overlap. A tensor with no
  elements overlaps nothing. Spans, not elements: two views that interleave
  (every other element each) overlap.

      iex> t = TensorBlob.Tensor.zeros({4, 4}, :float32)
      iex> TensorBlob.Tensor.overlaps?(t, TensorBlob.Tensor.transpose(t, 0, 1))
      true
      iex> top = TensorBlob.Tensor.narrow(t, 0, 0, 2)
      iex> TensorBlob.Tensor.overlaps?(top, TensorBlob.Tensor.narrow(t, 0, 2, 2))
      false
      iex> TensorBlob.Tensor.overlaps?(top, TensorBlob.Tensor.narrow(t, 0, 1, 2))
      true
      iex> TensorBlob.Tensor.overlaps?(t, TensorBlob.Tensor.to_device(t, :cpu))
      false
      iex> TensorBlob.Tensor.overlaps?(t, TensorBlob.Tensor.narrow(t, 0, 1, 0))
      false
      iex> handle = TensorBlob.IPC.export(TensorBlob.IPC.zeros({4}, :float32))
      iex> opened = TensorBlob.IPC.open(handle.handle, :float32, {4})
      iex> TensorBlob.to_blob(opened).ptr == TensorBlob.to_blob(handle.tensor).ptr
      false
      iex> TensorBlob.Tensor.overlaps?(opened, handle.tensor)
      true
      iex> TensorBlob.Tensor.overlaps?(t, :not_a_tensor)
      ** (ArgumentError) b: expected a tensor, got :not_a_tensor
  """
  @spec overlaps?(input(), input()) :: boolean()
  def overlaps?(a, b), do: translating(do: :tensor_blob.overlaps(ref(a), ref(b)))

  @doc false
  # A device as both Inspect implementations show it: cpu, cuda:0, and so
  # for any device type of the library's table (an atom, or {type, index}).
  @spec format_device(atom() | {atom(), non_neg_integer()}) :: String.t()
  def format_device(type) when is_atom(type), do: Atom.to_string(type)
  def format_device({type, index}) when is_atom(type) and is_integer(index), do: "#{type}:#{index}"

  def format_device(other),
    do:
      "device: expected an atom or {type, index}, got #{TensorBlob.Raise.inspect_term(other)}"
      |> badarg!(:bad_value, :device)

  defimpl Inspect do
    # dtype, shape, device, memory kind (memory/1), and a bounded preview of the first
    # elements of a CPU tensor in logical (row-major) order, nested by its
    # shape as Nx shows them: at most 8 (or opts.limit), read through views
    # of those elements only, whatever the tensor's size and strides.
    # An unpinned view (from_blob(..., owner: :none)) is memory the caller
    # answers for, which the library cannot vouch for: printing it is not
    # something the caller asked to do to that memory, so it shows the
    # address instead of values, and reads nothing. Reading the preview is
    # not a copy the caller made: it emits no telemetry event.
    import Inspect.Algebra

    @preview 8

    # One clause (Elixir 1.20 wants a defimpl's callbacks to match its struct
    # alone): a tensor of another node arrives here as a dead reference,
    # shown as that, with the node it belongs to (nothing of it can be read
    # here); a struct built by hand without a reference as a plain map.
    def inspect(tensor, opts) do
      case Map.get(tensor, :ref) do
        ref when is_reference(ref) and node(ref) != node() ->
          concat(["#TensorBlob.Tensor<on node ", to_doc(node(ref), opts), " ", to_doc(ref, opts), ">"])

        ref when is_reference(ref) ->
          inspect_local(tensor, ref, opts)

        _ ->
          Inspect.Any.inspect(tensor, opts)
      end
    end

    defp inspect_local(tensor, ref, opts) do
      shape = :tensor_blob.shape(ref)
      dims = shape |> Tuple.to_list() |> Enum.map_join(&"[#{&1}]")
      device = :tensor_blob.device(ref)

      memory = :tensor_blob.memory(ref)
      dtype = :tensor_blob.dtype(ref)
      head = "#{dtype}#{dims} #{TensorBlob.Tensor.format_device(device)} #{memory}"

      if memory == :unpinned do
        address = "0x" <> String.downcase(Integer.to_string(:tensor_blob.to_blob(ref).ptr, 16))
        concat(["#TensorBlob.Tensor<", head, " at ", address, ">"])
      else
        case :tensor_blob_door.unreported(fn ->
               preview(tensor, shape, device, dtype, min(@preview, opts.limit))
             end) do
          nil -> concat(["#TensorBlob.Tensor<", head, ">"])
          values -> concat(["#TensorBlob.Tensor<", head, " ", values, ">"])
        end
      end
    end

    defp preview(_tensor, _shape, device, _dtype, _limit) when device != :cpu, do: nil

    defp preview(tensor, shape, :cpu, dtype, limit) do
      dims = Tuple.to_list(shape)
      numel = Enum.product(dims)
      # What the elements are comes from the library's dtype table.
      %{element_size: size, kind: kind, bits: bits} = :tensor_blob.dtype_info(dtype)
      bytes = first_elements(tensor.ref, dims, min(numel, limit))

      case decode(decoder(kind, bits), size, bytes) do
        nil -> nil
        values -> values |> nested(dims) |> elem(0)
      end
    end

    # The values nested by the shape, as Nx shows them: "[[1, 2], [3, ...], ...]"
    # where they run out before the elements do; a scalar is its value.
    defp nested([value | rest], []), do: {value, rest}

    defp nested(values, [dim | dims]) do
      {items, rest} =
        Enum.reduce_while(1..dim//1, {[], values}, fn
          _, {items, []} ->
            {:halt, {["..." | items], []}}

          _, {items, values} ->
            {item, values} = nested(values, dims)
            {:cont, {[item | items], values}}
        end)

      {"[" <> Enum.join(Enum.reverse(items), ", ") <> "]", rest}
    end

    # The first n elements in row-major (logical) order, whatever the
    # strides, through views (narrow/4) and copies (to_binary) of those
    # elements only: the leading slices of the dimension that n covers
    # whole, then the first elements of the next slice, read the same way
    # one dimension in.
    defp first_elements(ref, dims, n), do: first_elements(ref, 0, dims, n)

    defp first_elements(_ref, _d, _dims, 0), do: <<>>
    defp first_elements(ref, _d, [], _n), do: :tensor_blob.to_binary(ref)

    defp first_elements(ref, d, [dim | dims], n) do
      inner = Enum.product(dims)
      whole = min(div(n, inner), dim)
      left = n - whole * inner
      head = if whole > 0, do: ref |> :tensor_blob.narrow(d, 0, whole) |> :tensor_blob.to_binary(), else: <<>>

      if left > 0 and whole < dim,
        do: head <> first_elements(:tensor_blob.narrow(ref, d, whole, 1), d + 1, dims, left),
        else: head
    end

    defp decode(nil, _size, _bytes), do: nil

    defp decode(decoder, size, bytes),
      do: for(i <- 0..(div(byte_size(bytes), size) - 1)//1, do: decoder.(binary_part(bytes, i * size, size)))

    # A decoder by what the elements are (the table's kind and bits), so a
    # dtype the table gains is shown without a clause of its own. Integers
    # are read with :binary.decode_unsigned, not bit syntax: a pattern would
    # need the element's size as a variable, which Elixir 1.20 wants pinned
    # and 1.14 cannot pin.
    defp decoder(:bool, _bits), do: fn <<b>> -> to_string(b != 0) end
    defp decoder(:uint, _bits), do: fn e -> Integer.to_string(unsigned(e)) end
    defp decoder(:int, bits), do: fn e -> Integer.to_string(signed(unsigned(e), bits)) end
    defp decoder(:float, bits) when bits in [16, 32, 64], do: &float/1
    # bfloat16 is the high half of a float32.
    defp decoder(:bfloat, 16), do: fn e -> float(<<unsigned(e)::16, 0::16>>, :big) end

    defp decoder(:complex, bits) when bits in [32, 64, 128] do
      half = div(bits, 16)

      fn e ->
        {re, im} = :erlang.split_binary(e, half)
        complex(float(re), float(im))
      end
    end

    # 8-bit floats have no bit syntax: no preview.
    defp decoder(_kind, _bits), do: nil

    defp unsigned(bytes), do: :binary.decode_unsigned(bytes, endianness())

    defp signed(u, bits) do
      if u >= :erlang.bsl(1, bits - 1), do: u - :erlang.bsl(1, bits), else: u
    end

    defp complex(re, "-" <> im), do: "#{re}-#{im}i"
    defp complex(re, im), do: "#{re}+#{im}i"

    defp float(bytes, endian \\ :native) do
      value =
        case {endian, bytes} do
          {:native, <<x::float-16-native>>} -> x
          {:native, <<x::float-32-native>>} -> x
          {:native, <<x::float-64-native>>} -> x
          {:big, <<x::float-32-big>>} -> x
          _ -> nil
        end

      if value, do: Float.to_string(value), else: special(bytes, endian)
    end

    # NaN and infinities, which bit syntax does not match.
    defp special(bytes, endian) do
      bits = bit_size(bytes)
      mantissa_bits = %{16 => 10, 32 => 23, 64 => 52}[bits]
      int = :binary.decode_unsigned(bytes, if(endian == :native, do: endianness(), else: :big))

      cond do
        :erlang.band(int, :erlang.bsl(1, mantissa_bits) - 1) != 0 -> "NaN"
        :erlang.bsr(int, bits - 1) == 1 -> "-Inf"
        true -> "Inf"
      end
    end

    defp endianness, do: if(<<1::16-native>> == <<1::16-little>>, do: :little, else: :big)
  end
end
