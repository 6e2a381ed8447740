defmodule MixConsumerTest do
  use ExUnit.Case

  test "a write through a blob view shows in the original tensor" do
    {bytes, view} = MixConsumer.exchange()
    assert bytes == <<10, 20, 30, 40, 50, 60>>
    assert %TensorBlob.BlobView{} = view
    # The view shares the tensor's storage: it answers as the tensor does.
    assert TensorBlob.Tensor.memory(view.tensor) == :owned
    assert TensorBlob.Tensor.to_binary(view.tensor) == <<10, 20, 30, 40, 50, 60>>
  end

  test "the dependency's Erlang API has its doc chunks where code:get_doc/1 looks" do
    assert {:docs_v1, _, :erlang, _, %{"en" => _}, _, docs} = Code.fetch_docs(:tensor_blob)

    assert [{{:function, :to_blob, 1}, _, _, %{"en" => _}, _}] =
             Enum.filter(docs, &match?({{:function, :to_blob, 1}, _, _, _, _}, &1))
  end
end
