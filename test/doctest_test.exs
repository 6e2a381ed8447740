defmodule TensorBlob.DoctestTest do
  # The iex> examples in the modules' documentation run as tests.
  use ExUnit.Case, async: false

  doctest TensorBlob
  doctest TensorBlob.Tensor
  doctest TensorBlob.DLPack
  doctest TensorBlob.IPC
  doctest TensorBlob.SafeTensors
end
