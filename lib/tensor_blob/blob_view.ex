defmodule TensorBlob.BlobView do
  @moduledoc """
  A tensor viewing foreign memory, together with the owner it keeps alive.

  The owner is kept by the libtorch storage, not by this struct (one of our
  tensors by sharing its storage, any other term by a pin): dropping the
  struct while keeping `view.tensor` (or a slice of it) is safe. The owner
  is released after the last tensor using the memory is freed.
  """
  defstruct [:tensor, :owner]

  @type t :: %__MODULE__{tensor: TensorBlob.Tensor.t(), owner: term()}

  @doc false
  def new(tensor, owner), do: struct_of(__MODULE__, tensor, owner)

  # Built from nothing, as TensorBlob.Tensor.wrap/1 is (see there).
  defp struct_of(module, tensor, owner), do: %{__struct__: module, tensor: tensor, owner: owner}
end
