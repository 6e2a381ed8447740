# Compiled only when ExTorch is loaded; each branch asks Mix to compile it
# again (`__mix_recompile__?/0`) once that changes.
if Code.ensure_loaded?(ExTorch.Tensor.Blob) do
  defmodule TensorBlob.ExTorch do
    @moduledoc """
    Exchange with ExTorch tensors, in the same VM and the same libtorch.

    Compiled only when ExTorch is available. See guides/extorch.md.

    ## From ExTorch: zero-copy, pinned

        view = TensorBlob.ExTorch.from_extorch(extorch_tensor)

    gives a `%TensorBlob.BlobView{}` over the ExTorch tensor's memory whose
    owner is the ExTorch tensor: it stays alive until the last tensor_blob
    tensor using that memory is freed, whatever the ExTorch side drops.
    `TensorBlob.from_blob/2` takes ExTorch's own `%ExTorch.Tensor.Blob{}`
    (`ExTorch.Tensor.Blob.to_blob/1`) as it is, with the same result.
    ExTorch's dtype names (`:float`, `:long`, `:cfloat`, ...) are names of the
    dtype table.

    ## To ExTorch: one copy by default

    ExTorch's `from_blob` makes a tensor with no deleter: it cannot keep our
    memory alive. So `to_extorch/2` gives, by default, an ExTorch tensor
    that owns its memory, allocated by ExTorch and filled by one copy (a
    `[:tensor_blob, :copy]` event with reason `:backend`). Two cases are
    zero-copy:

      * a `%TensorBlob.BlobView{}` whose owner is an ExTorch tensor and that
        views exactly that tensor's memory (what `from_extorch/1` gives)
        comes back as that ExTorch tensor: its memory was ExTorch's;
      * `unsafe_view: true` gives ExTorch's own `%ExTorch.Tensor.BlobView{}`
        over our memory, as `ExTorch.Tensor.Blob.from_blob/2` makes it:
        its owner (our tensor) is held by that struct only. **Keep the
        `%ExTorch.Tensor.BlobView{}` itself reachable for as long as its
        `tensor`, or any ExTorch tensor made from it, is used**: dropping the
        struct and keeping `view.tensor` reads freed memory once the
        garbage collector runs.
    """

    # ExTorch gone since this file was compiled: compile it again.
    @doc false
    def __mix_recompile__?, do: not Code.ensure_loaded?(ExTorch.Tensor.Blob)

    import TensorBlob.Raise

    alias TensorBlob.{Blob, BlobView, Tensor}

    @doc """
    A `%TensorBlob.BlobView{}` over an ExTorch tensor's memory, zero-copy,
    that keeps the ExTorch tensor alive (its owner). Takes an
    `%ExTorch.Tensor{}`, its `%ExTorch.Tensor.Blob{}`, or an
    `%ExTorch.Tensor.BlobView{}` (whose struct, pinned whole, keeps its
    owner).
    """
    @spec from_extorch(ExTorch.Tensor.t() | ExTorch.Tensor.Blob.t() | ExTorch.Tensor.BlobView.t()) :: BlobView.t()
    def from_extorch(%ExTorch.Tensor{} = t), do: transfer(:from_extorch, fn -> blob_of(t) end, owner: t)

    def from_extorch(%ExTorch.Tensor.Blob{owner: %ExTorch.Tensor{} = t} = blob),
      do: transfer(:from_extorch, fn -> checked_blob!(blob, t) end, owner: t)

    def from_extorch(%ExTorch.Tensor.Blob{owner: owner}) do
      ("owner: an %ExTorch.Tensor.Blob{} given to from_extorch names its ExTorch tensor as owner " <>
         "(ExTorch.Tensor.Blob.to_blob/1 does), got #{TensorBlob.Raise.inspect_term(owner)}; for memory " <>
         "the caller answers for, use TensorBlob.from_blob(spec, owner: :none)")
      |> badarg!(:bad_value, :owner)
    end

    def from_extorch(%ExTorch.Tensor.BlobView{tensor: %ExTorch.Tensor{} = t} = view),
      do: transfer(:from_extorch, fn -> blob_of(t) end, owner: view)

    def from_extorch(other) do
      ("from_extorch: expected an ExTorch tensor (%ExTorch.Tensor{}), its %ExTorch.Tensor.Blob{} or an " <>
         "%ExTorch.Tensor.BlobView{}, got #{TensorBlob.Raise.inspect_term(other)}")
      |> badarg!(:not_a_tensor, :tensor)
    end

    defp blob_of(t) do
      blob = ExTorch.Tensor.Blob.to_blob(t)
      %{blob | dtype: named_dtype(blob, t)}
    end

    # A blob is memory its owner holds: its dtype and device are the owner's,
    # and its elements lie within the owner's elements (what ExTorch says of
    # the owner, not what the struct says of itself).
    defp checked_blob!(blob, t) do
      theirs = blob_of(t)
      dtype = canonical(named_dtype(blob, t))

      if dtype == nil or dtype != canonical(theirs.dtype) do
        ("dtype: the blob says #{inspect(blob.dtype)}, and its owner is an ExTorch tensor of " <>
           "#{inspect(theirs.dtype)}; a blob describes its owner's memory as the owner holds it")
        |> badarg!(:bad_dtype, :dtype)
      end

      if blob.device != theirs.device do
        "device: the blob says #{inspect(blob.device)}, and its owner is on #{inspect(theirs.device)}"
        |> badarg!(:wrong_device, :device)
      end

      size = Enum.find(TensorBlob.tables().dtypes, &(&1.name == dtype)).element_size

      case {span(theirs.ptr, theirs.shape, theirs.strides, size), span(blob.ptr, blob.shape, blob.strides, size)} do
        {_, :malformed} ->
          # from_blob says what is wrong with the layout.
          :ok

        {{lo, :empty}, _} ->
          # An owner with no elements holds no memory to view.
          if blob.ptr != lo, do: outside!(blob, lo, lo)

        {{lo, hi}, {ptr, :empty}} ->
          if ptr < lo or ptr > hi, do: outside!(blob, lo, hi)

        {{lo, hi}, {from, to}} ->
          cond do
            blob.ptr < lo or blob.ptr >= hi -> outside!(blob, lo, hi)
            from < lo or to > hi -> past!(blob, theirs, lo, hi, from, to)
            true -> :ok
          end
      end

      %{blob | dtype: dtype}
    end

    defp outside!(blob, lo, hi) do
      ("ptr: #{hex(blob.ptr)} is not in its owner's memory ([#{hex(lo)}, #{hex(hi)}), as ExTorch " <>
         "reports the owner tensor); for memory the caller answers for, use TensorBlob.from_blob(spec, owner: :none)")
      |> badarg!(:out_of_extent, :ptr)
    end

    defp past!(blob, theirs, lo, hi, from, to) do
      field = if blob.strides in [nil, theirs.strides], do: :shape, else: :strides

      ("#{field}: shape #{inspect(blob.shape)} with strides #{inspect(blob.strides)} from #{hex(blob.ptr)} " <>
         "reaches [#{hex(from)}, #{hex(to)}), past its owner's memory ([#{hex(lo)}, #{hex(hi)}), as ExTorch " <>
         "reports the owner tensor)")
      |> badarg!(:out_of_extent, field)
    end

    defp hex(n) when is_integer(n) and n >= 0, do: "0x" <> Integer.to_string(n, 16)
    defp hex(n), do: inspect(n)

    # The bytes a layout's elements span: {lo, hi}; {ptr, :empty} with no
    # elements; :malformed for what is no layout (from_blob refuses it).
    defp span(ptr, shape, strides, size) when is_integer(ptr) and is_tuple(shape) do
      dims = Tuple.to_list(shape)
      strides = if strides == nil, do: Tensor.row_major_strides(shape), else: strides
      strides = if is_tuple(strides), do: Tuple.to_list(strides), else: strides

      cond do
        not (is_list(strides) and length(strides) == length(dims) and Enum.all?(dims ++ strides, &is_integer/1)) ->
          :malformed

        Enum.any?(dims, &(&1 < 0)) ->
          :malformed

        0 in dims ->
          {ptr, :empty}

        true ->
          {low, high} =
            Enum.zip_reduce(dims, strides, {0, 0}, fn d, st, {low, high} ->
              reach = (d - 1) * st
              {low + min(reach, 0), high + max(reach, 0)}
            end)

          {ptr + low * size, ptr + (high + 1) * size}
      end
    end

    defp span(_ptr, _shape, _strides, _size), do: :malformed

    # ExTorch 0.4 names int8 and bfloat16 tensors :"" (its table of names
    # lacks them). Of the dtypes ExTorch can make, those two are the only
    # unnamed ones, and their element size and kind tell them apart; any
    # other unnamed tensor keeps :"", which from_blob refuses.
    defp named_dtype(%{dtype: :"", element_size: 1}, t) do
      if ExTorch.Tensor.is_floating_point(t) or ExTorch.Tensor.is_complex(t), do: :"", else: :int8
    end

    defp named_dtype(%{dtype: :"", element_size: 2}, t) do
      if ExTorch.Tensor.is_floating_point(t) and not ExTorch.Tensor.is_complex(t), do: :bfloat16, else: :""
    end

    defp named_dtype(%{dtype: dtype}, _t), do: dtype

    defp transfer(function, blob_of, opts) do
      :tensor_blob_door.span({__MODULE__, function, 1}, fn ->
        start = :tensor_blob_door.start(:transfer)
        view = TensorBlob.from_blob(blob_of.(), opts)

        :tensor_blob_door.transferred(start, {__MODULE__, function, 1}, Tensor.ref(view), false, %{
          backend: ExTorch
        })

        view
      end)
    end

    @doc """
    An ExTorch tensor of a tensor_blob tensor's contents (see the module
    doc). Takes a `%TensorBlob.Tensor{}`, a `%TensorBlob.BlobView{}` or a
    `%TensorBlob.Blob{}` (viewed with its owner pinned) on the CPU.

      * by default: an `%ExTorch.Tensor{}` that owns its memory (one copy), or
        the ExTorch tensor itself for a view of exactly its memory;
      * `unsafe_view: true`: an `%ExTorch.Tensor.BlobView{}` over our memory,
        zero-copy; keep that struct reachable while its tensor is used.
    """
    @spec to_extorch(Tensor.t() | BlobView.t() | Blob.t(), keyword()) ::
            ExTorch.Tensor.t() | ExTorch.Tensor.BlobView.t()
    def to_extorch(tensor, opts \\ [])

    def to_extorch(%Blob{} = blob, opts), do: to_extorch(TensorBlob.from_blob(blob), opts)

    def to_extorch(%struct{} = t, opts) when struct in [Tensor, BlobView] do
      unsafe_view = unsafe_view!(opts)

      :tensor_blob_door.span({__MODULE__, :to_extorch, 2}, fn ->
        start = :tensor_blob_door.start(:transfer)
        blob = extorch_blob!(t)

        # ExTorch writes its tensors with no guard of ours: memory that must
        # not change (read-only, or a binary's bytes) goes as a copy, or is
        # refused where a view was asked for.
        writable = translating(do: :tensor_blob_door.writable(Tensor.ref(t)))

        {result, copied} =
          cond do
            unsafe_view and writable != true -> read_only!(writable)
            writable != true -> {copy_of(t, blob), true}
            owner = extorch_owner(t, blob) -> {if(unsafe_view, do: own_view(owner), else: owner), false}
            unsafe_view -> {ExTorch.Tensor.Blob.from_blob(blob, owner: t), false}
            true -> {copy_of(t, blob), true}
          end

        :tensor_blob_door.transferred(start, {__MODULE__, :to_extorch, 2}, Tensor.ref(t), copied, %{
          backend: ExTorch
        })

        result
      end)
    end

    def to_extorch(other, _opts) do
      ("to_extorch: expected a tensor_blob tensor (%TensorBlob.Tensor{}, %TensorBlob.BlobView{} or " <>
         "%TensorBlob.Blob{}), got #{TensorBlob.Raise.inspect_term(other)}")
      |> badarg!(:not_a_tensor, :tensor)
    end

    defp read_only!(why) do
      shown =
        if why == :frozen,
          do: "a binary made by Tensor.to_binary(t, copy: false) shows its memory, and binaries are immutable",
          else: "it is read-only (a view of a binary's bytes, or a read-only DLPack import, or memory they share)"

      ("tensor: #{shown}; ExTorch can write any tensor it holds, so unsafe_view: true cannot hand it " <>
         "over; without unsafe_view: true ExTorch gets a copy of its own")
      |> badarg!(:read_only, :tensor)
    end

    defp unsafe_view!([]), do: false

    defp unsafe_view!(opts),
      do: translating(do: :tensor_blob_options.check(opts, [{:unsafe_view, :boolean, false}], :keywords)).unsafe_view

    # Our tensor's layout, as ExTorch's from_blob takes it. ExTorch's
    # from_blob ignores the device (a CUDA pointer would become a CPU
    # tensor), so only CPU tensors go; and only dtypes ExTorch holds.
    defp extorch_blob!(t) do
      {ptr, shape, strides, dtype, device, _, _, _} = translating(do: :tensor_blob_door.blob_fields(Tensor.ref(t)))

      if device != :cpu do
        ("tensor: on #{inspect(device)}; ExTorch's from_blob takes host memory only " <>
           "(copy it with TensorBlob.Tensor.to_device(t, :cpu))")
        |> badarg!(:wrong_device, :tensor)
      end

      unless extorch_dtype?(dtype) do
        "tensor: dtype #{inspect(dtype)} has no ExTorch counterpart (ExTorch holds #{inspect(shared_dtypes())})"
        |> badarg!(:unsupported, :tensor)
      end

      %{ptr: ptr, shape: shape, strides: strides, dtype: dtype, device: :cpu}
    end

    @doc """
    The canonical dtypes both this libtorch (through the dtype table) and
    ExTorch hold: those of the table ExTorch takes by their canonical
    names.
    """
    @spec shared_dtypes() :: [atom()]
    def shared_dtypes do
      for %{name: name, available: true} <- TensorBlob.tables().dtypes, extorch_name?(name), do: name
    end

    defp extorch_dtype?(dtype), do: dtype in shared_dtypes()

    require ExTorch.DType
    defp extorch_name?(name) when ExTorch.DType.is_dtype(name), do: true
    defp extorch_name?(_), do: false

    # The ExTorch tensor a view pins, when the view is exactly its memory.
    defp extorch_owner(%BlobView{owner: %ExTorch.Tensor{} = owner}, blob) do
      theirs = ExTorch.Tensor.Blob.to_blob(owner)

      if theirs.ptr == blob.ptr and theirs.shape == blob.shape and theirs.strides == blob.strides and
           canonical(named_dtype(theirs, owner)) == blob.dtype and theirs.device == :cpu,
         do: owner
    end

    defp extorch_owner(_, _), do: nil

    defp canonical(dtype) do
      Enum.find_value(TensorBlob.tables().dtypes, fn %{name: name, aliases: aliases} ->
        if dtype == name or dtype in aliases, do: name
      end)
    end

    # ExTorch's own view of memory ExTorch owns: safe, its tensor is the owner.
    defp own_view(owner), do: %ExTorch.Tensor.BlobView{tensor: owner, owner: owner}

    # One copy into memory ExTorch allocated and owns, made by the library
    # under its SIGBUS guard (ExTorch's own copy of a region that another
    # program shrank would kill the VM).
    defp copy_of(t, blob) do
      copy = ExTorch.empty(blob.shape, dtype: blob.dtype)
      ref = Tensor.ref(t)

      if :tensor_blob_door.data_bytes(ref) == 0 do
        # No elements (ExTorch's pointer may be null): nothing to view or copy.
        start = :tensor_blob_door.start(:copy)
        :tensor_blob_door.copied(start, {__MODULE__, :to_extorch, 2}, :backend, 0, ref)
      else
        target = TensorBlob.from_blob(blob_of(copy), owner: copy)
        translating(do: :tensor_blob_door.copy_into(Tensor.ref(target), ref, {__MODULE__, :to_extorch, 2}, :backend))
      end

      copy
    end
  end
else
  defmodule TensorBlob.ExTorch.Absent do
    @moduledoc false
    # ExTorch was not on the code path when this file was compiled.
    def __mix_recompile__?, do: Code.ensure_loaded?(ExTorch.Tensor.Blob)
  end
end
