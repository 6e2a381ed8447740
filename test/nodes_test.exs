defmodule TensorBlob.NodesTest do
  # Two local nodes: this one and a peer started with OTP's :peer.
  use ExUnit.Case, async: false

  alias TensorBlob.{IPC, Nodes, Tensor}
  alias TensorBlob.Test.Holder
  import TensorBlob.Test.Shm, only: [floats: 1, path: 1, refcount: 1, eventually: 1, start_peer: 1, drop_keepers: 0]

  setup_all do
    {_peer, node, stop} = start_peer("tb_nodes")
    {:ok, _} = :erpc.call(node, :application, :ensure_all_started, [:elixir])
    on_exit(stop)
    %{peer: node}
  end

  # A test that packs a region without unpacking it leaves a keeper holding
  # the tensor for keep: ms; end them with the test.
  setup do
    on_exit(&drop_keepers/0)
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

  test "a dead remote reference is blamed only where it is the faulty argument", %{peer: peer} do
    ref = :erpc.call(peer, :tensor_blob, :zeros, [{2}, :float32])
    t = Tensor.zeros({2}, :float32)

    # Where it is the tensor: said, with the argument's own name.
    e = assert_raise ArgumentError, fn -> Tensor.narrow(Tensor.wrap(ref), 0, 0, 1) end
    assert e.message =~ ~r/^tensor: #Reference<.*> is a reference made on node/

    # Where another argument is at fault, that argument is named.
    e = assert_raise ArgumentError, fn -> Tensor.write!(t, ref) end
    assert e.message =~ "binary: expected a binary"
    refute e.message =~ "made on node"
    e = assert_raise ArgumentError, fn -> Tensor.zeros(ref, :float32) end
    assert e.message =~ "shape"
    refute e.message =~ "made on node"
    e = assert_raise ArgumentError, fn -> Tensor.to_device(t, ref) end
    assert e.message =~ "device"
    refute e.message =~ "made on node"
    e = assert_raise ArgumentError, fn -> IPC.open(%{kind: :ipc, handle: ref}, :float32, {2}) end
    refute e.message =~ "made on node"
  end

  test "inspect of a tensor made on another node shows it as a tensor of that node", %{peer: peer} do
    sent = :erpc.call(peer, Tensor, :zeros, [{2}, :float32])
    shown = inspect(sent)
    assert shown =~ "#TensorBlob.Tensor<on node #{inspect(peer)} #Reference<"
    # Inside other terms too (IEx prints results this way).
    assert inspect(%{t: sent}) =~ "on node"
  end

  for first <- [:sender, :receiver] do
    test "to a node on this host both nodes map one region, and the #{first} may drop first", %{peer: peer} do
      sender = Holder.start(node(), {IPC, :torch_zeros, [{4}, :float32]})
      Holder.call(sender, Tensor, :write!, [floats([1.0, 2.0, 3.0, 4.0])])
      # The sender's holder keeps its tensor; the test keeps only what travels.
      packed = sender |> Holder.call(Nodes, :pack, [peer, [via: :region]]) |> Map.delete(:tensor)
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
      assert eventually(fn -> not File.exists?(path(name)) end), "the last user removes the name"
    end
  end

  test "a tensor made in a region travels as that region; any other is copied once", %{peer: peer} do
    t = IPC.torch_zeros({8}, :uint8)
    assert Nodes.pack(t, peer, via: :region).handle == IPC.export_torch(t).handle

    owned = Tensor.zeros({8}, :uint8)
    packed = Nodes.pack(owned, peer, via: :region)
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

  test "unpack(copy: true) of a region is a private writable copy", %{peer: peer} do
    t = IPC.torch_zeros({2}, :float32)
    Tensor.write!(t, floats([1.0, 2.0]))
    packed = Nodes.pack(t, peer, via: :region)
    assert packed.via == :region

    copied = Holder.start(peer, {Nodes, :unpack, [Map.delete(packed, :tensor), [copy: true]]})
    assert Holder.call(copied, Tensor, :memory) == :owned
    Holder.call(copied, Tensor, :write!, [floats([7.0, 8.0])])
    assert Holder.call(copied, Tensor, :to_binary) == floats([7.0, 8.0])
    # The sender's tensor is as it was.
    assert Tensor.to_binary(t) == floats([1.0, 2.0])
    Holder.drop(copied)
    # The mapping made for the copy holds no reference once it is freed.
    assert eventually(fn -> refcount(packed.handle) == 1 end)

    # The same on this node, and with the binary path.
    assert Tensor.memory(Nodes.unpack(packed, copy: true)) == :owned
    assert Tensor.memory(Nodes.unpack(Nodes.pack(t, peer, via: :binary), copy: true)) == :owned
    assert_raise ArgumentError, ~r/copy: expected a boolean/, fn -> Nodes.unpack(packed, copy: :yes) end
  end

  test "a copy into a region leaves its source as it was", %{peer: peer} do
    t = Tensor.from_binary(floats([1.0, 2.0]), :float32, {2})
    binaries = TensorBlob.stats().binaries

    exported = IPC.export_torch(t)
    packed = Nodes.pack(t, peer, via: :region)
    assert packed.via == :region
    # No hidden binary view of t: it stays writable at once.
    assert TensorBlob.stats().binaries == binaries
    Tensor.write!(t, floats([3.0, 4.0]))
    assert Tensor.to_binary(exported.tensor) == floats([1.0, 2.0])
    assert Tensor.to_binary(Nodes.unpack(packed)) == floats([1.0, 2.0])

    # A non-contiguous source is copied in order.
    m = Tensor.from_binary(floats([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), :float32, {2, 3})

    assert Tensor.to_binary(IPC.export_torch(Tensor.transpose(m, 0, 1)).tensor) ==
             floats([1.0, 4.0, 2.0, 5.0, 3.0, 6.0])

    # write!/2 itself still takes binaries only.
    assert_raise ArgumentError, ~r/binary: expected a binary/, fn -> Tensor.write!(exported.tensor, t) end
  end

  test "a packed region returned by a remote call outlives the process that packed it", %{peer: peer} do
    data = floats([1.0, 2.0, 3.0])
    packed = :erpc.call(peer, Holder, :pack_fresh, [data, node(), [via: :region]])
    # The call's process on the peer is gone; collect everything there.
    :erpc.call(peer, :tensor_blob_test_util, :gc_all, [])
    assert packed.via == :region

    t = Nodes.unpack(packed)
    assert Tensor.to_binary(t) == data
    # The keeper lets go once the receiver holds its own reference.
    keeper = packed.keeper
    assert eventually(fn -> not :erpc.call(peer, Process, :alive?, [keeper]) end)
    assert refcount(packed.handle) == 1
    assert Tensor.to_binary(t) == data

    # Unpacked too late: the error says what happened and what to do.
    late = :erpc.call(peer, Holder, :pack_fresh, [data, node(), [via: :region, keep: 0]])
    :erpc.call(peer, :tensor_blob_test_util, :gc_all, [])
    assert eventually(fn -> not File.exists?(path(late.handle)) end)
    e = assert_raise ArgumentError, fn -> Nodes.unpack(late) end
    assert e.message =~ "is gone"
    assert e.message =~ "keep"
    assert byte_size(e.message) < 2048
  end

  test "by default a tensor takes the path that costs less", %{peer: peer} do
    # Where the default turns from a binary to a region, as measured.
    %{region: region_bytes, copy: copy_bytes} = :tensor_blob_nodes.default_thresholds()
    n = div(region_bytes, 4)

    # Small: a binary, whatever the tensor's memory.
    assert Nodes.pack(Tensor.zeros({n - 1}, :float32), peer).via == :binary
    assert Nodes.pack(IPC.torch_zeros({n - 1}, :float32), peer).via == :binary
    # Already a region, and large enough: that region, no copy.
    region = IPC.torch_zeros({n}, :float32)
    packed = Nodes.pack(region, peer)
    assert packed.via == :region
    assert packed.handle == IPC.export_torch(region).handle
    # Any other tensor: a region only where a copy into one costs less.
    below_copy = min(n, div(copy_bytes, 4) - 1)
    assert Nodes.pack(Tensor.zeros({below_copy}, :float32), peer).via == :binary
    # A region of the other format (IPC.zeros/2) would be copied: like any other tensor.
    assert Nodes.pack(IPC.zeros({below_copy}, :float32), peer).via == :binary
    # This node itself can open its own regions.
    assert Nodes.pack(region, node()).via == :region
  end

  test "pack asks a peer whether it shares this host once, until its connection goes down", %{peer: peer} do
    # The same host for the peer: asked by the first pack, or by an earlier test.
    region = IPC.torch_zeros({div(:tensor_blob_nodes.default_thresholds().region, 4)}, :float32)
    assert Nodes.pack(region, peer).via == :region
    count_asks(peer)
    asked = fn -> :erpc.call(peer, :erlang, :trace_info, [{:tensor_blob, :shm_identity, 0}, :call_count]) end

    for _ <- 1..3, do: assert(Nodes.pack(region, peer).via == :region)
    assert Nodes.same_host?(peer)
    assert asked.() == {:call_count, 0}
    assert {peer, true} in :tensor_blob_nodes.host_answers()

    # Another node under a name that went down and came back is asked again.
    {other, name} = start_named_peer()
    assert Nodes.pack(region, name).via == :region
    assert {name, true} in :tensor_blob_nodes.host_answers()
    :peer.stop(other)
    assert eventually(fn -> not List.keymember?(:tensor_blob_nodes.host_answers(), name, 0) end)
    {again, ^name} = start_named_peer(name)
    count_asks(name)
    assert Nodes.pack(region, name).via == :region
    assert Nodes.pack(region, name).via == :region
    assert :erpc.call(name, :erlang, :trace_info, [{:tensor_blob, :shm_identity, 0}, :call_count]) == {:call_count, 1}
    :peer.stop(again)

    # No answer is kept for a node that did not answer: it has no nodedown to forget it by.
    refute Nodes.same_host?(:"nobody_here@127.0.0.1")
    refute List.keymember?(:tensor_blob_nodes.host_answers(), :"nobody_here@127.0.0.1", 0)
  end

  # Counts the calls of what same_host/1 asks a node, there.
  defp count_asks(node) do
    {:module, _} = :erpc.call(node, :code, :ensure_loaded, [:tensor_blob])
    1 = :erpc.call(node, :erlang, :trace_pattern, [{:tensor_blob, :shm_identity, 0}, true, [:call_count]])
  end

  # A peer that does not join the other nodes (global would see one name
  # go down and come back as overlapping partitions).
  defp start_named_peer(name \\ nil) do
    short =
      if name,
        do: name |> Atom.to_string() |> String.split("@") |> hd() |> String.to_charlist(),
        else: :peer.random_name()

    args = Enum.flat_map(:code.get_path(), &[~c"-pa", &1]) ++ [~c"-connect_all", ~c"false"]
    {:ok, pid, node} = :peer.start(%{name: short, host: ~c"127.0.0.1", longnames: true, args: args})
    {pid, node}
  end

  test "same_host? is false for a node that cannot be reached, and agrees with pack" do
    refute Nodes.same_host?(:"nobody_here@127.0.0.1")
    assert Nodes.same_host?(node())
    assert_raise ArgumentError, ~r/expected a node name/, fn -> Nodes.same_host?("peer") end
  end

  @tag :other_user
  test "a peer run by another user gets the binary path by default", %{peer: peer} do
    case other_user_peer() do
      {:skip, why} ->
        flunk("a peer of another user could not start although the machine allows one: #{why}")

      {:ok, other, other_node} ->
        try do
          assert Nodes.same_host?(peer)
          refute Nodes.same_host?(other_node)
          t = Tensor.from_binary(floats([1.0, 2.0]), :float32, {2})
          packed = Nodes.pack(t, other_node)
          assert packed.via == :binary
          receiver = Holder.start(other_node, {Nodes, :unpack, [packed]})
          assert Holder.call(receiver, Tensor, :to_binary) == floats([1.0, 2.0])
          # Even a region large enough to go as itself to the peer of this user.
          region = IPC.torch_zeros({div(:tensor_blob_nodes.default_thresholds().region, 4)}, :float32)
          assert Nodes.pack(region, peer).via == :region
          assert Nodes.pack(region, other_node).via == :binary

          assert_raise ArgumentError, ~r/via region needs a node that can open/, fn ->
            Nodes.pack(t, other_node, via: :region)
          end
        after
          :peer.stop(other)
        end
    end
  end

  # A peer whose OS process runs as user nobody: only root can start one.
  defp other_user_peer do
    setpriv = System.find_executable("setpriv")
    {uid, 0} = System.cmd("id", ["-u"])

    cond do
      String.trim(uid) != "0" ->
        {:skip, "not root"}

      setpriv == nil ->
        {:skip, "no setpriv"}

      true ->
        paths = Enum.flat_map(:code.get_path(), &[~c"-pa", &1])
        erl = System.find_executable("erl")

        args = [
          ~c"--reuid=65534",
          ~c"--regid=65534",
          ~c"--clear-groups",
          ~c"env",
          ~c"HOME=/tmp",
          String.to_charlist(erl)
        ]

        {:ok, pid, node} =
          :peer.start(%{
            name: :peer.random_name(),
            host: ~c"127.0.0.1",
            longnames: true,
            exec: {String.to_charlist(setpriv), args},
            # Its home is not this user's: the cookie is given.
            args: paths ++ [~c"-setcookie", Atom.to_charlist(Node.get_cookie()), ~c"-connect_all", ~c"false"]
          })

        {:ok, _} = :erpc.call(node, :application, :ensure_all_started, [:elixir])
        {:ok, pid, node}
    end
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
    assert_raise ArgumentError, ~r/via: expected one of :region, :binary/, fn -> Nodes.pack(t, peer, via: :pigeon) end
    assert_raise ArgumentError, ~r/expected what TensorBlob.Nodes.pack\/2 made/, fn -> Nodes.unpack(%{via: :region}) end
    assert_raise ArgumentError, ~r/expected a tensor/, fn -> Nodes.pack(:nope, peer) end

    # A format this build does not know is refused, naming the one it knows.
    packed = Nodes.pack(t, peer)
    e = assert_raise ArgumentError, fn -> Nodes.unpack(%{packed | __tensor_blob_node__: 2}) end
    assert e.message =~ "format is version 2"
    assert e.message =~ "it unpacks version 1)"

    assert_raise ArgumentError, ~r/format is version :one/, fn ->
      Nodes.unpack(%{packed | __tensor_blob_node__: :one})
    end

    assert Tensor.to_binary(Nodes.unpack(packed)) == <<0, 0>>
  end
end
