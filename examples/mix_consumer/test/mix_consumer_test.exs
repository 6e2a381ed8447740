defmodule MixConsumerTest do
  use ExUnit.Case

  test "a write through a blob view shows in the original tensor" do
    {bytes, view} = MixConsumer.exchange()
    assert bytes == <<10, 20, 30, 40, 50, 60>>
    assert %TensorBlob.BlobView{} = view
    assert TensorBlob.Tensor.memory(view.tensor) == :pinned
    assert TensorBlob.Tensor.to_binary(view.tensor) == <<10, 20, 30, 40, 50, 60>>
  end
end
