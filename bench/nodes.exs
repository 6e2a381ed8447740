# Moving a 256 MiB tensor between two nodes on this host, both ways, with
# TensorBlob.Nodes (a shared region; one binary) next to sending an Nx
# BinaryBackend-like term over distribution and, when Nx is on the code
# path (NX_PATH), Nx.serialize/Nx.deserialize. Run:
#
#   mix run bench/nodes.exs [MiB]            (NX_PATH=... for the Nx rows)
#
# Prints the median of 5 runs of each, in milliseconds. The peer is a second
# BEAM started with OTP's :peer on 127.0.0.1; "there" is this node to the
# peer, "back" the peer to this node; each includes the other node's unpack.
defmodule NodesBench do
  alias TensorBlob.{IPC, Nodes, Tensor}

  @runs 5

  # Compiled on the peer: what it runs for each measurement. It answers
  # with small terms, so that only the measured direction carries data.
  @remote ~S'''
  defmodule NodesBench.Remote do
    def unpack(packed) do
      t = TensorBlob.Nodes.unpack(packed)
      TensorBlob.Tensor.shape(t)
    end

    def decode(etf), do: map_size(:erlang.binary_to_term(etf))
    def receive_term(term), do: map_size(term)
    def deserialize(bin), do: Nx.size(Nx.deserialize(bin))

    # A process that holds a tensor made here and packs it on request.
    def holder(kind, n) do
      parent = self()
      pid = spawn(fn -> hold(parent, make(kind, n)) end)
      receive do: ({^pid, :ready} -> pid)
    end

    defp make(:region, n), do: TensorBlob.IPC.torch_zeros({n}, :float32)
    defp make(:owned, n), do: TensorBlob.Tensor.zeros({n}, :float32)

    defp hold(parent, t) do
      send(parent, {self(), :ready})
      receive do
        {:pack, from, node, opts} ->
          send(from, {self(), TensorBlob.Nodes.pack(t, node, opts)})
          hold(parent, t)
        {:term, from, what} ->
          send(from, {self(), as(what, t)})
          hold(parent, t)
      end
    end

    def pack(holder, node, opts) do
      send(holder, {:pack, self(), node, opts})
      receive do: ({^holder, packed} -> packed)
    end

    defp as(:nx_like, t) do
      %{data: %{state: TensorBlob.Tensor.to_binary(t)}, shape: TensorBlob.Tensor.shape(t), type: {:f, 32}, names: [nil]}
    end

    defp as(:etf, t), do: :erlang.term_to_binary(as(:nx_like, t))

    defp as(:serialized, t) do
      t |> TensorBlob.Tensor.to_binary() |> Nx.from_binary({:f, 32}) |> Nx.serialize() |> IO.iodata_to_binary()
    end

    def term(holder, what) do
      send(holder, {:term, self(), what})
      receive do: ({^holder, term} -> term)
    end
  end
  '''

  def run(mib) do
    bytes = mib * 1024 * 1024
    n = div(bytes, 4)
    peer = start_peer()
    :erpc.call(peer, Code, :compile_string, [@remote])
    remote = NodesBench.Remote

    region = IPC.torch_zeros({n}, :float32)
    owned = Tensor.zeros({n}, :float32)
    payload = Tensor.to_binary(owned)
    nx_like = %{data: %{state: payload}, shape: {n}, type: {:f, 32}, names: [nil]}

    there = fn via, t ->
      fn -> :erpc.call(peer, remote, :unpack, [Nodes.pack(t, peer, via: via)]) end
    end

    back = fn via, holder ->
      fn -> Nodes.unpack(:erpc.call(peer, remote, :pack, [holder, node(), [via: via]])) end
    end

    peer_region = :erpc.call(peer, remote, :holder, [:region, n])
    peer_owned = :erpc.call(peer, remote, :holder, [:owned, n])

    rows = [
      {"TensorBlob.Nodes, region (made with IPC.torch_zeros)", there.(:region, region), back.(:region, peer_region)},
      {"TensorBlob.Nodes, region (copied into one)", there.(:region, owned), back.(:region, peer_owned)},
      {"TensorBlob.Nodes, one binary (a view of the tensor)", there.(:binary, owned), back.(:binary, peer_owned)},
      {"Nx-like term over distribution", fn -> :erpc.call(peer, remote, :receive_term, [nx_like]) end,
       fn -> :erpc.call(peer, remote, :term, [peer_owned, :nx_like]) end},
      {":erlang.term_to_binary + binary_to_term",
       fn -> :erpc.call(peer, remote, :decode, [:erlang.term_to_binary(nx_like)]) end,
       fn -> :erlang.binary_to_term(:erpc.call(peer, remote, :term, [peer_owned, :etf])) end}
    ]

    rows =
      if Code.ensure_loaded?(Nx) do
        {:ok, _} = Application.ensure_all_started(:nx)
        {:ok, _} = :erpc.call(peer, Application, :ensure_all_started, [:nx])
        nx = Nx.from_binary(payload, {:f, 32})

        rows ++
          [
            {"Nx.serialize + Nx.deserialize",
             fn -> :erpc.call(peer, remote, :deserialize, [IO.iodata_to_binary(Nx.serialize(nx))]) end,
             fn -> Nx.deserialize(:erpc.call(peer, remote, :term, [peer_owned, :serialized])) end}
          ]
      else
        rows ++ [{"Nx.serialize (no Nx on the code path: NX_PATH)", nil, nil}]
      end

    IO.puts("#{mib} MiB float32, median of #{@runs} runs, ms (there: to the peer; back: from it)")
    IO.puts(String.pad_trailing("", 56) <> String.pad_leading("there", 10) <> String.pad_leading("back", 10))

    for {title, to_peer, from_peer} <- rows do
      IO.puts(String.pad_trailing(title, 56) <> cell(to_peer) <> cell(from_peer))
    end
  end

  defp cell(nil), do: String.pad_leading("-", 10)
  defp cell(fun), do: String.pad_leading(:erlang.float_to_binary(median_ms(fun), decimals: 1), 10)

  defp median_ms(fun) do
    fun.()
    :erlang.garbage_collect()

    samples =
      for _ <- 1..@runs do
        t0 = System.monotonic_time(:microsecond)
        fun.()
        dt = System.monotonic_time(:microsecond) - t0
        :erlang.garbage_collect()
        dt / 1000
      end

    Enum.at(Enum.sort(samples), div(@runs, 2))
  end

  defp start_peer do
    unless Node.alive?() do
      {_, 0} = System.cmd("epmd", ["-daemon"])
      {:ok, _} = :net_kernel.start([:"nodes_bench_#{System.pid()}@127.0.0.1", :longnames])
    end

    paths = Enum.flat_map(:code.get_path(), &[~c"-pa", &1])
    {:ok, _pid, node} = :peer.start(%{name: :peer.random_name(), host: ~c"127.0.0.1", longnames: true, args: paths})
    {:ok, _} = :erpc.call(node, :application, :ensure_all_started, [:tensor_blob])
    node
  end
end

mib =
  case System.argv() do
    [m] -> String.to_integer(m)
    [] -> 256
  end

NodesBench.run(mib)
