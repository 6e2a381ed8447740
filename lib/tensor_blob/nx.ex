# Compiled only when Nx is loaded: Nx is an optional dependency, and
# tensor_blob builds and tests without it.
if Code.ensure_loaded?(Nx) do
  defmodule TensorBlob.Nx do
    @moduledoc """
    Zero-copy exchange between `Nx.Tensor`s and tensor_blob tensors.

    Compiled only when Nx is available (Nx 0.9 or newer). Types map both ways
    through the dtype table (`{:f, 32}` and `:float32`, `{:bf, 16}` and
    `:bfloat16`, `{:c, 64}` and `:complex64`, `{:f, 8}` and `:float8_e5m2`,
    ...). Nx's sub-byte types (`{:u, 2}`, `{:u, 4}`, `{:s, 2}`, `{:s, 4}`)
    have no libtorch counterpart and raise `ArgumentError`. A `:bool`
    tensor becomes `{:u, 8}` (same bytes). Axis names do not cross: a tensor
    from `to_nx/2` has no names, and `from_nx/2` drops them.

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
        as host memory would crash.
      * anything else: a copy through `Nx.to_binary/1`.

    `Tensor.memory/1` of the result tells which one happened (`:pinned`
    for a view, `:owned` for a copy). `copy: :never` raises instead of
    copying; `copy: :always` always copies.

    ## To Nx

        nx = TensorBlob.Nx.to_nx(t)

      * `Nx.BinaryBackend` (the default): `%Nx.Tensor{}` over a binary that
        shows the tensor's memory (`TensorBlob.Tensor.to_binary(t, copy:
        false)`), zero-copy; the binary pins the memory. A non-contiguous
        tensor is copied. Only CPU tensors.
      * another backend: `Nx.from_pointer/5` on the tensor's pointer. Such a
        backend does not know it must keep our memory alive: **keep the
        tensor_blob tensor reachable as long as you use the Nx tensor**, or
        copy with `Nx.backend_copy/2`. Needs a contiguous tensor.
    """

    alias TensorBlob.{Blob, BlobView, Tensor}

    @sub_byte [{:u, 2}, {:u, 4}, {:s, 2}, {:s, 4}]

    @doc """
    A `%TensorBlob.Tensor{}` over an `Nx.Tensor`'s memory (see the module doc).

    Options: `copy:` (`:auto`, the default; `:never`; `:always`), `device:`
    (`:cpu`: the backend's `to_pointer` gives host memory; needed only for
    backends other than the binary backend, Torchx and EXLA).
    """
    @spec from_nx(Nx.Tensor.t(), keyword()) :: Tensor.t()
    def from_nx(%Nx.Tensor{} = nx, opts \\ []) do
      {copy, device} = options!(opts)
      dtype = dtype!(nx.type)

      cond do
        copy == :always -> copy_of(nx, dtype)
        match?(%Nx.BinaryBackend{}, nx.data) -> binary_view(nx, dtype, copy)
        true -> pointer_view(nx, dtype, copy, device)
      end
    end

    @doc """
    An `Nx.Tensor` over a tensor_blob tensor's memory (see the module doc).
    Takes a `%Tensor{}`, a `%BlobView{}` or a `%Blob{}` (viewed with its
    owner pinned).
    """
    @spec to_nx(Tensor.t() | BlobView.t() | Blob.t(), atom() | {atom(), keyword()}) :: Nx.Tensor.t()
    def to_nx(tensor_or_blob, backend \\ Nx.BinaryBackend)

    def to_nx(%BlobView{tensor: t}, backend), do: to_nx(t, backend)
    def to_nx(%Blob{} = blob, backend), do: to_nx(TensorBlob.from_blob(blob).tensor, backend)

    def to_nx(%Tensor{} = t, backend) do
      type = nx_type!(Tensor.dtype(t))
      shape = Tensor.shape(t)

      if Tensor.device(t) != :cpu do
        raise ArgumentError, "tensor: on #{inspect(Tensor.device(t))}; to_nx takes CPU tensors"
      end

      case backend do
        b when b == Nx.BinaryBackend or (is_tuple(b) and elem(b, 0) == Nx.BinaryBackend) ->
          bytes = if contiguous?(t), do: Tensor.to_binary(t, copy: false), else: Tensor.to_binary(t)
          %Nx.Tensor{data: %Nx.BinaryBackend{state: bytes}, type: type, shape: shape, names: names(shape)}

        _ ->
          unless contiguous?(t) do
            raise ArgumentError, "tensor: not contiguous; Nx.from_pointer needs row-major memory"
          end

          blob = TensorBlob.to_blob(t)
          pointer = %Nx.Pointer{kind: :local, address: blob.ptr, data_size: blob.byte_size}

          case Nx.from_pointer(backend, pointer, type, shape) do
            {:ok, %Nx.Tensor{} = nx} ->
              nx

            %Nx.Tensor{} = nx ->
              nx

            {:error, reason} ->
              raise TensorBlob.Error, "to_nx: #{inspect(backend)} refused the pointer: #{inspect(reason)}"
          end
      end
    end

    ## Types

    # Nx types are dtypes already (the dtype table knows them), except the
    # sub-byte ones.
    defp dtype!(type) when type in @sub_byte do
      raise ArgumentError,
            "type: Nx's sub-byte type #{inspect(type)} has no libtorch counterpart (its elements are packed " <>
              "below a byte); convert it first, for example with Nx.as_type(t, {:u, 8})"
    end

    defp dtype!(type), do: type

    @doc "The Nx type of a dtype; `:bool` gives `{:u, 8}`."
    @spec nx_type!(atom()) :: Nx.Type.t()
    def nx_type!(:bool), do: {:u, 8}

    def nx_type!(dtype) do
      case :tensor_blob.nx_type(dtype) do
        nil ->
          raise ArgumentError, "dtype: #{inspect(dtype)} has no Nx type"

        type ->
          try do
            Nx.Type.normalize!(type)
          rescue
            ArgumentError ->
              raise ArgumentError, "dtype: #{inspect(dtype)} maps to #{inspect(type)}, which this Nx lacks"
          end
      end
    end

    ## Helpers

    defp options!(opts) do
      Enum.each(opts, fn
        {:copy, c} when c in [:auto, :never, :always] ->
          :ok

        {:device, :cpu} ->
          :ok

        other ->
          raise ArgumentError,
                "options: unknown or invalid #{inspect(other)}; expected copy: :auto | :never | :always, device: :cpu"
      end)

      {Keyword.get(opts, :copy, :auto), Keyword.get(opts, :device)}
    end

    defp names(shape), do: List.duplicate(nil, tuple_size(shape))

    defp contiguous?(t), do: TensorBlob.to_blob(t).strides == row_major(Tensor.shape(t))

    defp row_major(shape) do
      shape
      |> Tuple.to_list()
      |> Enum.reverse()
      |> Enum.map_reduce(1, fn d, acc -> {acc, acc * max(d, 1)} end)
      |> elem(0)
      |> Enum.reverse()
    end

    defp copy_of(nx, dtype), do: Tensor.from_binary(Nx.to_binary(nx), dtype, nx.shape)

    defp refuse_copy!(nx, why) do
      raise ArgumentError, "copy: :never, but #{inspect(nx.data.__struct__)} tensor data cannot be viewed: #{why}"
    end

    # Misaligned bytes (a part of a larger binary) are copied, or refused.
    defp binary_view(%Nx.Tensor{data: %Nx.BinaryBackend{state: bytes}} = nx, dtype, :never) do
      Tensor.from_binary(bytes, dtype, nx.shape, copy: false)
    rescue
      e in ArgumentError -> refuse_copy!(nx, e.message)
    end

    defp binary_view(%Nx.Tensor{data: %Nx.BinaryBackend{state: bytes}} = nx, dtype, _copy) do
      Tensor.from_binary(bytes, dtype, nx.shape, copy: :if_needed)
    end

    defp pointer_view(nx, dtype, copy, device) do
      with :cpu <- device || host_device(nx.data),
           %Nx.Pointer{kind: :local, address: address, data_size: size}
           when is_integer(address) and address > 0 <- local_pointer(nx) do
        expected = Nx.byte_size(nx)

        if size not in [nil, expected] do
          raise TensorBlob.Error, "from_nx: the backend's pointer holds #{size} bytes, the tensor #{expected}"
        end

        %BlobView{tensor: tensor} = TensorBlob.from_blob(%{ptr: address, shape: nx.shape, dtype: dtype}, owner: nx)
        tensor
      else
        _ ->
          if copy == :never,
            do: refuse_copy!(nx, "it gives no host pointer (pass device: :cpu if its pointers are host memory)"),
            else: copy_of(nx, dtype)
      end
    end

    # Backends whose device is known from their data: Torchx and EXLA.
    defp host_device(%{__struct__: Torchx.Backend, ref: {device, _}}), do: device
    defp host_device(%{__struct__: EXLA.Backend, buffer: %{client_name: :host}}), do: :cpu
    defp host_device(_), do: :unknown

    # Nx 0.9 names the option kind: and returns {:ok, pointer}; later
    # versions name it mode: and return the pointer or raise.
    defp local_pointer(nx) do
      opts = if Version.match?(nx_version(), "< 0.10.0-0"), do: [kind: :local], else: [mode: :local]

      case Nx.to_pointer(nx, opts) do
        {:ok, pointer} -> pointer
        %Nx.Pointer{} = pointer -> pointer
        _ -> nil
      end
    rescue
      _ in [ArgumentError, UndefinedFunctionError, FunctionClauseError, RuntimeError] -> nil
    end

    defp nx_version do
      case Application.spec(:nx, :vsn) do
        nil -> "0.0.0"
        vsn -> to_string(vsn)
      end
    end
  end
end
