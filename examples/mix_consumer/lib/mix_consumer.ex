defmodule MixConsumer do
  @moduledoc "Uses tensor_blob as a dependency: a zero-copy round trip."

  alias TensorBlob.Tensor

  @doc """
  Makes a 2x3 uint8 tensor, views its memory through its blob, writes
  through the view, and returns `{original tensor's bytes, view}`: the
  original sees the write because both share one buffer.
  """
  @spec exchange() :: {binary(), TensorBlob.BlobView.t()}
  def exchange do
    t = Tensor.from_binary(<<1, 2, 3, 4, 5, 6>>, :uint8, {2, 3})
    blob = TensorBlob.to_blob(t)
    view = TensorBlob.from_blob(blob)
    Tensor.write!(view.tensor, <<10, 20, 30, 40, 50, 60>>)
    {Tensor.to_binary(t), view}
  end
end
