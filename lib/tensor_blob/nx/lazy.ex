# How Nx's own functions take tensor_blob tensors (see TensorBlob.Nx's
# module doc, "Nx functions and defn"). Compiled only when Nx is loaded, as
# lib/tensor_blob/nx.ex, and recompiled by Mix when that changes.
if Code.ensure_loaded?(Nx) do
  defmodule TensorBlob.Nx.Lazy do
    @moduledoc false
    # Nx.LazyContainer and Nx.Container for TensorBlob.Tensor and BlobView.
    #
    # What Nx gets is always a copy of the data, for Nx.default_backend():
    # an Nx result may share its input's binary (Nx.reshape/3 returns the
    # same bytes), so a view would leave our tensor refusing write!/2 for as
    # long as that result (or the garbage of the call) lives. A copy is
    # the BEAM's own, and the tensor is writable the moment the call returns.
    #
    # Many of Nx's eager functions work out the result type from their
    # arguments before converting them (Nx.Shared.binary_type/2 types any
    # struct but %Nx.Tensor{} and Complex as {:f, 32}), then convert them
    # with Nx.to_tensor/1: Nx.add(t, 1) of an int64 tensor would compute in
    # f32. Only the functions below are known to convert first and type
    # after; a tensor_blob tensor reaching Nx.to_tensor/1 from any other Nx
    # function is refused, saying to call TensorBlob.Nx.to_nx/2.

    # Convert their tensor argument (Nx.to_tensor/1) before anything reads
    # its type, in Nx 0.9 and main.
    @takes [:sum, :mean, :product, :reduce_max, :reduce_min, :all, :any, :type] ++
             [:to_binary, :to_flat_list, :to_number, :reshape, :flatten]

    @doc false
    def __mix_recompile__?, do: not Code.ensure_loaded?(Nx)

    alias TensorBlob.Tensor

    @doc false
    # The Nx functions that take tensor_blob tensors as they are, besides
    # Nx.to_tensor/1, Nx.backend_copy/2, Nx.backend_transfer/2 and defn.
    def takes, do: @takes

    @doc false
    # Nx.LazyContainer.traverse/3: the template first, the data when asked.
    def traverse(%Tensor{} = t, acc, fun) do
      template = TensorBlob.Nx.template!(t)
      caller!(t, template)
      fun.(template, fn -> TensorBlob.Nx.copy_to_nx(t) end, acc)
    end

    @doc false
    # Nx.Container: a tensor_blob tensor holds one Nx tensor, a copy.
    def container(%Tensor{} = t, acc, fun), do: fun.(TensorBlob.Nx.copy_to_nx(t), acc)

    # Refused when Nx.to_tensor/1 was called for a function of Nx's (the
    # nearest frame of module Nx above it: Nx.select/3 converts through
    # Enum.map/2 in Nx.broadcast_vectors/2) that is not in @takes. A call
    # of the user's own (no Nx frame above) takes it. The frames that
    # decide are the innermost few, well within the stack Process.info/2
    # gives (the system's backtrace depth, 8 by default).
    defp caller!(t, template) do
      {:current_stacktrace, stack} = Process.info(self(), :current_stacktrace)

      above =
        stack
        |> Enum.drop_while(&(not match?({Nx, :to_tensor, 1, _}, &1)))
        |> Enum.drop(1)
        |> Enum.find(&match?({Nx, _, _, _}, &1))

      case above do
        {Nx, name, arity, _} when name not in @takes ->
          ("a tensor_blob tensor (#{Tensor.dtype(t)} #{inspect(template.shape)}) reached Nx.to_tensor/1 " <>
             "from Nx.#{name}/#{arity}, which is not known to convert its arguments before typing them: " <>
             "Nx's element-wise functions (Nx.add/2, Nx.multiply/2, ...) and others work out the result " <>
             "type first, and would take this tensor for f32. Pass TensorBlob.Nx.to_nx(t) instead. " <>
             "Nx takes tensor_blob tensors as they are in defn, Nx.to_tensor/1, Nx.backend_copy/2, " <>
             "Nx.backend_transfer/2 and " <> Enum.map_join(@takes, ", ", &"Nx.#{&1}"))
          |> TensorBlob.Raise.badarg!(:unsupported, :none)

        _ ->
          :ok
      end
    end
  end

  defimpl Nx.LazyContainer, for: TensorBlob.Tensor do
    def traverse(t, acc, fun), do: TensorBlob.Nx.Lazy.traverse(t, acc, fun)
  end

  defimpl Nx.LazyContainer, for: TensorBlob.BlobView do
    def traverse(%{tensor: t}, acc, fun), do: TensorBlob.Nx.Lazy.traverse(t, acc, fun)
  end

  # Nx.backend_copy/2, Nx.backend_transfer/2, Nx.backend_deallocate/1 and
  # Nx.serialize/2 go through Nx.Container: they get (and act on) the copy,
  # and Nx.deserialize/2 gives back an Nx tensor.
  defimpl Nx.Container, for: TensorBlob.Tensor do
    def traverse(t, acc, fun), do: TensorBlob.Nx.Lazy.container(t, acc, fun)
    def reduce(t, acc, fun), do: TensorBlob.Nx.Lazy.container(t, acc, fun)
    def serialize(t), do: {__MODULE__, [{:tensor, TensorBlob.Nx.copy_to_nx(t)}], :ok}
    def deserialize([{:tensor, nx}], :ok), do: nx
  end

  defimpl Nx.Container, for: TensorBlob.BlobView do
    def traverse(%{tensor: t}, acc, fun), do: TensorBlob.Nx.Lazy.container(t, acc, fun)
    def reduce(%{tensor: t}, acc, fun), do: TensorBlob.Nx.Lazy.container(t, acc, fun)
    def serialize(%{tensor: t}), do: Nx.Container.serialize(t)
  end
else
  defmodule TensorBlob.Nx.Lazy.Absent do
    @moduledoc false
    # Nx was not on the code path when this file was compiled.
    def __mix_recompile__?, do: Code.ensure_loaded?(Nx)
  end
end
