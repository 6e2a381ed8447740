defmodule TensorBlob.TorchShmTest do
  # Regions in PyTorch's CPU sharing format (the file_system strategy): a
  # 64-byte header whose first int is the count of mappings, then the
  # data. test/python/sharing_test.py runs the same against PyTorch itself.
  use ExUnit.Case, async: false

  alias TensorBlob.{IPC, Tensor}
  alias TensorBlob.Test.{Holder, Lifetime}
  import TensorBlob.Test.Shm

  @header 64

  # A region laid out as PyTorch lays it out, written here byte by byte:
  # PyTorch's process holds one reference.
  defp pytorch_region(data) do
    name = "/torch_#{System.pid()}_#{System.unique_integer([:positive])}_0"
    File.write!(path(name), <<1::signed-native-32, 0::size(@header - 4)-unit(8), data::binary>>)
    name
  end

  # Run in holders (test/support/holder.ex): each holds its tensor in a
  # process of its own, which drops it on request.
  @doc false
  def open_then_slice(name) do
    t = IPC.open(name, :float32, {4})
    # Element 0 is the data's, not the header's count.
    Tensor.write!(Tensor.narrow(t, 0, 0, 1), floats([42.0]))
    Tensor.narrow(t, 0, 2, 2)
  end

  @doc false
  def export_name(t), do: IPC.export_torch(t).handle

  test "a PyTorch region opens as its data, and the opener holds a reference until its last tensor is freed" do
    data = floats([1.0, 2.0, 3.0, 4.0])
    name = pytorch_region(data)
    opened = Holder.start(node(), {IPC, :open, [name, :float32, {4}]})
    assert Holder.call(opened, Tensor, :to_binary) == data
    assert Holder.call(opened, Tensor, :memory) == :ipc
    assert refcount(name) == 2
    Holder.drop(opened)
    assert eventually(fn -> refcount(name) == 1 end)

    # Only a slice is left of the opened tensor: the mapping and its reference stay.
    slice = Holder.start(node(), {__MODULE__, :open_then_slice, [name]})
    Lifetime.collect()
    assert refcount(name) == 2
    assert Holder.call(slice, Tensor, :to_binary) == floats([3.0, 4.0])
    <<_::binary-size(@header), first::float-32-native, _::binary>> = File.read!(path(name))
    assert first == 42.0

    # PyTorch's process drops its reference first: the name is ours to remove.
    set_refcount(name, 1)
    Holder.drop(slice)
    assert eventually(fn -> not File.exists?(path(name)) end), "the last user unlinks the name"
  end

  for first <- [:exporter, :opener] do
    test "an exported region: the #{first} drops first, the last one removes the name" do
      exporter = Holder.start(node(), {IPC, :torch_zeros, [{2}, :float32]})
      name = Holder.call(exporter, __MODULE__, :export_name)
      assert "/torch_tensor_blob." <> _ = name
      assert refcount(name) == 1
      opener = Holder.start(node(), {IPC, :open, [name, :float32, {2}]})
      assert refcount(name) == 2
      Holder.call(opener, Tensor, :write!, [floats([7.0, 8.0])])
      assert Holder.call(exporter, Tensor, :to_binary) == floats([7.0, 8.0])

      {dropped, kept} = if unquote(first) == :exporter, do: {exporter, opener}, else: {opener, exporter}
      Holder.drop(dropped)
      assert eventually(fn -> refcount(name) == 1 end)
      assert Holder.call(kept, Tensor, :to_binary) == floats([7.0, 8.0])
      Holder.drop(kept)
      assert eventually(fn -> not File.exists?(path(name)) end)
    end
  end

  test "a tensor made in a region is exported as it is; any other is copied once" do
    t = IPC.torch_zeros({4}, :uint8)
    assert IPC.export_torch(t).tensor == t
    other = Tensor.zeros({4}, :uint8)
    copy = IPC.export_torch(other).tensor
    refute copy == other
    assert Tensor.memory(copy) == :ipc
    # A plain export of a PyTorch-format tensor copies it into a plain region.
    assert "/tensor_blob." <> _ = IPC.export(t).handle
  end

  test "a region whose count is zero is being removed: open refuses it" do
    handle = IPC.export_torch(IPC.torch_zeros({2}, :float32))
    set_refcount(handle.handle, 0)

    assert_raise ArgumentError, ~r/holds no live PyTorch region \(its reference count is 0\)/, fn ->
      IPC.open(handle.handle, :float32, {2})
    end

    # The exporter's tensor lived through the open above.
    assert Tensor.memory(handle.tensor) == :ipc

    assert refcount(handle.handle) == 0
    set_refcount(handle.handle, 1)
  end

  test "a forged count no PyTorch writes (below zero, INT_MIN, INT_MAX) is a bad header, not a vanished region" do
    handle = IPC.export_torch(IPC.torch_zeros({2}, :float32))

    for count <- [-1, -2_147_483_648, 2_147_483_647] do
      set_refcount(handle.handle, count)

      e = assert_raise ArgumentError, fn -> IPC.open(handle.handle, :float32, {2}) end
      assert e.message =~ "handle: #{inspect(handle.handle)} holds no live PyTorch region"
      assert e.message =~ "(its reference count is #{count})"
      # Refused before anything was taken: the header is as it was.
      assert refcount(handle.handle) == count
    end

    set_refcount(handle.handle, 1)
    assert Tensor.memory(handle.tensor) == :ipc
  end

  test "bad inputs" do
    assert_raise ArgumentError, ~r/no shared memory named "\/torch_1_2_3"/, fn ->
      IPC.open("/torch_1_2_3", :float32, {4})
    end

    h = IPC.export_torch(IPC.torch_zeros({2}, :float32))

    assert_raise ArgumentError, ~r/needs 12 bytes after PyTorch's 64-byte header; .* holds 72 in all/, fn ->
      IPC.open(h.handle, :float32, {3})
    end

    assert_raise ArgumentError, ~r/PyTorch shared-memory region/, fn ->
      :tensor_blob_ipc.torch_open("a/b", :uint8, {1})
    end
  end
end
