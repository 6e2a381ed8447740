# Loading model weights from a safetensors file: a 1 GiB file of 256
# float32 tensors (4 MiB each) that the bench writes once (with
# TensorBlob.SafeTensors.write/3) and reads from a warm page cache.
#
#   mix run bench/safetensors.exs            our side: open, every tensor
#                                            read, resident memory, two VMs' PSS,
#                                            info/1 (the header alone), the same
#                                            256 tensors as a checkpoint of 4
#                                            shards opened by its index, and the
#                                            peak memory of opening a misaligned
#                                            64 MiB tensor (a fresh VM)
#   mix run bench/safetensors.exs --compare  the same beside elixir-nx's
#                                            Safetensors (read! and lazy: true)
#                                            and the reference's Python loop
#
# --compare (make bench-safetensors, in the Debian 13 root) needs Nx on the
# code path (NX_PATH), elixir-nx's safetensors and Jason sources extracted
# under SAFETENSORS_SRC and JASON_SRC (compiled here, in memory), and a
# python3 with safetensors and torch. make bench runs SafeTensorsBench.ours/1
# alone. Times are the median of 5 runs, in milliseconds.
defmodule SafeTensorsBench do
  alias TensorBlob.{SafeTensors, Tensor}

  @tensors 256
  @bytes Bitwise.bsl(1, 30)
  @runs 5

  def path, do: Path.join(System.tmp_dir!(), "tb_bench_#{@bytes}_#{@tensors}.safetensors")

  # The file, written once: the same 4 MiB of pseudo-random floats under
  # 256 names (the writer holds one tensor, the file holds 1 GiB).
  def make(path \\ path()) do
    each = div(@bytes, @tensors)

    unless File.exists?(path) and File.stat!(path).size > @bytes do
      :rand.seed(:exsss, {1, 2, 3})
      data = for _ <- 1..div(each, 4), into: <<>>, do: <<:rand.uniform()::float-32-little>>
      t = Tensor.from_binary(data, :float32, {div(each, 4)})
      :ok = SafeTensors.write(path, for(i <- 1..@tensors, do: {"layer.#{i}.weight", t}), %{"format" => "pt"})
    end

    warm(path)
    path
  end

  # The page cache warm: every byte read once.
  def warm(path) do
    {:ok, f} = :file.open(path, [:read, :raw, :binary])
    read = fn read -> if :file.read(f, 8 * 1024 * 1024) == :eof, do: :ok, else: read.(read) end
    read.(read)
    :file.close(f)
  end

  @shards 4

  # The same tensors as a sharded checkpoint: 4 shard files of 64 tensors
  # each and the index that maps every name to its shard (as the
  # reference's save_model names them), beside the single file.
  def make_sharded(path \\ path()) do
    dir = Path.rootname(path) <> "_sharded"
    index = Path.join(dir, "model.safetensors.index.json")

    unless File.exists?(index) do
      File.mkdir_p!(dir)
      %{tensors: all} = SafeTensors.open(path)
      names = all |> Map.keys() |> Enum.sort()
      per = div(length(names), @shards)

      weight_map =
        names
        |> Enum.chunk_every(per)
        |> Enum.with_index(1)
        |> Enum.flat_map(fn {chunk, i} ->
          shard = "model-#{pad(i)}-of-#{pad(@shards)}.safetensors"
          :ok = SafeTensors.write(Path.join(dir, shard), Map.take(all, chunk), %{"format" => "pt"})
          for n <- chunk, do: ~s("#{n}": "#{shard}")
        end)

      File.write!(index, ~s({"metadata": {"total_size": #{@bytes}}, "weight_map": {#{Enum.join(weight_map, ", ")}}}))
    end

    for shard <- Path.wildcard(Path.join(dir, "*.safetensors")), do: warm(shard)
    index
  end

  defp pad(i), do: String.pad_leading("#{i}", 5, "0")

  # A file of one 64 MiB float32 tensor whose offset 4 does not divide,
  # opened in a fresh VM (the library loaded first): how much its peak
  # resident memory (VmHWM) grows, copied and refused.
  def misaligned do
    n = Bitwise.bsl(16, 20)
    path = Path.join(System.tmp_dir!(), "tb_bench_misaligned_#{System.pid()}.safetensors")
    h = ~s({"w":{"dtype":"F32","shape":[#{n}],"data_offsets":[0,#{4 * n}]}})
    h = h <> String.duplicate(" ", rem(4 - rem(8 + byte_size(h), 4), 4) + 2)
    File.write!(path, [<<byte_size(h)::little-64>>, h, :binary.copy(<<1.5::float-32-little>>, n)])
    warm(path)

    grown = fn opts ->
      code = """
      Hwm = fun() -> {ok, S} = file:read_file("/proc/self/status"),
                     {match, [K]} = re:run(S, "VmHWM:[^0-9]*([0-9]+)", [{capture, all_but_first, list}]),
                     list_to_integer(K) * 1024 end,
      _ = tensor_blob:to_binary(tensor_blob:zeros({4}, float32)),
      B = Hwm(),
      _ = try tensor_blob_safetensors:open(<<"#{path}">>, #{opts}) catch error:{badarg, _} -> refused end,
      io:format("~p~n", [Hwm() - B]),
      halt().
      """

      paths = Enum.flat_map(:code.get_path(), &["-pa", to_string(&1)])
      {out, 0} = System.cmd("erl", ["-noshell" | paths] ++ ["-eval", code])
      out |> String.trim() |> String.to_integer()
    end

    result = %{
      tensor_bytes: 4 * n,
      copied_peak_bytes: grown.("\#{}"),
      refused_peak_bytes: grown.("\#{misaligned => refuse}")
    }

    File.rm!(path)
    result
  end

  def median_ms(fun) do
    times =
      for _ <- 1..@runs do
        :erlang.garbage_collect()
        {us, _} = :timer.tc(fun)
        us / 1000
      end

    times |> Enum.sort() |> Enum.at(div(@runs, 2))
  end

  # Every tensor's bytes read through a binary over the mapping (no copy):
  # what a consumer reading the weights touches.
  def read_all(tensors) do
    Enum.reduce(tensors, 0, fn {_, t}, acc ->
      :erlang.crc32(acc, Tensor.to_binary(t, copy: false, unsafe_shared_memory: true))
    end)
  end

  def ours(path \\ make()) do
    # First, before this VM has mapped the file: two other VMs' PSS.
    pss = pss(path)
    open = median_ms(fn -> SafeTensors.open(path) end)
    header = path |> File.open!([:read, :binary], &IO.binread(&1, 8)) |> :binary.decode_unsigned(:little)
    :erlang.garbage_collect()
    before = Bench.RSS.kib()
    %{tensors: held} = SafeTensors.open(path)
    growth_kib = Bench.RSS.kib() - before
    read = median_ms(fn -> read_all(SafeTensors.open(path).tensors) end)
    _ = map_size(held)

    nx =
      if Code.ensure_loaded?(TensorBlob.Nx) do
        {:ok, _} = Application.ensure_all_started(:nx)

        median_ms(fn ->
          for {k, t} <- SafeTensors.open(path).tensors, into: %{}, do: {k, TensorBlob.Nx.to_nx(t, unsafe_view: true)}
        end)
      end

    info = median_ms(fn -> SafeTensors.info(path) end)
    index = make_sharded(path)
    sharded = median_ms(fn -> SafeTensors.open(index) end)
    sharded_read = median_ms(fn -> read_all(SafeTensors.open(index).tensors) end)
    sharded_info = median_ms(fn -> SafeTensors.info(index) end)

    %{
      file_bytes: File.stat!(path).size,
      tensors: @tensors,
      open_ms: open,
      info_ms: info,
      sharded: %{shards: @shards, open_ms: sharded, open_and_read_every_tensor_ms: sharded_read, info_ms: sharded_info},
      misaligned: misaligned(),
      open_and_read_every_tensor_ms: read,
      open_as_nx_ms: nx,
      rss_growth_kib: growth_kib,
      header_bytes: header,
      pss: pss
    }
  end

  # On a peer (evaluated there: this module is not loaded on it): open the
  # file, read every tensor through a binary over the mapping, and keep the
  # tensors.
  @hold """
  parent = self()

  spawn(fn ->
    %{tensors: ts} = TensorBlob.SafeTensors.open(path)

    Enum.reduce(ts, 0, fn {_, t}, acc ->
      :erlang.crc32(acc, TensorBlob.Tensor.to_binary(t, copy: false, unsafe_shared_memory: true))
    end)

    send(parent, :held)
    Process.sleep(:infinity)
  end)

  receive do
    :held -> :ok
  end
  """

  # Two VMs (peers of this one) open the file and read every tensor, one
  # after the other: the host's PSS the second adds, beside the file's size.
  def pss(path) do
    unless Node.alive?() do
      {_, 0} = System.cmd("epmd", ["-daemon"])
      {:ok, _} = :net_kernel.start([:"st_bench_#{System.pid()}@127.0.0.1", :longnames])
    end

    paths = Enum.flat_map(:code.get_path(), &[~c"-pa", &1])

    peers =
      for _ <- 1..2 do
        {:ok, pid, node} = :peer.start(%{name: :peer.random_name(), host: ~c"127.0.0.1", longnames: true, args: paths})
        {:ok, _} = :erpc.call(node, :application, :ensure_all_started, [:tensor_blob])
        # The library loaded (libtorch mapped) before the count starts.
        _ = :erpc.call(node, :tensor_blob, :stats, [])
        {pid, node, :erpc.call(node, :os, :getpid, []) |> List.to_integer()}
      end

    [{_, a, pid_a}, {_, b, pid_b}] = peers
    load = fn node -> :erpc.call(node, Code, :eval_string, [@hold, [path: path]], 120_000) end
    # The host's total: this VM's PSS too (it holds no tensor of the file
    # now, once collected, but shares the pages of the libraries).
    :erlang.garbage_collect()
    me = String.to_integer(System.pid())
    total = fn -> pss_kib(me) + pss_kib(pid_a) + pss_kib(pid_b) end
    base = total.()
    load.(a)
    one = total.()
    load.(b)
    two = total.()
    for {pid, _, _} <- peers, do: :peer.stop(pid)

    %{
      first_vm_adds_kib: one - base,
      second_vm_adds_kib: two - one,
      second_vm_adds_of_file: (two - one) * 1024 / File.stat!(path).size
    }
  end

  def pss_kib(os_pid) do
    "/proc/#{os_pid}/smaps_rollup"
    |> File.read!()
    |> String.split("\n")
    |> Enum.find_value(fn line ->
      case String.split(line) do
        ["Pss:", kib, "kB"] -> String.to_integer(kib)
        _ -> nil
      end
    end)
  end

  # --compare: elixir-nx's reader (copies: read!; lazy: true then each
  # tensor materialized) and the reference's Python loop.
  def compare(path) do
    ours = ours(path)
    nx_reader = elixir_nx(path)
    reference = python(path)
    %{ours: ours, elixir_nx: nx_reader, reference: reference}
  end

  def elixir_nx(path) do
    with st when is_binary(st) <- System.get_env("SAFETENSORS_SRC"),
         jason when is_binary(jason) <- System.get_env("JASON_SRC") do
      files = Path.wildcard(Path.join(jason, "lib/**/*.ex")) ++ Path.wildcard(Path.join(st, "lib/**/*.ex"))
      {:ok, _, _} = Kernel.ParallelCompiler.compile(files)
      safetensors = Safetensors

      %{
        read_ms: median_ms(fn -> safetensors.read!(path) end),
        lazy_then_each_ms:
          median_ms(fn ->
            for {k, lazy} <- safetensors.read!(path, lazy: true), into: %{}, do: {k, materialize(lazy)}
          end)
      }
    else
      _ -> %{skipped: "SAFETENSORS_SRC and JASON_SRC not set"}
    end
  end

  # Nx.to_tensor/1 of a lazy container, through its Nx.LazyContainer
  # implementation (compiled here after mix consolidated the protocol, so
  # called by its module).
  defp materialize(lazy) do
    impl = Module.concat(Nx.LazyContainer, lazy.__struct__)
    {tensor, nil} = impl.traverse(lazy, nil, fn _template, load, acc -> {load.(), acc} end)
    tensor
  end

  @python """
  import sys, time, statistics
  from safetensors import safe_open
  import safetensors, torch
  path = sys.argv[1]
  def once():
      t0 = time.perf_counter()
      with safe_open(path, framework="pt") as f:
          d = {k: f.get_tensor(k) for k in f.keys()}
      return (time.perf_counter() - t0) * 1000
  once()
  print("%f %s %s" % (statistics.median([once() for _ in range(5)]), safetensors.__version__, torch.__version__))
  """

  def python(path) do
    case System.cmd(System.get_env("PYTHON", "python3"), ["-c", @python, path], stderr_to_stdout: true) do
      {out, 0} ->
        [ms, st, torch] = out |> String.split("\n", trim: true) |> List.last() |> String.split()
        %{safe_open_get_tensor_ms: String.to_float(ms), safetensors: st, torch: torch}

      {out, _} ->
        %{skipped: "python3 with safetensors and torch: " <> String.slice(out, -200, 200)}
    end
  end

  def print(%{ours: o} = all) do
    print(o)
    IO.inspect(Map.delete(all, :ours), label: "compared")
  end

  def print(o) do
    IO.puts(
      "safetensors, #{o.tensors} tensors, #{div(o.file_bytes, 1_048_576)} MiB: open #{fmt(o.open_ms)} ms; " <>
        "open + read every tensor #{fmt(o.open_and_read_every_tensor_ms)} ms; " <>
        if(o.open_as_nx_ms, do: "open as Nx tensors #{fmt(o.open_as_nx_ms)} ms; ", else: "") <>
        "resident growth on open #{o.rss_growth_kib} KiB (header #{o.header_bytes} B); " <>
        "PSS: the first VM adds #{o.pss.first_vm_adds_kib} KiB, the second #{o.pss.second_vm_adds_kib} KiB " <>
        "(#{fmt(100 * o.pss.second_vm_adds_of_file)} % of the file)"
    )

    IO.puts(
      "info/1 (the header alone) #{fmt(o.info_ms)} ms; #{o.sharded.shards} shards by their index: open " <>
        "#{fmt(o.sharded.open_ms)} ms, open + read every tensor #{fmt(o.sharded.open_and_read_every_tensor_ms)} ms, " <>
        "info/1 #{fmt(o.sharded.info_ms)} ms; a misaligned #{div(o.misaligned.tensor_bytes, 1_048_576)} MiB " <>
        "tensor grows the peak by #{fmt(o.misaligned.copied_peak_bytes / 1_048_576)} MiB copied " <>
        "(#{fmt(o.misaligned.copied_peak_bytes / o.misaligned.tensor_bytes)}x its bytes), " <>
        "#{fmt(o.misaligned.refused_peak_bytes / 1_048_576)} MiB refused"
    )
  end

  defp fmt(x), do: :erlang.float_to_binary(x / 1, decimals: 2)
end

unless System.get_env("TB_SAFETENSORS_LIBRARY") do
  Code.require_file("rss.exs", __DIR__)

  case System.argv() do
    ["--compare"] -> SafeTensorsBench.make() |> SafeTensorsBench.compare() |> SafeTensorsBench.print()
    _ -> SafeTensorsBench.ours() |> SafeTensorsBench.print()
  end
end
