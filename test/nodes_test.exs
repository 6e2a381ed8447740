defmodule TensorBlob.NodesTest do
  # Two local nodes: this one and a peer started with OTP's :peer.
  use ExUnit.Case, async: false

  alias TensorBlob.{IPC, Nodes, Tensor}
  alias TensorBlob.Test.Holder

  setup_all do
    started =
      if Node.alive?() do
        false
      else
        {_, 0} = System.cmd("epmd", ["-daemon"])
        {:ok, _} = :net_kernel.start([:"tb_nodes_#{System.pid()}@127.0.0.1", :longnames])
        true
      end

    paths = Enum.flat_map(:code.get_path(), &[~c"-pa", &1])

    {:ok, peer, node} = :peer.start(%{name: :peer.random_name(), host: ~c"127.0.0.1", longnames: true, args: paths})

    {:ok, _} = :erpc.call(node, :application, :ensure_all_started, [:elixir])

    on_exit(fn ->
      :peer.stop(peer)
      if started, do: Node.stop()
    end)

    %{peer: node}
  end

  defp floats(list), do: for(x <- list, into: <<>>, do: <<x::float-32-native>>)

  defp shm(name), do: "/dev/shm/" <> String.trim_leading(name, "/")

  # The reference count in PyTorch's header of the region: how many
  # mappings hold it.
  defp refcount(name) do
    <<count::signed-native-32, _::binary>> = File.read!(shm(name))
    count
  end

  # Destructors run shortly after the collection that frees a tensor.
  defp eventually(fun, tries \\ 200) do
    cond do
      fun.() -> true
      tries == 0 -> false
      true -> Process.sleep(10) && eventually(fun, tries - 1)
    end
  end

  test "a tensor sent as it is is a dead reference there, and the error says what to do", %{peer: peer} do
    ref = :erpc.call(peer, :tensor_blob, :zeros, [{2}, :float32])
    assert node(ref) == peer

    e = assert_raise ArgumentError, fn -> Tensor.to_binary(Tensor.wrap(ref)) end
    assert e.message =~ "is a reference made on node #{inspect(peer)}"
    assert e.message =~ "TensorBlob.Nodes.pack/2"
    assert e.message =~ "TensorBlob.Nodes.unpack/1"

    # The Erlang API says it the Erlang way.
    {:badarg, message} = catch_error(:tensor_blob.shape(ref))
    assert message =~ "tensor_blob:node_pack/2"

    # A reference of this node that is not a tensor keeps the usual message.
    e = assert_raise ArgumentError, fn -> Tensor.shape(Tensor.wrap(make_ref())) end
    assert e.message =~ "expected a tensor, got #Reference<"
    refute e.message =~ "made on node"
  end

  for first <- [:sender, :receiver] do
    test "to a node on this host both nodes map one region, and the #{first} may drop first", %{peer: peer} do
      sender = Holder.start(node(), {IPC, :torch_zeros, [{4}, :float32]})
      Holder.call(sender, Tensor, :write!, [floats([1.0, 2.0, 3.0, 4.0])])
      # The sender's holder keeps its tensor; the test keeps only what travels.
      packed = sender |> Holder.call(Nodes, :pack, [peer]) |> Map.delete(:tensor)
      assert packed.via == :region
      name = packed.handle

      receiver = Holder.start(peer, {Nodes, :unpack, [packed]})
      assert Holder.call(receiver, Tensor, :memory) == :ipc
      assert Holder.call(receiver, Tensor, :to_binary) == floats([1.0, 2.0, 3.0, 4.0])
      assert refcount(name) == 2

      # Two OS processes, each with its own mapping of the same file.
      refute :erpc.call(peer, System, :pid, []) == System.pid()
      assert Holder.maps?(name)
      assert :erpc.call(peer, Holder, :maps?, [name])

      Holder.call(receiver, Tensor, :write!, [floats([5.0, 6.0, 7.0, 8.0])])
      assert Holder.call(sender, Tensor, :to_binary) == floats([5.0, 6.0, 7.0, 8.0])

      {dropped, kept} = if unquote(first) == :sender, do: {sender, receiver}, else: {receiver, sender}
      Holder.drop(dropped)
      assert eventually(fn -> refcount(name) == 1 end)
      assert Holder.call(kept, Tensor, :to_binary) == floats([5.0, 6.0, 7.0, 8.0])
      Holder.drop(kept)
      assert eventually(fn -> not File.exists?(shm(name)) end), "the last user removes the name"
    end
  end

  test "a tensor made in a region travels as that region; any other is copied once", %{peer: peer} do
    t = IPC.torch_zeros({8}, :uint8)
    assert Nodes.pack(t, peer).handle == IPC.export_torch(t).handle

    owned = Tensor.zeros({8}, :uint8)
    packed = Nodes.pack(owned, peer)
    assert packed.via == :region
    assert Tensor.memory(packed.tensor) == :ipc
    refute packed.handle == IPC.export_torch(t).handle
  end

  test "to a node elsewhere the tensor travels as one binary, a view on both sides", %{peer: peer} do
    t = Tensor.from_binary(floats([1.5, 2.5]), :float32, {2})
    packed = Nodes.pack(t, peer, via: :binary)
    assert packed.via == :binary
    # The binary shows t's own memory (no copy was made): t is frozen while it lives.
    assert_raise ArgumentError, ~r/binary/, fn -> Tensor.write!(t, floats([0.0, 0.0])) end

    receiver = Holder.start(peer, {Nodes, :unpack, [packed]})
    assert Holder.call(receiver, Tensor, :memory) == :binary
    assert Holder.call(receiver, Tensor, :to_binary) == floats([1.5, 2.5])
    Holder.drop(receiver)

    copied = Holder.start(peer, {Nodes, :unpack, [packed, [copy: true]]})
    assert Holder.call(copied, Tensor, :memory) == :owned
  end

  test "a large tensor sent as one binary is viewed where it lands, from the second message on a path", %{peer: peer} do
    n = 1024 * 1024
    bytes = for i <- 0..(n - 1), into: <<>>, do: <<i::float-32-native>>
    t = Tensor.from_binary(bytes, :float32, {n})

    # A path: a spawn carrying a prefix of k bytes, then the packed term, so
    # the bytes land at four different offsets, three of them misaligned for
    # float32. On each path the first message tells the sender the pad that
    # lands its bytes aligned; the last ones there are views.
    for k <- 0..3 do
      memories =
        for _ <- 1..4 do
          packed = Nodes.pack(t, peer, via: :binary)
          receiver = Holder.start(peer, {Holder, :unpack_after, [:binary.copy(<<7>>, k), packed]})
          memory = Holder.call(receiver, Tensor, :memory)
          assert Holder.call(receiver, Tensor, :to_binary) == bytes
          Holder.drop(receiver)
          # The sender learns the pad from a cast: let it arrive.
          Process.sleep(50)
          memory
        end

      assert List.last(memories) == :binary, "prefix of #{k} bytes: #{inspect(memories)}"
    end
  end

  test "bad inputs", %{peer: peer} do
    t = Tensor.zeros({2}, :uint8)
    assert_raise ArgumentError, ~r/via must be region or binary/, fn -> Nodes.pack(t, peer, via: :pigeon) end
    assert_raise ArgumentError, ~r/expected what TensorBlob.Nodes.pack\/2 made/, fn -> Nodes.unpack(%{via: :region}) end
    assert_raise ArgumentError, ~r/expected a tensor/, fn -> Nodes.pack(:nope, peer) end
  end
end
