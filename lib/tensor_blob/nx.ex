# Compiled only when Nx (an optional dependency) is loaded; each branch asks Mix to compile it
# again (`__mix_recompile__?/0`) once that changes: Nx added to, or removed from, a built project.
if Code.ensure_loaded?(Nx) do
  defmodule TensorBlob.Nx do
    @moduledoc """
    Zero-copy exchange between `Nx.Tensor`s and tensor_blob tensors.

    Compiled only when Nx is available (Nx 0.9 or newer). Types map both ways
    through the dtype table (`{:f, 32}` and `:float32`, `{:bf, 16}` and
    `:bfloat16`, `{:c, 64}` and `:complex64`, `{:f, 8}` and `:float8_e5m2`,
    ...). Nx's sub-byte types (`{:u, 2}`, `{:u, 4}`, `{:s, 2}`, `{:s, 4}`)
    have no libtorch counterpart and raise `ArgumentError`. A `:bool` tensor becomes `{:u, 8}`
    (same bytes). A `:complex32` tensor (two float16 per element) has no Nx type, and `to_nx/2`
    refuses it. Axis names do not cross: `to_nx/2` gives none, `from_nx/2` drops them.

    ## Nx functions and `defn`

    `TensorBlob.Tensor` and `TensorBlob.BlobView` implement
    `Nx.LazyContainer` and `Nx.Container`. These take them as they are, and
    give what they give for `to_nx(t)`:

      * `defn` functions and `Nx.Defn.jit/2`;
      * `Nx.to_tensor/1`, `Nx.backend_copy/2`, `Nx.backend_transfer/2`,
        `Nx.serialize/2`;
      * `Nx.sum/2`, `Nx.mean/2`, `Nx.product/2`, `Nx.reduce_max/2`,
        `Nx.reduce_min/2`, `Nx.all/2`, `Nx.any/2`, `Nx.type/1`,
        `Nx.to_binary/2`, `Nx.to_flat_list/2`, `Nx.to_number/1`,
        `Nx.reshape/3`, `Nx.flatten/2`.

    What Nx gets is a copy of the data for `Nx.default_backend()`, made
    when Nx asks for it: a result may share its input's bytes
    (`Nx.reshape/3` does), and the copy leaves the tensor writable
    (`Tensor.write!/2`) the moment the call returns. `to_nx/2` is the
    zero-copy way.

    Every other Nx function needs `to_nx/2` first. Nx's element-wise
    functions (`Nx.add/2`, `Nx.multiply/2`, ...) work out the result type
    from their arguments before converting them, and would take any
    tensor that is not an `%Nx.Tensor{}` for f32: they raise
    `ArgumentError` saying to call `to_nx/2`. Those that accept only
    numbers and `%Nx.Tensor{}` (`Nx.negate/1`, `Nx.abs/1`, `Nx.exp/1`,
    `Nx.shape/1`, `Nx.rank/1`, `Nx.size/1`, `Nx.tensor/2`, ...) raise
    Nx's own `FunctionClauseError` or `ArgumentError` before any code of
    this library runs. Tensors Nx cannot take (not on the CPU, a
    dimension of size 0, `:complex32`) raise `ArgumentError` before any
    data is read.

    ## From Nx

        t = TensorBlob.Nx.from_nx(Nx.iota({2, 3}, type: :f32))

      * `Nx.BinaryBackend`: a read-only tensor over the backend's binary,
        zero-copy, that pins the binary (see
        `TensorBlob.Tensor.from_binary/4`).
      * a backend whose memory is on the host and that implements
        `Nx.to_pointer/2` (Torchx, EXLA on the host): a view over
        `Nx.to_pointer(t, mode: :local)` (`kind: :local` on Nx 0.9) that pins
        the Nx tensor, so the backend's memory lives as long as the view.
        For another backend, pass `device: :cpu` to say its pointers are host
        memory; without it the data is copied, since viewing device memory
        as host memory would crash. A backend that stores the type in other
        bytes (Torchx keeps `{:u, 16}` in 32-bit and `{:u, 32}` in 64-bit
        integers) cannot be viewed: the data is copied.
      * anything else: a copy through `Nx.to_binary/1`.

    `Tensor.memory/1` of the result tells which one happened (`:binary`
    for a view of the BinaryBackend's binary, `:pinned` for a view of a
    pointer backend's memory, `:ipc` for a shared-memory region, `:owned`
    for a copy). `copy: :never` raises instead of
    copying; `copy: :always` always copies.

    **What a pin cannot do**: it keeps the Nx tensor reachable, so the
    garbage collector never frees the backend's memory under a view. It
    cannot stop the backend from freeing it on request: after
    `Nx.backend_deallocate/1` or `Nx.backend_transfer/2` of the Nx tensor, or
    `Nx.to_pointer(t, mode: :ipc)` (Torchx then moves the tensor into shared
    memory and frees the old block), a view made before reads freed memory.
    A tensor deallocated before `from_nx` is refused. Where the Nx tensor
    may be freed that way, pass `ipc: true`: the backend moves the tensor
    into a shared-memory region (one copy, the first time) and tensor_blob
    maps that region itself (`TensorBlob.IPC.open/3`), so each side keeps
    its own mapping and neither side's freeing reaches the other, while
    writes still cross both ways. Or copy (`copy: :always`).

    ## To Nx

        nx = TensorBlob.Nx.to_nx(t)                                 # Nx.default_backend()
        nx = TensorBlob.Nx.to_nx(t, backend: Torchx.Backend)        # or to_nx(t, Torchx.Backend)

      * `Nx.BinaryBackend`: `%Nx.Tensor{}` over a binary that shows the
        tensor's memory (`TensorBlob.Tensor.to_binary(t, copy: false)`),
        zero-copy; the binary pins the memory, and while it (or an Nx result
        sharing it) lives, `Tensor.write!/2` refuses the tensor, as binaries
        are immutable. A non-contiguous tensor is
        copied. A tensor in a shared-memory region (`TensorBlob.IPC`) is
        copied too: another program can shrink the region, and reading a
        binary over the lost pages would kill the VM with SIGBUS (see
        `TensorBlob.Tensor.to_binary/2`); `unsafe_view: true` views it
        anyway, accepting that risk. Only CPU tensors.
      * another backend (Torchx, EXLA): such a backend cannot be made to keep
        our memory alive, so it gets memory of its own. A tensor that is a
        whole shared-memory region (`TensorBlob.IPC.zeros/2`,
        `TensorBlob.IPC.open/3`) is handed over zero-copy as an IPC pointer:
        the backend maps the region itself, and the mapping lives as long as
        its tensor, whatever happens to ours; writes cross both ways. Any
        other tensor, or a backend that takes no IPC pointers, is copied
        (`backend.from_binary/3`).
      * `unsafe_view: true`: `Nx.from_pointer/5` on our pointer, zero-copy,
        unguarded: the backend does not pin our tensor, so **keep the
        tensor_blob tensor reachable as long as you use the Nx tensor**
        (dropping it and collecting makes Torchx read freed memory, or
        crash the VM), and its reads of a region another program shrinks
        are not guarded. Needs a contiguous tensor.

    A region is handed over only after its file was checked: one another
    program shrank raises `TensorBlob.Error`, as `Tensor.to_binary/1` does.
    A view of a backend's own mapping of a shared-memory file (a region
    handed over, Torchx's `to_pointer(mode: :ipc)`) is known as region
    memory (the kernel names the file), and keeps a region's protection.
    """

    # Nx gone since this file was compiled: compile it again (see above).
    @doc false
    def __mix_recompile__?, do: not Code.ensure_loaded?(Nx)

    import TensorBlob.Raise

    alias TensorBlob.{Blob, BlobView, Tensor}
    alias TensorBlob.Nx.{Options, Views}

    @sub_byte [{:u, 2}, {:u, 4}, {:s, 2}, {:s, 4}]

    @doc """
    A `%TensorBlob.Tensor{}` over an `Nx.Tensor`'s memory (see the module doc).

    Options: `copy:` (`:auto`, the default; `:never`; `:always`), `device:`
    (`:cpu`: the backend's `to_pointer` gives host memory; needed only for
    backends other than the binary backend, Torchx and EXLA), `ipc: true`
    (share through a region that tensor_blob maps itself; see the module
    doc).

    Anything but an `Nx.Tensor` (a tensor_blob tensor included) raises `ArgumentError` saying what to pass.
    """
    @spec from_nx(Nx.Tensor.t(), keyword()) :: Tensor.t()
    def from_nx(nx, opts \\ [])

    def from_nx(%Nx.Tensor{vectorized_axes: [_ | _] = axes}, _opts) do
      ("from_nx: a vectorized tensor (vectorized axes #{inspect(axes)}) has no single layout; " <>
         "call Nx.devectorize/2 first")
      |> badarg!(:bad_shape, :tensor)
    end

    def from_nx(%Nx.Tensor{} = nx, opts) do
      :tensor_blob_door.span({__MODULE__, :from_nx, 2}, fn ->
        start = :tensor_blob_door.start(:transfer)
        {copy, device, ipc} = Options.from_nx!(opts)
        dtype = dtype!(nx.type)

        t =
          cond do
            copy == :always -> Views.copy_of(nx, dtype, :requested)
            match?(%Nx.BinaryBackend{}, nx.data) -> Views.binary_view(nx, dtype, copy)
            ipc -> Views.region_view(nx, dtype)
            true -> Views.pointer_view(nx, dtype, copy, device)
          end

        transferred(start, :from_nx, t, start != :undefined and copied?(nx, t), nx.data.__struct__)
        t
      end)
    end

    def from_nx(%struct{} = t, _opts) when struct in [Tensor, BlobView, Blob] do
      ("from_nx: expected an Nx tensor (%Nx.Tensor{}), got a tensor_blob #{kind(t)}: " <>
         "it needs no conversion (to_nx/2 makes an Nx tensor of it, and Nx functions take it as it is)")
      |> badarg!(:bad_value, :tensor)
    end

    def from_nx(other, _opts) do
      ("from_nx: expected an Nx tensor (%Nx.Tensor{}), got #{inspect(other, limit: 8, printable_limit: 64)}; " <>
         "make one first (Nx.tensor/2, Nx.from_binary/3)")
      |> badarg!(:bad_value, :tensor)
    end

    @doc """
    An `Nx.Tensor` of a tensor_blob tensor's contents (see the module doc).
    Takes a `%Tensor{}`, a `%BlobView{}` or a `%Blob{}` (viewed with its
    owner pinned), and a backend (a module or `{module, options}`) or
    options:

      * `backend:` the Nx backend, `Nx.default_backend()` by default;
      * `unsafe_view: true`: give a backend other than the binary backend a
        bare pointer to our memory, and the binary backend a view of a
        shared-memory region (see the module doc); `false` by default.

    Anything but a tensor_blob tensor (an `Nx.Tensor` included) raises
    `ArgumentError` saying what to pass.
    """
    @spec to_nx(Tensor.t() | BlobView.t() | Blob.t(), atom() | {atom(), keyword()} | keyword()) :: Nx.Tensor.t()
    def to_nx(tensor_or_blob, backend_or_opts \\ [])

    def to_nx(%BlobView{tensor: t}, arg), do: to_nx(t, arg)
    def to_nx(%Blob{} = blob, arg), do: to_nx(TensorBlob.from_blob(blob).tensor, arg)

    def to_nx(%Nx.Tensor{}, _arg) do
      ("to_nx: expected a tensor_blob tensor (%TensorBlob.Tensor{}, %TensorBlob.BlobView{} or " <>
         "%TensorBlob.Blob{}), got an Nx tensor: it needs no conversion (from_nx/2 makes a tensor_blob tensor of it)")
      |> badarg!(:not_a_tensor, :tensor)
    end

    def to_nx(other, _arg) when not is_struct(other, Tensor) do
      ("to_nx: expected a tensor_blob tensor (%TensorBlob.Tensor{}, %TensorBlob.BlobView{} or " <>
         "%TensorBlob.Blob{}), got #{inspect(other, limit: 8, printable_limit: 64)}")
      |> badarg!(:not_a_tensor, :tensor)
    end

    def to_nx(%Tensor{} = t, arg), do: :tensor_blob_door.span({__MODULE__, :to_nx, 2}, fn -> to_nx!(t, arg) end)

    defp to_nx!(t, arg) do
      start = :tensor_blob_door.start(:transfer)
      {backend, unsafe_view} = Options.to_nx!(arg)
      {shape, type} = layout!(t)

      {nx, copied} =
        cond do
          elem(backend, 0) == Nx.BinaryBackend ->
            # A view where it is safe: a region another program can shrink is
            # copied (a read of a view would die of SIGBUS), unless unsafe_view.
            {bytes, copied} =
              translating(do: :tensor_blob_door.binary_of(Tensor.ref(t), unsafe_view, :to_nx, {__MODULE__, :to_nx, 2}))

            {%Nx.Tensor{data: %Nx.BinaryBackend{state: bytes}, type: type, shape: shape, names: names(shape)}, copied}

          unsafe_view ->
            {unguarded_view(t, backend, type, shape), false}

          nx = region_handover(t, backend, type, shape) ->
            {nx, false}

          true ->
            {copy_to(t, backend, type, shape), true}
        end

      transferred(start, :to_nx, t, copied, elem(backend, 0))
      nx
    end

    # A [:tensor_blob, :transfer] span (guides/telemetry.md).
    defp transferred(start, function, t, copied, backend),
      do: :tensor_blob_door.transferred(start, {__MODULE__, function, 2}, Tensor.ref(t), copied, %{backend: backend})

    # The shape and Nx type of a tensor Nx can take (one call for the
    # layout: shape, strides, dtype and device), or ArgumentError.
    defp layout!(t) do
      {_ptr, shape, _strides, dtype, device, _, _, _} = translating(do: :tensor_blob_door.blob_fields(Tensor.ref(t)))
      type = cached_nx_type!(dtype)

      if device != :cpu do
        "tensor: on #{inspect(device)}; to_nx takes CPU tensors (copy it with TensorBlob.Tensor.to_device(t, :cpu))"
        |> badarg!(:wrong_device, :tensor)
      end

      # Nx refuses dimensions of size 0 (Nx.iota({0}) raises): no tensor it
      # could use can be built, so say so here rather than hand one over.
      if 0 in Tuple.to_list(shape) do
        ("tensor: shape #{inspect(shape)} has a dimension of size 0, and Nx tensors have none; " <>
           "there is nothing to hand to Nx")
        |> badarg!(:bad_shape, :tensor)
      end

      {shape, type}
    end

    @doc false
    # What Nx's own functions get (lib/tensor_blob/nx/lazy.ex): a copy for
    # Nx.default_backend(), an ordinary binary that nothing of ours shares.
    @spec copy_to_nx(Tensor.t()) :: Nx.Tensor.t()
    def copy_to_nx(%Tensor{} = t) do
      start = :tensor_blob_door.start(:transfer)
      {shape, type} = layout!(t)
      {backend, false} = Options.to_nx!([])
      nx = copy_to(t, backend, type, shape, :requested)
      transferred(start, :to_nx, t, true, elem(backend, 0))
      nx
    end

    @doc false
    # Nx.LazyContainer: the template Nx sees before the tensor is made.
    @spec template!(Tensor.input()) :: Nx.Tensor.t()
    def template!(tensor) do
      {shape, type} = layout!(tensor)
      Nx.template(shape, type)
    end

    defp kind(%Tensor{}), do: "tensor (%TensorBlob.Tensor{})"
    defp kind(%BlobView{}), do: "view (%TensorBlob.BlobView{})"
    defp kind(%Blob{}), do: "blob (%TensorBlob.Blob{})"

    # The backend maps the region itself: its mapping is its own.
    defp region_handover(t, backend, type, shape) do
      # name/1 refuses a region another program shrank (the backend's reads are unguarded).
      case translating(do: :tensor_blob_ipc.name(Tensor.ref(t))) do
        {name, size} ->
          pointer = %Nx.Pointer{kind: :ipc, handle: name, data_size: size}

          try do
            unwrap(Nx.from_pointer(backend, pointer, type, shape))
          rescue
            # A backend that takes no IPC pointers, or stores this type in
            # other bytes: it gets a copy.
            _ in [ArgumentError, RuntimeError, ErlangError, UndefinedFunctionError, FunctionClauseError] -> nil
          end

        nil ->
          nil
      end
    end

    defp copy_to(t, {module, opts}, type, shape, reason \\ :backend) do
      template = %Nx.Tensor{data: nil, type: type, shape: shape, names: names(shape)}
      bytes = translating(do: :tensor_blob_door.copy_to_binary(Tensor.ref(t), {__MODULE__, :to_nx, 2}, reason))
      module.from_binary(template, bytes, opts)
    end

    defp unguarded_view(t, backend, type, shape) do
      unless contiguous?(t) do
        "tensor: not contiguous; Nx.from_pointer needs row-major memory"
        |> badarg!(:not_contiguous, :tensor)
      end

      blob = TensorBlob.to_blob(t)
      pointer = %Nx.Pointer{kind: :local, address: blob.ptr, data_size: blob.byte_size}

      try do
        Nx.from_pointer(backend, pointer, type, shape)
      rescue
        e in ArgumentError ->
          ("unsafe_view: #{inspect(elem(backend, 0))} cannot view #{Tensor.dtype(t)} memory as #{inspect(type)} " <>
             "(#{Exception.message(e)}); without unsafe_view: true the tensor is copied")
          |> badarg!(:unsupported, :unsafe_view)
      else
        result ->
          unwrap(result) ||
            "to_nx: #{inspect(backend)} refused the pointer: #{inspect(result)}"
            |> error!(:unsupported, :none)
      end
    end

    defp unwrap({:ok, %Nx.Tensor{} = nx}), do: nx
    defp unwrap(%Nx.Tensor{} = nx), do: nx
    defp unwrap(_), do: nil

    ## Types

    # Nx types are dtypes already (the dtype table knows them), except the
    # sub-byte ones.
    defp dtype!(type) when type in @sub_byte do
      ("type: Nx's sub-byte type #{inspect(type)} has no libtorch counterpart (its elements are packed " <>
         "below a byte); convert it first, for example with Nx.as_type(t, {:u, 8})")
      |> badarg!(:unsupported, :type)
    end

    defp dtype!(type), do: type

    @doc """
    The Nx type of a dtype; `:bool` gives `{:u, 8}`. `:complex32` raises
    `ArgumentError`: Nx has no complex type of 32 bits.
    """
    @spec nx_type!(atom()) :: Nx.Type.t()
    def nx_type!(:bool), do: {:u, 8}

    def nx_type!(:complex32) do
      ("dtype: :complex32 has no Nx type (Nx's complex types are {:c, 64} and {:c, 128}); " <>
         "convert the tensor to :complex64 in libtorch first")
      |> badarg!(:unsupported, :dtype)
    end

    def nx_type!(dtype) do
      case translating(do: :tensor_blob.nx_type(dtype)) do
        nil ->
          "dtype: #{inspect(dtype)} has no Nx type"
          |> badarg!(:unsupported, :dtype)

        type ->
          try do
            Nx.Type.normalize!(type)
          rescue
            ArgumentError ->
              "dtype: #{inspect(dtype)} maps to #{inspect(type)}, which this Nx lacks"
              |> badarg!(:unsupported, :dtype)
          end
      end
    end

    # nx_type!/1 of a canonical dtype, worked out once per dtype: to_nx asks
    # for every tensor, and the answer cannot change while this Nx is loaded.
    defp cached_nx_type!(dtype) do
      key = {__MODULE__, :nx_type, dtype}

      case :persistent_term.get(key, nil) do
        nil ->
          type = nx_type!(dtype)
          :persistent_term.put(key, type)
          type

        type ->
          type
      end
    end

    ## Helpers

    # from_nx copied: an owned tensor, or a view of a binary of 64 bytes or
    # less, of which its pin holds a copy (the VM copies such a binary with
    # the term, a part of a larger one too on OTP 27, whose
    # referenced_byte_size/1 then says nothing of it).
    defp copied?(nx, t) do
      memory = Tensor.memory(t)
      memory == :owned or (memory == :binary and byte_size(nx.data.state) <= 64)
    end

    defp names(shape), do: List.duplicate(nil, tuple_size(shape))

    defp contiguous?(t), do: Tensor.strides(t) == Tensor.row_major_strides(Tensor.shape(t))
  end

  # Nx.LazyContainer and Nx.Container: lib/tensor_blob/nx/lazy.ex.
else
  defmodule TensorBlob.Nx.Absent do
    @moduledoc false
    # Nx was not on the code path when this file was compiled.
    def __mix_recompile__?, do: Code.ensure_loaded?(Nx)
  end
end
