defmodule TensorBlob.Blob do
  @moduledoc """
  A plain description of tensor memory.

    * `ptr` - address of the first element (an integer)
    * `shape` - a tuple of dimensions
    * `strides` - element strides, one per dimension (a list)
    * `dtype` - a canonical dtype atom (see `TensorBlob`)
    * `device` - `:cpu` or `{:cuda, index}`
    * `element_size` - bytes per element
    * `byte_size` - bytes from `ptr` to one past the farthest element
    * `alignment` - the largest power of two, up to 4096, dividing `ptr`
      (a view whose `ptr` is not a multiple of `element_size` is refused)
    * `owner` - the term that keeps the memory alive

  The pointer is valid while the blob, or its owner, is reachable.
  ExTorch's `%ExTorch.Tensor.Blob{}` (from `ExTorch.Tensor.Blob.to_blob/1`)
  has the same fields but `byte_size` and `alignment`, and its owner is
  the ExTorch tensor: `TensorBlob.from_blob/2` takes it as it is, pinning
  that tensor (guides/extorch.md, `TensorBlob.ExTorch`).
  """
  defstruct [:ptr, :shape, :strides, :dtype, :device, :element_size, :byte_size, :alignment, :owner]

  @type t :: %__MODULE__{
          ptr: non_neg_integer(),
          shape: tuple(),
          strides: [non_neg_integer()],
          dtype: atom(),
          device: TensorBlob.Tensor.device(),
          element_size: pos_integer(),
          byte_size: non_neg_integer(),
          alignment: pos_integer(),
          owner: term()
        }
end
