defmodule TensorBlob.NodesFileTest do
  # A tensor of a safetensors file, sent to a node on this host: it travels
  # as the file (its name, which version of it, where in it), and the
  # receiver maps that same file. Two local nodes: this one and a peer
  # started with OTP's :peer.
  use ExUnit.Case, async: false

  alias TensorBlob.{Nodes, SafeTensors, Tensor}
  alias TensorBlob.Test.{Holder, Lifetime}
  import TensorBlob.Test.Shm, only: [floats: 1, start_peer: 1, eventually: 1]

  setup_all do
    {_peer, node, stop} = start_peer("tb_nodes_file")
    {:ok, _} = :erpc.call(node, :application, :ensure_all_started, [:elixir])
    on_exit(stop)
    %{peer: node}
  end

  setup do
    dir = Path.join(System.tmp_dir!(), "tb_nodes_file_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    on_exit(fn -> File.rm_rf!(dir) end)
    %{dir: dir}
  end

  # Rows of floats large enough that the default path takes the file
  # (the size where it turns from a binary, as measured).
  defp rows do
    n = div(:tensor_blob_nodes.default_thresholds().file, 4)
    cols = 64
    {div(n + cols - 1, cols), cols}
  end

  defp values({r, c}, k), do: floats(for i <- 1..(r * c), do: i * 0.25 + k)

  defp write_file(dir, k \\ 0) do
    path = Path.join(dir, "model.safetensors")
    shape = rows()

    :ok =
      SafeTensors.write(path, %{
        "w" => {values(shape, k), :float32, shape},
        "small" => {<<1, 2, 3, 4>>, :uint8, {4}}
      })

    path
  end

  defp maps_file?(path), do: File.read!("/proc/self/maps") |> String.contains?(path)

  test "a file's tensor travels to a node on this host as its file, mapped there", %{peer: peer, dir: dir} do
    path = write_file(dir)
    %{tensors: %{"w" => w}} = SafeTensors.open(path)

    packed = Nodes.pack(w, peer)
    assert packed.via == :file
    # The file's absolute name, whatever name it was opened by.
    assert Path.type(packed.path) == :absolute
    assert File.stat!(packed.path).inode == File.stat!(path).inode
    # No byte of the data in the term: a name, numbers.
    assert :erlang.external_size(packed) < 1024

    receiver = Holder.start(peer, {Nodes, :unpack, [packed]})
    assert Holder.call(receiver, Tensor, :memory) == :file
    assert Holder.call(receiver, Tensor, :to_binary) == Tensor.to_binary(w)
    # The peer is another OS process, with a mapping of the file of its own.
    refute :erpc.call(peer, System, :pid, []) == System.pid()
    assert :erpc.call(peer, Holder, :maps?, [packed.path])
    Holder.drop(receiver)
  end

  test "a strided view of a file's tensor travels as the file, with its strides", %{peer: peer, dir: dir} do
    path = write_file(dir)
    %{tensors: %{"w" => w}} = SafeTensors.open(path)
    {r, _c} = rows()
    view = w |> Tensor.narrow(0, 1, r - 1) |> Tensor.transpose(0, 1)
    assert Tensor.memory(view) == :file

    packed = Nodes.pack(view, peer, via: :file)
    assert packed.via == :file
    assert packed.strides == Tensor.strides(view)

    receiver = Holder.start(peer, {Nodes, :unpack, [packed]})
    assert Holder.call(receiver, Tensor, :shape) == Tensor.shape(view)
    assert Holder.call(receiver, Tensor, :strides) == Tensor.strides(view)
    assert Holder.call(receiver, Tensor, :to_binary) == Tensor.to_binary(view)
    Holder.drop(receiver)
  end

  test "the receiver's tensor needs nothing of the sender's: dropped, collected, it still reads",
       %{peer: peer, dir: dir} do
    path = write_file(dir)
    expected = values(rows(), 0)

    # The sender opens, packs and drops everything: its process ends.
    packed =
      Lifetime.in_process(fn ->
        %{tensors: %{"w" => w}} = SafeTensors.open(path)
        Nodes.pack(w, peer)
      end)

    assert packed.via == :file
    assert eventually(fn -> not maps_file?(packed.path) end), "the sender's mapping is gone"

    receiver = Holder.start(peer, {Nodes, :unpack, [packed]})
    Lifetime.churn()
    assert Holder.call(receiver, Tensor, :to_binary) == expected
    Holder.drop(receiver)
  end

  test "a file renamed over between pack and unpack is refused, and a tensor mapped before still reads",
       %{peer: peer, dir: dir} do
    path = write_file(dir)
    %{tensors: %{"w" => w}} = SafeTensors.open(path)
    old = Tensor.to_binary(w)
    packed = Nodes.pack(w, peer)
    earlier = Holder.start(peer, {Nodes, :unpack, [packed]})

    # write/3 renames a new file over the name.
    path = write_file(dir, 1)

    assert {%TensorBlob.Error{message: message}, %{reason: :gone, argument: :packed}} = remote_error(peer, packed)
    assert message =~ "was replaced or changed since the sending node opened it"

    # The mappings of the old file, here and there, still read its bytes.
    assert Tensor.to_binary(w) == old
    assert Holder.call(earlier, Tensor, :to_binary) == old
    Holder.drop(earlier)

    # Packed again, the old file's tensor no longer travels as the name
    # (which holds the new file): by default as a copy, of the old bytes.
    repacked = Nodes.pack(w, peer)
    refute repacked.via == :file
    assert remote_binary(peer, repacked) == old
    assert %{reason: :gone, argument: :tensor} = reason(fn -> Nodes.pack(w, peer, via: :file) end)

    # The new file's tensors travel as it.
    %{tensors: %{"w" => new}} = SafeTensors.open(path)
    assert Nodes.pack(new, peer).via == :file
  end

  test "a file's tensor written on the sender travels as a copy of what it holds", %{peer: peer, dir: dir} do
    path = write_file(dir)
    %{tensors: %{"w" => w}} = SafeTensors.open(path)
    Tensor.write!(w, values(rows(), 7))

    packed = Nodes.pack(w, peer)
    refute packed.via == :file
    assert remote_binary(peer, packed) == values(rows(), 7)
    assert %{reason: :unsafe, argument: :tensor} = reason(fn -> Nodes.pack(w, peer, via: :file) end)
    # The file itself is as written.
    %{tensors: %{"w" => again}} = SafeTensors.open(path)
    assert Tensor.to_binary(again) == values(rows(), 0)
  end

  test "via: :binary copies a file's tensor; a small one goes as a binary by default", %{peer: peer, dir: dir} do
    path = write_file(dir)
    %{tensors: %{"w" => w, "small" => small}} = SafeTensors.open(path)
    packed = Nodes.pack(w, peer, via: :binary)
    assert packed.via == :binary
    assert remote_binary(peer, packed) == Tensor.to_binary(w)
    assert Nodes.pack(small, peer).via == :binary
    # Just below the size where the default turns to the file: a binary.
    below = Tensor.narrow(w, 0, 0, elem(rows(), 0) - 1)
    assert Nodes.pack(below, peer).via == :binary
    # Forced, a small one travels as the file all the same.
    packed = Nodes.pack(small, peer, via: :file)
    assert packed.via == :file
    assert remote_binary(peer, packed) == <<1, 2, 3, 4>>
    # copy: true makes a private copy.
    copy = Holder.start(peer, {Nodes, :unpack, [Nodes.pack(w, peer), [copy: true]]})
    assert Holder.call(copy, Tensor, :memory) == :owned
    assert Holder.call(copy, Tensor, :to_binary) == Tensor.to_binary(w)
    Holder.drop(copy)
  end

  test "bad inputs", %{peer: peer, dir: dir} do
    path = write_file(dir)
    %{tensors: %{"w" => w}} = SafeTensors.open(path)

    assert %{reason: :bad_value, argument: :tensor} =
             reason(fn -> Nodes.pack(Tensor.zeros({4}, :uint8), peer, via: :file) end)

    assert_raise ArgumentError, ~r/via: expected one of :region, :binary, :file/, fn ->
      Nodes.pack(w, peer, via: :pigeon)
    end

    packed = Nodes.pack(w, peer, via: :file)
    # Another version of the file than the one there.
    forged = %{packed | identity: put_elem(packed.identity, 4, elem(packed.identity, 4) + 1)}
    assert %{reason: :gone, argument: :packed} = reason(fn -> Nodes.unpack(forged) end)
    # No such file.
    assert %{reason: :gone, argument: :packed} = reason(fn -> Nodes.unpack(%{packed | path: path <> ".none"}) end)
    # Bytes past the file's end.
    assert %{reason: :out_of_extent, argument: :packed} =
             reason(fn -> Nodes.unpack(%{packed | offset: elem(packed.identity, 2)}) end)

    assert %{reason: :bad_value, argument: :packed} = reason(fn -> Nodes.unpack(%{packed | identity: :nope}) end)
    assert %{reason: :bad_value, argument: :packed} = reason(fn -> Nodes.unpack(%{packed | path: 1}) end)
  end

  # What the peer reads from the packed term.
  defp remote_binary(peer, packed) do
    holder = Holder.start(peer, {Nodes, :unpack, [packed]})
    bytes = Holder.call(holder, Tensor, :to_binary)
    Holder.drop(holder)
    bytes
  end

  # What the peer's unpack raises, and the reason and argument it carries.
  defp remote_error(peer, packed) do
    try do
      :erpc.call(peer, Nodes, :unpack, [packed])
      flunk("expected an error")
    rescue
      e in ErlangError ->
        {:exception, raised, stack} = e.original
        {raised, Map.take(:tensor_blob.error_reason(stack), [:reason, :argument])}
    end
  end

  defp reason(fun) do
    try do
      fun.()
      flunk("expected an error")
    rescue
      e in [ArgumentError, TensorBlob.Error] ->
        _ = e
        Map.take(:tensor_blob.error_reason(__STACKTRACE__), [:reason, :argument])
    end
  end
end
