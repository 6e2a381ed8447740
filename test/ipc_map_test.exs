defmodule TensorBlob.IPCMapTest do
  # The maps of shared tensors that other languages read and print
  # (priv/python/tensor_blob.py): IPC.to_map/1, to_json/1 and open/1.
  # The exchanges with Python processes are in test/python/module_test.py.
  use ExUnit.Case, async: true

  alias TensorBlob.{IPC, Tensor}
  alias TensorBlob.IPC.JSON

  test "to_json/1 then open/1 opens the region, in both formats" do
    data = <<1::signed-64-native, -2::signed-64-native, 3::signed-64-native, 4::signed-64-native>>

    for export <- [&IPC.export/1, &IPC.export_torch/1] do
      handle = export.(Tensor.from_binary(data, :int64, {2, 2}))
      line = IPC.to_json(handle)

      assert line ==
               ~s({"handle": "#{handle.handle}", "dtype": "int64", "shape": [2, 2], "data_size": 32})

      opened = IPC.open(line)
      assert Tensor.shape(opened) == {2, 2} and Tensor.dtype(opened) == :int64
      assert Tensor.to_binary(opened) == data
      assert Tensor.memory(opened) == :ipc
      # The map, with string or atom keys, opens the same region.
      assert Tensor.to_binary(IPC.open(IPC.to_map(handle))) == data
      assert Tensor.to_binary(IPC.open(%{handle: handle.handle, dtype: :int64, shape: [4]})) == data
    end
  end

  test "open/1 takes the map Python prints: keys in any order, spaces, a name without its slash" do
    handle = IPC.export(IPC.zeros({3}, :float32))
    name = String.trim_leading(handle.handle, "/")
    line = ~s(  { "shape" : [3] ,"data_size":12, "dtype": "float32", "handle": "#{name}" } )
    assert Tensor.to_binary(IPC.open(line)) == <<0::96>>
    # The exporter's tensor keeps the region's name until the open above.
    assert Tensor.memory(handle.tensor) == :ipc
  end

  test "open/1 says what it expects" do
    handle = IPC.export(IPC.zeros({3}, :float32))

    for bad <- [
          "not json",
          ~s({"handle": "#{handle.handle}", "dtype": "float32", "shape": [3]} trailing),
          ~s([1, 2])
        ] do
      assert_raise ArgumentError, ~r/expected a shared tensor's map as JSON/, fn -> IPC.open(bad) end
    end

    for bad <- [
          %{"handle" => handle.handle, "dtype" => "float32"},
          %{"handle" => handle.handle, "dtype" => "float32", "shape" => [-1]},
          %{"handle" => 7, "dtype" => "float32", "shape" => [3]}
        ] do
      assert_raise ArgumentError, ~r/expected a shared tensor's map with handle/, fn -> IPC.open(bad) end
    end

    assert_raise ArgumentError, ~s(unknown dtype "float31_not_a_dtype"), fn ->
      IPC.open(%{"handle" => handle.handle, "dtype" => "float31_not_a_dtype", "shape" => [3]})
    end
  end

  test "to_map/1 refuses a CUDA handle, pointing at the CUDA share" do
    assert_raise ArgumentError, ~r/CUDA.export_torch_share/, fn ->
      IPC.to_map(%IPC.Handle{handle: <<0::512>>, address: 0, data_size: 4})
    end
  end

  test "the JSON both ways: escapes, nesting, refusals" do
    text = ~s({"a": "q\\"\\\\\\n\\u00e9/", "b": [1, -2, [], {}], "c": null, "d": true})
    assert {:ok, value} = JSON.decode(text)
    assert value == %{"a" => "q\"\\\né/", "b" => [1, -2, [], %{}], "c" => nil, "d" => true}
    assert JSON.decode(JSON.encode(value)) == {:ok, value}

    for bad <- ["", "{", ~s({"a" 1}), ~s({"a": 1.5}), ~s(["\\ud800"]), ~s({"a": 1,}), "[1 2]"] do
      assert JSON.decode(bad) == :error, bad
    end
  end
end
