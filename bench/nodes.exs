# Moving a 256 MiB tensor between two nodes on this host, both ways, with
# TensorBlob.Nodes (a shared region; one binary) next to sending an Nx
# BinaryBackend-like term over distribution and, when Nx is on the code
# path (NX_PATH), Nx.serialize/Nx.deserialize. Run:
#
#   mix run bench/nodes.exs [MiB]            (NX_PATH=... for the Nx rows)
#   mix run bench/nodes.exs paths [Bytes...] (the default against each path)
#   mix run bench/nodes.exs crossings        (NIF crossings of Nodes.pack, IPC.export)
#
# Prints the median of 5 runs of each, in milliseconds. The peer is a second
# BEAM started with OTP's :peer on 127.0.0.1; "there" is this node to the
# peer, "back" the peer to this node; each includes the other node's unpack.
#
# make bench (bench/bench.exs) runs NodesBench.floors/2 instead: each path
# beside its floor, in one run, best of several: the binary path against
# the same bytes sent as a plain binary, the copy into a region against a
# copy of the same bytes into new memory.
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

    def unpack_memory(packed), do: TensorBlob.Tensor.memory(TensorBlob.Nodes.unpack(packed))

    # Unpacks and reads: one byte of each 4 KiB page of the data, through
    # a binary over the tensor's own memory (a region's pages fault in
    # here, as they would for any reader; nothing is copied).
    def unpack_read(packed) do
      t = TensorBlob.Nodes.unpack(packed)
      bin = :tensor_blob.to_binary(TensorBlob.Tensor.ref(t), %{copy: false, unsafe_shared_memory: true})
      touch(bin, 0, byte_size(bin), 0)
    end

    defp touch(_bin, at, size, sum) when at >= size, do: sum
    defp touch(bin, at, size, sum), do: touch(bin, at + 4096, size, sum + :binary.at(bin, at))
    def receive_binary(bin), do: byte_size(bin)
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

  # Each path beside its floor, alternating, the best of `runs` each (ms):
  # the binary path (pack, send, unpack there) against the same bytes sent
  # as a plain binary the same way (erpc); the copy into a region
  # (Nodes.pack of an ordinary tensor, here) against from_binary's copy of
  # the same bytes into new memory (a memcpy, and the new pages' faults).
  def floors(mib, runs) do
    bytes = mib * 1024 * 1024
    n = div(bytes, 4)
    peer = start_peer()
    :erpc.call(peer, Code, :compile_string, [@remote])
    remote = NodesBench.Remote
    owned = Tensor.zeros({n}, :float32)
    region = IPC.torch_zeros({n}, :float32)
    payload = Tensor.to_binary(owned)

    timed = fn fun ->
      :erlang.garbage_collect()
      t0 = System.monotonic_time(:microsecond)
      result = fun.()
      {(System.monotonic_time(:microsecond) - t0) / 1000, result}
    end

    binary_path = fn -> :erpc.call(peer, remote, :unpack_memory, [Nodes.pack(owned, peer, via: :binary)]) end
    # The first message on this path teaches the sender its pad.
    first_memory = binary_path.()

    samples =
      for i <- 1..runs do
        # Each goes first in turn: what one leaves to free falls on the other alike.
        plain_first = rem(i, 2) == 1
        {binary, memory} = if plain_first, do: {nil, nil}, else: timed.(binary_path)
        {plain, _} = timed.(fn -> :erpc.call(peer, remote, :receive_binary, [payload]) end)
        {binary, memory} = if plain_first, do: timed.(binary_path), else: {binary, memory}
        {copy, _} = timed.(fn -> Nodes.pack(owned, peer, via: :region) end)
        {memcpy, _} = timed.(fn -> Tensor.from_binary(payload, :float32, {n}) end)
        {name, _} = timed.(fn -> :erpc.call(peer, remote, :unpack, [Nodes.pack(region, peer)]) end)
        %{plain: plain, binary: binary, memory: memory, copy: copy, memcpy: memcpy, name: name}
      end

    best = fn key -> samples |> Enum.map(& &1[key]) |> Enum.min() end
    :peer.stop(peer_pid(peer))

    %{
      mib: mib,
      runs: runs,
      plain_binary_ms: best.(:plain),
      binary_path_ms: best.(:binary),
      binary_path_over_plain: best.(:binary) / best.(:plain),
      receiver_memory_first: first_memory,
      receiver_memory: samples |> Enum.map(& &1.memory) |> Enum.uniq(),
      region_copy_ms: best.(:copy),
      memcpy_ms: best.(:memcpy),
      region_copy_over_memcpy: best.(:copy) / best.(:memcpy),
      region_name_ms: best.(:name)
    }
  end

  # The paths end to end (pack here, the packed term carried by an erpc
  # call, unpack and a read there: NodesBench.Remote.unpack_read/1), for an
  # ordinary tensor, for one made in a region (IPC.torch_zeros/2) and for
  # one of a mapped safetensors file: the default against via: :binary and
  # via: :region (and via: :file for the file's), best of `runs` each,
  # taken in turn. {kind, bytes, %{default:, binary:, region:, file:,
  # chose:}} in microseconds; chose is the path the default took.
  def paths(sizes, runs) do
    peer = start_peer()
    :erpc.call(peer, Code, :compile_string, [@remote])
    remote = NodesBench.Remote

    rows =
      for bytes <- sizes, kind <- [:owned, :region, :file] do
        n = div(bytes, 4)
        runs = if bytes >= 64 * 1024 * 1024, do: min(runs, 3), else: runs
        t = tensor(kind, n)
        send_one = fn opts -> :erpc.call(peer, remote, :unpack_read, [Nodes.pack(t, peer, opts)]) end
        paths = [default: [], binary: [via: :binary], region: [via: :region]]
        paths = if kind == :file, do: paths ++ [file: [via: :file]], else: paths
        # Once each first: the pad (binary path) and the peer's answer are learnt.
        for {_, opts} <- paths, do: send_one.(opts)

        samples =
          for i <- 1..runs, {path, opts} <- rotate(paths, i) do
            :erlang.garbage_collect()
            :erpc.call(peer, :erlang, :garbage_collect, [])
            t0 = System.monotonic_time(:nanosecond)
            send_one.(opts)
            {path, (System.monotonic_time(:nanosecond) - t0) / 1000}
          end

        best = for {path, _} <- paths, into: %{}, do: {path, samples |> Keyword.get_values(path) |> Enum.min()}
        {kind, bytes, Map.put(best, :chose, Nodes.pack(t, peer).via)}
      end

    File.rm_rf!(bench_dir())
    :peer.stop(peer_pid(peer))
    rows
  end

  defp tensor(:owned, n), do: Tensor.from_binary(:binary.copy(<<1.0::float-32-native>>, n), :float32, {n})

  defp tensor(:region, n) do
    t = IPC.torch_zeros({n}, :float32)
    Tensor.write!(t, :binary.copy(<<1.0::float-32-native>>, n))
  end

  defp tensor(:file, n) do
    path = Path.join(bench_dir(), "#{n}.safetensors")
    :ok = TensorBlob.SafeTensors.write(path, %{"t" => tensor(:owned, n)})
    TensorBlob.SafeTensors.open(path).tensors["t"]
  end

  defp bench_dir do
    dir = Path.join(System.tmp_dir!(), "tb_nodes_bench_#{System.pid()}")
    File.mkdir_p!(dir)
    dir
  end

  defp rotate(list, i), do: Enum.drop(list, rem(i, length(list))) ++ Enum.take(list, rem(i, length(list)))

  def print_paths(rows) do
    IO.puts("Between nodes on this host, end to end (pack, erpc, unpack and a read there), best of each, us")

    IO.puts(
      Enum.map_join(
        [
          {"tensor", 8},
          {"size", 10},
          {"default", 11},
          {"binary", 11},
          {"region", 11},
          {"file", 11},
          {"default/best", 13},
          {"chose", 8}
        ],
        fn {h, w} -> String.pad_leading(h, w) end
      )
    )

    for {kind, bytes, r} <- rows do
      ratio = r.default / Enum.min([r.binary, r.region | List.wrap(r[:file])])

      IO.puts(
        String.pad_leading(to_string(kind), 8) <>
          String.pad_leading(size(bytes), 10) <>
          Enum.map_join(
            [r.default, r.binary, r.region, r[:file]],
            &String.pad_leading(if(&1, do: us(&1), else: "-"), 11)
          ) <>
          String.pad_leading(:erlang.float_to_binary(ratio, decimals: 2), 13) <>
          String.pad_leading(to_string(r.chose), 8)
      )
    end
  end

  defp size(b) when b >= 1024 * 1024, do: "#{div(b, 1024 * 1024)} MiB"
  defp size(b) when b >= 1024, do: "#{div(b, 1024)} KiB"
  defp size(b), do: "#{b} B"

  defp us(x) when x >= 10_000, do: :erlang.float_to_binary(x / 1000, decimals: 1) <> " ms"
  defp us(x), do: :erlang.float_to_binary(x / 1, decimals: 0) <> " us"

  # NIF crossings of one call of fun (the tensor_blob_nif functions it
  # calls, counted by call_count tracing) and its median time over `runs`
  # calls, in microseconds.
  def crossings(fun, runs \\ 2001) do
    fun.()
    :erlang.trace_pattern({:tensor_blob_nif, :_, :_}, true, [:call_count])
    fun.()

    counts =
      for {f, a} <- :tensor_blob_nif.module_info(:functions),
          f != :module_info,
          {:call_count, n} = :erlang.trace_info({:tensor_blob_nif, f, a}, :call_count),
          is_integer(n) and n > 0,
          do: {f, n}

    :erlang.trace_pattern({:tensor_blob_nif, :_, :_}, false, [:call_count])

    times =
      for _ <- 1..runs do
        t0 = System.monotonic_time(:nanosecond)
        fun.()
        System.monotonic_time(:nanosecond) - t0
      end

    {counts, Enum.at(Enum.sort(times), div(runs, 2)) / 1000}
  end

  # Nodes.pack of a 4-byte tensor to a peer on this host (by default, and
  # via: :region, the most it crosses) and IPC.export of one.
  def crossing_report do
    peer = start_peer()
    t = Tensor.from_binary(<<1.0::float-32-native>>, :float32, {1})
    region = IPC.torch_zeros({1}, :float32)
    posix = IPC.zeros({1}, :float32)

    for {title, fun} <- [
          {"Nodes.pack, 4 B, default", fn -> Nodes.pack(t, peer) end},
          {"Nodes.pack, 4 B, via: :region (copied into one)", fn -> Nodes.pack(t, peer, via: :region) end},
          {"Nodes.pack, 4 B region, via: :region", fn -> Nodes.pack(region, peer, via: :region) end},
          {"IPC.export, 4 B (copied into a region)", fn -> IPC.export(t) end},
          {"IPC.export, 4 B region", fn -> IPC.export(posix) end}
        ] do
      {counts, us} = crossings(fn -> fun.() && :ok end)
      n = counts |> Keyword.values() |> Enum.sum()

      IO.puts(
        String.pad_trailing(title, 50) <>
          "#{n} crossings, #{:erlang.float_to_binary(us, decimals: 1)} us  #{inspect(counts)}"
      )
    end

    :peer.stop(peer_pid(peer))
  end

  def print_floors(f) do
    IO.puts(
      "Between nodes, #{f.mib} MiB float32, best of #{f.runs}, ms: one binary (pack, send, unpack there) " <>
        "#{ms(f.binary_path_ms)} against the same bytes as a plain binary #{ms(f.plain_binary_ms)} " <>
        "(#{ratio(f.binary_path_over_plain)}x, goal <= 1.2; the receiver's tensor: #{inspect(f.receiver_memory)}, " <>
        "#{inspect(f.receiver_memory_first)} on the path's first message); the copy into a region " <>
        "#{ms(f.region_copy_ms)} against a copy into new memory #{ms(f.memcpy_ms)} " <>
        "(#{ratio(f.region_copy_over_memcpy)}x, goal <= 1.3); a region's name #{ms(f.region_name_ms)}"
    )
  end

  defp ms(x), do: :erlang.float_to_binary(x / 1, decimals: 1)
  defp ratio(x), do: :erlang.float_to_binary(x / 1, decimals: 2)

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
    {:ok, pid, node} = :peer.start(%{name: :peer.random_name(), host: ~c"127.0.0.1", longnames: true, args: paths})
    {:ok, _} = :erpc.call(node, :application, :ensure_all_started, [:tensor_blob])
    Process.put({:peer, node}, pid)
    node
  end

  defp peer_pid(node), do: Process.get({:peer, node})
end

# bench.exs requires this file for NodesBench.floors/2 alone.
unless System.get_env("TB_NODES_LIBRARY") do
  case System.argv() do
    ["paths" | sizes] ->
      sizes = if sizes == [], do: ~w(4 65536 1048576 16777216 268435456), else: sizes
      sizes |> Enum.map(&String.to_integer/1) |> NodesBench.paths(5) |> NodesBench.print_paths()

    ["crossings"] ->
      NodesBench.crossing_report()

    [m] ->
      NodesBench.run(String.to_integer(m))

    [] ->
      NodesBench.run(256)
  end
end
