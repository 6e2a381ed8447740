# What an Nx backend says of a tensor's data (its device, its pointer, its
# size, its bytes), asked so that a struct that does not describe its data
# is refused before anything reads it. Compiled only when Nx is loaded, as
# lib/tensor_blob/nx.ex.
if Code.ensure_loaded?(Nx) do
  defmodule TensorBlob.Nx.Data do
    @moduledoc false
    import TensorBlob.Raise, only: [badarg!: 3]

    @doc false
    def __mix_recompile__?, do: not Code.ensure_loaded?(Nx)

    # Backends whose device is known from their data: Torchx and EXLA.
    def host_device(%{__struct__: Torchx.Backend, ref: {device, _}}), do: device
    def host_device(%{__struct__: EXLA.Backend, buffer: %{client_name: :host}}), do: :cpu
    def host_device(_), do: :unknown

    # No options: every backend defaults to a :local pointer, and EXLA 0.9
    # validates its options (mode:) and rejects Nx 0.9's kind:. Nx 0.9
    # backends return {:ok, pointer}; later ones the pointer, or raise.
    def local_pointer(nx) do
      case Nx.to_pointer(nx) do
        {:ok, pointer} -> pointer
        %Nx.Pointer{} = pointer -> pointer
        {:error, reason} -> {:backend_error, inspect(reason)}
        _ -> nil
      end
    rescue
      # Torchx raises "Tensor has been deallocated" after backend_deallocate.
      e in [ArgumentError, RuntimeError] ->
        message = Exception.message(e)
        if message =~ "deallocated", do: {:deallocated, message}, else: {:backend_error, message}

      e ->
        {:backend_error, Exception.message(e)}
    end

    # How the backend's data size (from its pointer) fits the struct:
    # :exact (or not known), :widened (Torchx keeps {:u, 16} in 32-bit and
    # {:u, 32} in 64-bit integers); any other size raises: a view or a copy
    # by the struct would read past the backend's memory (Torchx's own
    # to_binary reads as many elements as the struct says).
    def fit!(nx, size) do
      expected = Nx.byte_size(nx)

      cond do
        size in [nil, expected] ->
          :exact

        nx.type in [{:u, 16}, {:u, 32}] and size == 2 * expected ->
          :widened

        true ->
          ("from_nx: the tensor's struct says shape #{inspect(nx.shape)} of #{inspect(nx.type)} " <>
             "(#{expected} bytes), and #{inspect(nx.data.__struct__)} holds #{size} bytes for it; " <>
             "the struct does not describe its data")
          |> badarg!(:out_of_extent, :none)
      end
    end

    # The backend's bytes, after its data size was checked against the
    # struct where the backend gives a pointer; data it cannot read
    # (freed, forged) raises ArgumentError.
    def bytes!(%Nx.Tensor{data: %Nx.BinaryBackend{}} = nx), do: read!(nx)

    def bytes!(nx) do
      case local_pointer(nx) do
        %Nx.Pointer{data_size: size} -> fit!(nx, size)
        {:deallocated, message} -> gone!(nx, message)
        _ -> :unknown
      end

      read!(nx)
    end

    def gone!(nx, message) do
      "from_nx: the #{inspect(nx.data.__struct__)} tensor was deallocated (#{message})"
      |> badarg!(:gone, :none)
    end

    defp read!(nx) do
      Nx.to_binary(nx)
    rescue
      e ->
        message = Exception.message(e)

        if message =~ "deallocated" do
          gone!(nx, message)
        else
          ("from_nx: #{inspect(nx.data.__struct__)} cannot read this tensor (#{inspect(e.__struct__)}: " <>
             "#{message}); is its data one of the backend's tensors?")
          |> badarg!(:bad_value, :none)
        end
    end
  end
else
  defmodule TensorBlob.Nx.Data.Absent do
    @moduledoc false
    # Nx was not on the code path when this file was compiled.
    def __mix_recompile__?, do: Code.ensure_loaded?(Nx)
  end
end
