defmodule TensorBlob.BlobView do
  @moduledoc """
  A tensor viewing foreign memory, together with the owner it pins.

  The pin lives in the libtorch storage, not in this struct: dropping the
  struct while keeping `view.tensor` (or a slice of it) is safe. The owner
  is released after the last tensor using the memory is freed.
  """
  defstruct [:tensor, :owner]

  @type t :: %__MODULE__{tensor: TensorBlob.Tensor.t(), owner: term()}
end
