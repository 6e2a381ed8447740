# The tensor_blob tensor over an Nx tensor's memory that from_nx/2 makes
# (lib/tensor_blob/nx.ex): a view of a binary backend's bytes, of a
# backend's host pointer, of a shared-memory region the backend moved its
# tensor into, or a copy where no view can be made. Compiled only when Nx
# is loaded, as lib/tensor_blob/nx.ex.
if Code.ensure_loaded?(Nx) do
  defmodule TensorBlob.Nx.Views do
    @moduledoc false
    import TensorBlob.Raise

    alias TensorBlob.{BlobView, Tensor}
    alias TensorBlob.Nx.Data

    @doc false
    def __mix_recompile__?, do: not Code.ensure_loaded?(Nx)

    # reason: :requested (copy: :always) or :backend (no view can be made).
    def copy_of(nx, dtype, reason) do
      bytes = Data.bytes!(nx)

      translating(
        do:
          Tensor.wrap(:tensor_blob_door.copy_from_binary(bytes, dtype, nx.shape, {TensorBlob.Nx, :from_nx, 2}, reason))
      )
    end

    defp refuse_copy!(nx, why) do
      "copy: :never, but #{inspect(nx.data.__struct__)} tensor data cannot be viewed: #{why}"
      |> badarg!(:unsupported, :copy)
    end

    # Misaligned bytes (a part of a larger binary) are copied, or refused.
    def binary_view(%Nx.Tensor{data: %Nx.BinaryBackend{state: bytes}} = nx, dtype, :never) do
      Tensor.from_binary(bytes, dtype, nx.shape, copy: false)
    rescue
      e in ArgumentError -> refuse_copy!(nx, e.message)
    end

    def binary_view(%Nx.Tensor{data: %Nx.BinaryBackend{state: bytes}} = nx, dtype, _copy) do
      Tensor.from_binary(bytes, dtype, nx.shape, copy: :if_needed)
    end

    def pointer_view(nx, dtype, copy, device) do
      with :cpu <- device || Data.host_device(nx.data),
           %Nx.Pointer{kind: :local, address: address, data_size: size}
           when is_integer(address) and address > 0 <- Data.local_pointer(nx) do
        case Data.fit!(nx, size) do
          :exact ->
            %BlobView{tensor: tensor} = TensorBlob.from_blob(%{ptr: address, shape: nx.shape, dtype: dtype}, owner: nx)
            tensor

          :widened ->
            why =
              "it stores #{inspect(nx.type)} in #{div(size * 8, max(Nx.size(nx), 1))}-bit elements (#{size} bytes, " <>
                "not #{Nx.byte_size(nx)}), so no view can show them as #{inspect(nx.type)}"

            if copy == :never, do: refuse_copy!(nx, why), else: copy_of(nx, dtype, :backend)
        end
      else
        {:deallocated, message} ->
          Data.gone!(nx, message)

        {:backend_error, message} when copy == :never ->
          refuse_copy!(nx, "its to_pointer/2 raised: #{message}")

        _ ->
          if copy == :never,
            do: refuse_copy!(nx, "it gives no host pointer (pass device: :cpu if its pointers are host memory)"),
            else: copy_of(nx, dtype, :backend)
      end
    end

    # The backend moves its tensor into a shared-memory region; we map the
    # region ourselves (read-write), so our mapping outlives its tensor.
    def region_view(nx, dtype) do
      pointer =
        try do
          Nx.to_pointer(nx, [{pointer_key(), :ipc}, permissions: 0o600])
        rescue
          e in [ArgumentError, RuntimeError, ErlangError, UndefinedFunctionError, FunctionClauseError] ->
            "ipc: true, but #{inspect(nx.data.__struct__)} cannot move the tensor into shared memory: #{Exception.message(e)}"
            |> badarg!(:unsupported, :ipc)
        end

      case pointer do
        {:ok, %Nx.Pointer{} = p} -> open_region(nx, p, dtype)
        %Nx.Pointer{} = p -> open_region(nx, p, dtype)
      end
    end

    defp open_region(nx, %Nx.Pointer{kind: :ipc, handle: name, data_size: size}, dtype) when is_binary(name) do
      if size not in [nil, Nx.byte_size(nx)] do
        ("ipc: true, but #{inspect(nx.data.__struct__)} stores #{inspect(nx.type)} in other bytes " <>
           "(#{size} for #{Nx.byte_size(nx)}); use copy: :always")
        |> badarg!(:unsupported, :ipc)
      end

      TensorBlob.IPC.open(name, dtype, nx.shape)
    end

    defp pointer_key do
      case :persistent_term.get({__MODULE__, :pointer_key}, nil) do
        nil ->
          key = if Version.match?(nx_version(), "< 0.10.0-0"), do: :kind, else: :mode
          :persistent_term.put({__MODULE__, :pointer_key}, key)
          key

        key ->
          key
      end
    end

    defp nx_version do
      _ = Application.load(:nx)

      case Application.spec(:nx, :vsn) do
        nil -> "0.0.0"
        vsn -> to_string(vsn)
      end
    end
  end
else
  defmodule TensorBlob.Nx.Views do
    @moduledoc false
    # Nx was not on the code path when this file was compiled.
    def __mix_recompile__?, do: Code.ensure_loaded?(Nx)
  end
end
