# make bench: the cost of exchange, next to a bare NIF call and to copying.
# Prints one table and writes the same figures to _build/bench/results.json
# (BENCH_RESULTS names another file: bench/results.json is the recorded run).
Code.require_file("nif/tensor_blob_bench_nif.ex", __DIR__)
Code.require_file("scaling.exs", __DIR__)
Code.require_file("rss.exs", __DIR__)
System.put_env("TB_NODES_LIBRARY", "1")
Code.require_file("nodes.exs", __DIR__)
System.put_env("TB_SAFETENSORS_LIBRARY", "1")
Code.require_file("safetensors.exs", __DIR__)

defmodule Bench do
  alias TensorBlob.Tensor

  @sizes [
    {"4 B", 4},
    {"1 KiB", 1024},
    {"4 MiB", 4 * 1024 * 1024},
    {"256 MiB", 256 * 1024 * 1024},
    {"1 GiB", 1024 * 1024 * 1024}
  ]

  # Times fun over many batches, in a process of its own (as a caller's
  # would be: a fresh heap, nothing left by earlier measurements); returns
  # per-call median and p99 in ns.
  def measure(fun, opts \\ []) do
    parent = self()
    {pid, monitor} = spawn_monitor(fn -> send(parent, {self(), measure_here(fun, opts)}) end)

    receive do
      {^pid, result} ->
        Process.demonitor(monitor, [:flush])
        result

      {:DOWN, ^monitor, :process, ^pid, reason} ->
        raise "measure: the measuring process exited: #{inspect(reason)}"
    end
  end

  defp measure_here(fun, opts) do
    Keyword.get(opts, :setup, fn -> :ok end).()
    batch = Keyword.get(opts, :batch, 1000)
    batches = Keyword.get(opts, :batches, 200)
    for _ <- 1..max(div(batches, 10), 1), do: run_batch(fun, batch)
    samples = for(_ <- 1..batches, do: run_batch(fun, batch) / batch) |> Enum.sort()
    %{median_ns: percentile(samples, 0.5), p99_ns: percentile(samples, 0.99)}
  end

  defp run_batch(fun, n) do
    t0 = :erlang.monotonic_time(:nanosecond)
    loop(fun, n)
    :erlang.monotonic_time(:nanosecond) - t0
  end

  defp loop(_fun, 0), do: :ok

  defp loop(fun, n) do
    fun.()
    loop(fun, n - 1)
  end

  defp percentile(sorted, p), do: Enum.at(sorted, min(round(p * (length(sorted) - 1)), length(sorted) - 1))

  def tensor_of(bytes), do: Tensor.zeros({div(bytes, 4)}, :float32)

  # A blob as a plain map with owner: :none, for an unpinned view.
  defp unpinned(blob), do: blob |> Map.delete(:__struct__) |> Map.put(:owner, :none)

  # "own blob": a tensor's blob as it is, which from_blob answers with the
  # tensor itself. "new view": the same memory as another dtype of the same
  # width, which makes a tensor sharing the owner's storage (what PyTorch's
  # from_dlpack makes). "term owner": a view pinning a term (an env copy).
  def operations(t) do
    blob = TensorBlob.to_blob(t)
    as_int32 = %{blob | dtype: :int32}
    bare = unpinned(blob)
    bin = Tensor.to_binary(t, copy: false)
    shape = Tensor.shape(t)

    [
      {"to_blob", fn -> TensorBlob.to_blob(t) end},
      {"from_blob, own blob", fn -> TensorBlob.from_blob(blob) end},
      {"from_blob, new view", fn -> TensorBlob.from_blob(as_int32) end},
      {"from_blob, term owner", fn -> TensorBlob.from_blob(blob, owner: {:keep, t}) end},
      {"from_blob unpinned", fn -> TensorBlob.from_blob(bare) end},
      {"to_blob + from_blob", fn -> TensorBlob.from_blob(TensorBlob.to_blob(t)) end},
      {"to_blob + from_blob, new view", fn -> TensorBlob.from_blob(%{TensorBlob.to_blob(t) | dtype: :int32}) end},
      {"DLPack export + import", fn -> TensorBlob.DLPack.import(TensorBlob.DLPack.export(t)) end},
      {"DLPack through an address",
       fn -> t |> TensorBlob.DLPack.export() |> TensorBlob.DLPack.consume() |> TensorBlob.DLPack.import() end},
      {"to_binary copy: false", fn -> Tensor.to_binary(t, copy: false) end},
      # A binary counts its size against its process's binary heap: one of
      # 1 GiB makes the VM collect the caller after every call. The same
      # call from a process whose binary heap may grow (min_bin_vheap_size)
      # shows the exchange without that collection.
      {"to_binary copy: false, no collection per call", fn -> Tensor.to_binary(t, copy: false) end,
       [setup: fn -> Process.flag(:min_bin_vheap_size, Bitwise.bsl(1, 40)) end]},
      {"from_binary copy: false", fn -> Tensor.from_binary(bin, :float32, shape, copy: false) end}
    ]
    |> Enum.map(fn
      {name, fun} -> {name, fun, []}
      op -> op
    end)
  end

  # make bench's flatness alone (mix run bench/bench.exs --flatness [runs]):
  # every operation at 4 B and at 1 GiB, `runs` times; each run's ratio.
  def flatness_only(runs) do
    sizes = [hd(@sizes), List.last(@sizes)]

    ratios =
      for _ <- 1..runs do
        rows =
          for {label, bytes} <- sizes do
            t = tensor_of(bytes)
            ops = for {name, fun, opts} <- operations(t), do: {name, measure(fun, opts)}
            t = nil
            _ = t
            collect()
            {label, bytes, ops}
          end

        flatness(rows)
      end

    IO.puts("Flatness (1 GiB median / 4 B median; goal <= 1.1), each of #{runs} runs, the best last:")

    for {name, _} <- hd(ratios) do
      all = for run <- ratios, do: run |> List.keyfind(name, 0) |> elem(1)
      cells = Enum.map_join(all, " ", &fmt(&1, 2))
      IO.puts("  #{String.pad_trailing(name, 46)} #{cells}  best #{fmt(Enum.min(all), 2)}")
    end
  end

  def baselines(t, bytes) do
    big? = bytes >= 4 * 1024 * 1024
    copy_opts = if big?, do: [batch: 1, batches: if(bytes >= 256 * 1024 * 1024, do: 3, else: 20)], else: []
    ptr = TensorBlob.to_blob(t).ptr

    [
      {"bare NIF call", fn -> :tensor_blob_bench_nif.identity(t) end, []},
      # A NIF returning a new, empty resource: the floor of any call that
      # makes a tensor (allocation, collection and the VM's destructor run).
      {"bare NIF making a resource", fn -> :tensor_blob_bench_nif.bare_resource() end, []},
      {"Elixir map like a Blob",
       fn ->
         %{
           ptr: ptr,
           shape: {1},
           strides: [1],
           dtype: :float32,
           device: :cpu,
           element_size: 4,
           byte_size: bytes,
           owner: t
         }
       end, []},
      {"copy: to_binary + from_binary", fn -> Tensor.from_binary(Tensor.to_binary(t), :float32, {div(bytes, 4)}) end,
       copy_opts}
    ]
  end

  # The C bridge (priv/include/tensor_blob.h), from a consumer NIF of the
  # bench library (bench/nif): exports and deleters in a tight C loop (of a
  # %TensorBlob.Tensor{} and of its resource), and take + release from the
  # BEAM beside two bare calls of the same library; at 4 B and 1 GiB. With
  # them, the parts of an export alone in a C loop (floors/2): what the
  # VM's API and the machine cost whoever does the work. Three rounds; each ratio is taken within its round,
  # and the best round's is kept (the machine may be busy).
  def bridge(rounds \\ 3) do
    for {label, bytes} <- [hd(@sizes), List.last(@sizes)] do
      t = tensor_of(bytes)

      runs =
        for _ <- 1..rounds do
          c_loop = bridge_c_loop(t)
          # The Erlang API's term: the resource itself, no struct to open.
          c_loop_resource = bridge_c_loop(Tensor.ref(t))

          beam = measure(fn -> :tensor_blob_bench_nif.release(:tensor_blob_bench_nif.take(t)) end).median_ns

          bare = measure(fn -> :tensor_blob_bench_nif.identity(:tensor_blob_bench_nif.identity(t)) end).median_ns
          floors = :tensor_blob_bench_nif.floors(t, 100_000)

          %{
            c_loop_ns: c_loop,
            c_loop_resource_ns: c_loop_resource,
            take_release_ns: beam,
            two_bare_calls_ns: bare,
            ratio_to_bare: beam / bare,
            floors: floors
          }
        end

      t = nil
      _ = t
      collect()

      %{
        size: label,
        c_loop_ns: runs |> Enum.map(& &1.c_loop_ns) |> Enum.min(),
        c_loop_resource_ns: runs |> Enum.map(& &1.c_loop_resource_ns) |> Enum.min(),
        # Each part's least over the rounds.
        floors: Map.new(hd(runs).floors, fn {k, _} -> {k, runs |> Enum.map(& &1.floors[k]) |> Enum.min()} end),
        take_release_ns: runs |> Enum.map(& &1.take_release_ns) |> Enum.min(),
        two_bare_calls_ns: runs |> Enum.map(& &1.two_bare_calls_ns) |> Enum.min(),
        ratio_to_bare: runs |> Enum.map(& &1.ratio_to_bare) |> Enum.min()
      }
    end
  end

  # Median ns of one export and its deleter, over batches of 1000 in C.
  defp bridge_c_loop(t) do
    n = 1000
    for _ <- 1..20, do: :tensor_blob_bench_nif.bridge_loop(t, n)
    samples = for(_ <- 1..200, do: :tensor_blob_bench_nif.bridge_loop(t, n) / n) |> Enum.sort()
    percentile(samples, 0.5)
  end

  # from_blob(to_blob(t)) beside PyTorch's DLPack round trip, each the best
  # of 3 in one run; DLPack export + import with them.
  def round_trips(rounds \\ 3) do
    t = tensor_of(4)
    best = fn f -> Enum.min(for _ <- 1..rounds, do: measure(f).median_ns) end
    rt = best.(fn -> TensorBlob.from_blob(TensorBlob.to_blob(t)) end)
    dl = best.(fn -> TensorBlob.DLPack.import(TensorBlob.DLPack.export(t)) end)
    py = for _ <- 1..rounds, do: python_dlpack()

    case Enum.reject(py, & &1[:skipped]) do
      [] ->
        %{round_trip_ns: rt, dlpack_ns: dl, skipped: hd(py).skipped}

      done ->
        p = done |> Enum.map(& &1.median_ns) |> Enum.min()
        %{round_trip_ns: rt, dlpack_ns: dl, python_ns: p, torch: hd(done).torch, speedup: p / rt}
    end
  end

  def print_bridge(bridge, rt) do
    IO.puts("\nC bridge (priv/include/tensor_blob.h) from the bench library's consumer NIF, best of 3:")

    for b <- bridge do
      IO.puts(
        "  #{String.pad_trailing(b.size, 6)} C loop #{fmt(b.c_loop_ns, 1)} ns per export + deleter (goal <= 100), " <>
          "#{fmt(b.c_loop_resource_ns, 1)} ns given the resource; " <>
          "take + release from the BEAM #{fmt(b.take_release_ns, 0)} ns, two bare calls " <>
          "#{fmt(b.two_bare_calls_ns, 0)} ns: #{fmt(b.ratio_to_bare, 2)}x (goal <= 2)"
      )
    end

    f = hd(bridge).floors

    IO.puts(
      "  Its parts alone, ns per round in a C loop: the struct's fields #{fmt(f.struct_fields, 1)}, " <>
        "enif_get_resource #{fmt(f.get_resource, 1)}, malloc + free #{fmt(f.malloc_free, 1)}, " <>
        "an atomic add + subtract (a reference) #{fmt(f.atomic_add_pair, 1)}, " <>
        "two compare-and-swaps (an address handed out and taken) #{fmt(f.cas_pair, 1)}"
    )

    IO.puts(
      "Round trip from_blob(to_blob(t)), 4 B: #{fmt(rt.round_trip_ns, 0)} ns; DLPack export + import " <>
        "#{fmt(rt.dlpack_ns, 0)} ns; " <>
        if(rt[:skipped],
          do: "PyTorch: skipped (#{rt.skipped})",
          else:
            "PyTorch #{rt.torch} from_dlpack(to_dlpack(x)) #{fmt(rt.python_ns, 0)} ns: " <>
              "#{fmt(rt.speedup, 2)}x faster (goal >= 3)"
        )
    )
  end

  def collect do
    for pid <- Process.list(), do: :erlang.garbage_collect(pid)
    Process.sleep(100)
  end

  # 10,000 new views of one 1 GiB tensor (sharing its storage): RSS growth, then after dropping.
  def memory(t) do
    collect()
    before = Bench.RSS.kib()
    blob = %{TensorBlob.to_blob(t) | dtype: :int32}
    views = for _ <- 1..10_000, do: TensorBlob.from_blob(blob).tensor
    held = Bench.RSS.kib()
    pins = TensorBlob.stats().pins
    _ = length(views)
    views = nil
    _ = views
    collect()
    after_drop = Bench.RSS.kib()

    %{
      rss_before_kib: before,
      rss_with_views_kib: held,
      rss_after_drop_kib: after_drop,
      growth_kib: held - before,
      # What dropping the views gave back: their own memory. Read beside the
      # growth, since a kernel that reclaims idle pages (DAMON) may take
      # some of the untouched 1 GiB tensor's during the measurement.
      views_kib: held - after_drop,
      pins_held: pins,
      pins_after: TensorBlob.stats().pins
    }
  end

  # CPU exchange that could ask the CUDA runtime where memory lives: a view
  # whose owner proves it (no question) and an unpinned one (the runtime is
  # asked wherever a device answers). Run here, and in a child VM with the
  # GPU hidden, they show what a GPU machine adds to CPU from_blob.
  def cpu_views do
    t = tensor_of(4)
    blob = TensorBlob.to_blob(t)
    bare = unpinned(blob)

    %{
      devices: TensorBlob.CUDA.device_count(),
      new_view_ns: measure(fn -> TensorBlob.from_blob(%{blob | dtype: :int32}) end).median_ns,
      unpinned_ns: measure(fn -> TensorBlob.from_blob(bare) end).median_ns
    }
  end

  # The same measurement in child VMs, with the GPU visible and hidden
  # (CUDA_VISIBLE_DEVICES=-1), alternating, three of each; the best of each.
  defp cpu_views_visible_and_hidden do
    runs = for _ <- 1..3, hidden <- [false, true], do: {hidden, cpu_views_in_child(hidden)}

    for hidden <- [false, true], into: %{} do
      mine = for {^hidden, m} <- runs, do: m
      key = if hidden, do: :gpu_hidden, else: :gpu_visible

      case Enum.reject(mine, &Map.has_key?(&1, :skipped)) do
        [] ->
          {key, hd(mine)}

        ok ->
          {key,
           %{
             devices: hd(ok).devices,
             new_view_ns: ok |> Enum.map(& &1.new_view_ns) |> Enum.min(),
             unpinned_ns: ok |> Enum.map(& &1.unpinned_ns) |> Enum.min()
           }}
      end
    end
  end

  defp cpu_views_in_child(hidden) do
    mix = System.find_executable("mix")
    root = Path.expand("..", __DIR__)
    # -1 names no device; an empty value would unset the variable (open_port).
    env = if hidden, do: [{"CUDA_VISIBLE_DEVICES", "-1"}], else: []

    case System.cmd(mix, ["run", "bench/bench.exs", "--cpu-views"], cd: root, env: env, stderr_to_stdout: true) do
      {out, 0} ->
        case Regex.run(~r/cpu_views (\d+) ([\d.]+) ([\d.]+)/, out) do
          [_, devices, view, bare] ->
            %{
              devices: String.to_integer(devices),
              new_view_ns: String.to_float(view),
              unpinned_ns: String.to_float(bare)
            }

          _ ->
            %{skipped: "the child VM printed no measurement"}
        end

      {out, status} ->
        %{skipped: "the child VM exited #{status}: #{String.slice(out, -300, 300)}"}
    end
  end

  # Exchange of CUDA tensors (device 0), and the copies across the bus.
  def cuda do
    g = Tensor.to_device(tensor_of(4), {:cuda, 0})
    blob = TensorBlob.to_blob(g)
    bare = unpinned(blob)
    small_host = Tensor.to_binary(tensor_of(4))

    exchange =
      for {name, fun} <- [
            {"to_blob", fn -> TensorBlob.to_blob(g) end},
            {"from_blob, own blob", fn -> TensorBlob.from_blob(blob) end},
            {"from_blob, new view", fn -> TensorBlob.from_blob(%{blob | dtype: :int32}) end},
            {"from_blob unpinned (asks the runtime)", fn -> TensorBlob.from_blob(bare) end},
            {"DLPack export + import", fn -> TensorBlob.DLPack.import(TensorBlob.DLPack.export(g)) end},
            {"IPC.export (cudaIpcGetMemHandle)", fn -> TensorBlob.IPC.export(g) end},
            {"to_binary, 4 B (device to host)", fn -> Tensor.to_binary(g) end},
            {"write!, 4 B (host to device)", fn -> Tensor.write!(g, small_host) end}
          ],
          do: {name, measure(fun, batch: 100, batches: 100)}

    bytes = 256 * 1024 * 1024
    host = tensor_of(bytes)
    payload = Tensor.to_binary(host)
    dev = Tensor.to_device(host, {:cuda, 0})
    once = [batch: 1, batches: 5]

    copies =
      for {name, fun} <- [
            {"to_device, host to device", fn -> Tensor.to_device(host, {:cuda, 0}) end},
            {"to_device, device to host", fn -> Tensor.to_device(dev, :cpu) end},
            {"to_binary (device to host)", fn -> Tensor.to_binary(dev) end},
            {"write! (host to device)", fn -> Tensor.write!(dev, payload) end}
          ] do
        m = measure(fun, once)
        {name, Map.put(m, :gb_per_s, bytes / m.median_ns)}
      end

    %{
      runtime: TensorBlob.CUDA.runtime()[:runtime_path],
      exchange: Map.new(exchange),
      exchange_order: Enum.map(exchange, &elem(&1, 0)),
      copies_256_mib: Map.new(copies),
      copies_order: Enum.map(copies, &elem(&1, 0)),
      cpu_views: cpu_views_visible_and_hidden()
    }
  end

  defp print_cuda(%{skipped: why}), do: IO.puts("CUDA: skipped (#{why})")

  defp print_cuda(c) do
    IO.puts("\nCUDA, device 0 (runtime #{c.runtime}); median ns / p99 ns:")

    for name <- c.exchange_order do
      m = c.exchange[name]
      IO.puts("  #{String.pad_trailing(name, 40)} #{fmt(m.median_ns, 0)} / #{fmt(m.p99_ns, 0)}")
    end

    case c.python_cuda_ns do
      nil ->
        :ok

      ns ->
        dl = c.exchange["DLPack export + import"].median_ns

        IO.puts(
          "  PyTorch's torch.utils.dlpack round trip of a CUDA tensor: #{fmt(ns, 0)} ns; " <>
            "DLPack export + import here is #{fmt(ns / dl, 2)}x faster"
        )
    end

    IO.puts("  256 MiB copies (median of 5):")

    for name <- c.copies_order do
      m = c.copies_256_mib[name]
      IO.puts("    #{String.pad_trailing(name, 38)} #{fmt(m.median_ns / 1.0e6, 1)} ms, #{fmt(m.gb_per_s, 1)} GB/s")
    end

    case c.python_256_mib do
      %{to_host_ns: d2h, from_host_ns: h2d} when is_integer(d2h) ->
        bytes = 256 * 1024 * 1024

        IO.puts(
          "    PyTorch's x.cpu() #{fmt(d2h / 1.0e6, 1)} ms (#{fmt(bytes / d2h, 1)} GB/s), " <>
            "x.copy_(host) #{fmt(h2d / 1.0e6, 1)} ms (#{fmt(bytes / h2d, 1)} GB/s)"
        )

      _ ->
        :ok
    end

    %{gpu_visible: here, gpu_hidden: hidden} = c.cpu_views

    IO.puts(
      "  CPU from_blob, 4 B, GPU visible / hidden (CUDA_VISIBLE_DEVICES=-1: #{cell(hidden, :devices)} devices), " <>
        "best of 3 child VMs each: new view " <>
        "#{cell(here, :new_view_ns)} / #{cell(hidden, :new_view_ns)} ns (the owner proves the device: " <>
        "no question), unpinned #{cell(here, :unpinned_ns)} / #{cell(hidden, :unpinned_ns)} ns " <>
        "(cudaPointerGetAttributes where a device answers)"
    )
  end

  defp cell(%{skipped: why}, _), do: "skipped: #{why}"
  defp cell(m, key), do: fmt(Map.fetch!(m, key), 0)

  def cuda_or_skip do
    cond do
      not TensorBlob.CUDA.runtime().libtorch -> %{skipped: "this libtorch was built without CUDA"}
      TensorBlob.CUDA.device_count() == 0 -> %{skipped: "no CUDA device answers here"}
      true -> cuda()
    end
  end

  # Debian's python3 first: python3-torch installs there, whatever else is on PATH.
  # TensorBlob.Nx from_nx + to_nx with Nx's BinaryBackend, where Nx is built
  # in (make bench gives NX_PATH; Nx's version is in the result).
  def nx_round_trip do
    if Code.ensure_loaded?(TensorBlob.Nx) do
      nx = Nx.tensor([1.0], type: {:f, 32}, backend: Nx.BinaryBackend)
      fun = fn -> TensorBlob.Nx.to_nx(TensorBlob.Nx.from_nx(nx), Nx.BinaryBackend) end
      _ = Application.load(:nx)
      # Five measurements, the best reported as the size columns' best cell is.
      runs = for _ <- 1..5, do: measure(fun)
      best = Enum.min_by(runs, & &1.median_ns)
      Map.merge(best, %{nx: to_string(Application.spec(:nx, :vsn)), medians_ns: Enum.map(runs, & &1.median_ns)})
    else
      %{skipped: "TensorBlob.Nx not compiled (no NX_PATH)"}
    end
  end

  def python_dlpack do
    python =
      Enum.find(["/usr/bin/python3", System.find_executable("python3")], fn p ->
        p != nil and match?({_, 0}, System.cmd(p, ["-c", "import torch"], stderr_to_stdout: true))
      end)

    # The same round trip of a CUDA tensor where PyTorch sees a GPU.
    script = """
    import time, torch, torch.utils.dlpack as d
    def median_p99(t):
        for _ in range(20000): d.from_dlpack(d.to_dlpack(t))
        s = []
        for _ in range(200):
            t0 = time.perf_counter_ns()
            for _ in range(1000): d.from_dlpack(d.to_dlpack(t))
            s.append((time.perf_counter_ns() - t0) / 1000)
        s.sort(); return s[100], s[198]
    m, p = median_p99(torch.zeros(1))
    c, d2h, h2d = "none", "none", "none"
    if torch.cuda.is_available():
        c = median_p99(torch.zeros(1, device="cuda"))[0]
        def median5(f):
            f(); s = []
            for _ in range(5):
                torch.cuda.synchronize(); t0 = time.perf_counter_ns(); f(); s.append(time.perf_counter_ns() - t0)
            return sorted(s)[2]
        x = torch.zeros(64 * 1024 * 1024, device="cuda"); h = torch.zeros(64 * 1024 * 1024)
        d2h = median5(lambda: x.cpu()); h2d = median5(lambda: x.copy_(h))
    print(m, p, torch.__version__, c, d2h, h2d)
    """

    with true <- python != nil,
         {out, 0} <- System.cmd(python, ["-c", script], stderr_to_stdout: true),
         [median, p99, version, cuda, d2h, h2d] <- String.split(out) do
      %{median_ns: String.to_float(median), p99_ns: String.to_float(p99), torch: version, python: python}
      |> Map.merge(
        if cuda == "none",
          do: %{},
          else: %{
            cuda_median_ns: String.to_float(cuda),
            cuda_256_mib_to_host_ns: String.to_integer(d2h),
            cuda_256_mib_from_host_ns: String.to_integer(h2d)
          }
      )
    else
      _ -> %{skipped: "no python3 with torch (Debian's python3-torch) on this machine"}
    end
  end

  def run do
    IO.puts(
      "tensor_blob bench: libtorch #{TensorBlob.torch_version()}, OTP #{System.otp_release()}, " <>
        "#{System.schedulers_online()} schedulers, #{cpu_model()}\n"
    )

    # Start collected: nothing left over is freed during a measurement.
    collect()

    # The small measurements first, before the gigabyte tensors below: the
    # kernel reclaiming their pages disturbs whatever runs right after.
    nx = nx_round_trip()
    py = python_dlpack()
    round_trips = round_trips()
    bridge = bridge()

    rows =
      for {label, bytes} <- @sizes do
        t = tensor_of(bytes)
        ops = for {name, fun, opts} <- operations(t), do: {name, measure(fun, opts)}
        base = for {name, fun, opts} <- baselines(t, bytes), do: {name, measure(fun, opts)}
        IO.write(:stderr, "  measured #{label}\n")
        t = nil
        _ = t
        collect()
        {label, bytes, ops ++ base}
      end

    print_table(rows)
    best = best_cells(rows)

    IO.puts(
      "\nBest cell (the least median across the sizes: exchange is O(1), so it is the least disturbed by a busy machine):"
    )

    for {name, ns} <- best, do: IO.puts("  #{String.pad_trailing(name, 30)} #{fmt(ns, 0)} ns")
    flat = flatness(rows)
    IO.puts("\nFlatness (1 GiB median / 4 B median; goal <= 1.1):")
    for {name, r} <- flat, do: IO.puts("  #{String.pad_trailing(name, 46)} #{fmt(r, 2)}")

    big = tensor_of(1024 * 1024 * 1024)
    mem = memory(big)

    IO.puts(
      "\nMemory: 10,000 views of one 1 GiB tensor (sharing its storage): RSS +#{mem.growth_kib} KiB " <>
        "(goal < 10240), #{mem.views_kib} KiB given back when they are dropped; after dropping: " <>
        "#{mem.rss_after_drop_kib - mem.rss_before_kib} KiB from start, " <>
        "pins #{mem.pins_held} -> #{mem.pins_after}"
    )

    scaling = Bench.Scaling.operations_table()
    mixed = Bench.Scaling.mixed_table()
    crowd = with_binary_views(100_000)
    collect()

    IO.puts(
      "With 100,000 binary views alive (from_binary copy: false): from_blob, own blob " <>
        "#{fmt(crowd.from_blob_ns, 0)} ns, write! #{fmt(crowd.write_ns, 0)} ns " <>
        "(with none: #{fmt(crowd.from_blob_alone_ns, 0)} and #{fmt(crowd.write_alone_ns, 0)} ns); " <>
        "write! with 100,000 more binaries showing tensors (to_binary copy: false) " <>
        "#{fmt(crowd.write_with_tensor_binaries_ns, 0)} ns"
    )

    print_bridge(bridge, round_trips)
    Bench.Scaling.print(scaling, mixed)
    nodes = NodesBench.floors(256, 5)
    NodesBench.print_floors(nodes)
    safetensors = SafeTensorsBench.ours()
    SafeTensorsBench.print(safetensors)

    IO.puts(
      "TensorBlob.Nx from_nx + to_nx, BinaryBackend, 4 B: " <>
        if(nx[:skipped],
          do: "skipped (#{nx.skipped})",
          else: "#{fmt(nx.median_ns, 0)} ns median, the best of 5 measurements (Nx #{nx.nx})"
        )
    )

    py =
      if py[:skipped] do
        IO.puts("Python torch.utils.dlpack round trip: skipped (#{py.skipped})")
        py
      else
        small = rows |> hd() |> elem(2) |> Map.new()
        rt = small["to_blob + from_blob"].median_ns
        rt_view = small["to_blob + from_blob, new view"].median_ns
        dl = small["DLPack export + import"].median_ns

        IO.puts(
          "Python torch.utils.dlpack round trip (PyTorch #{py.torch}): #{fmt(py.median_ns, 0)} ns median; " <>
            "to_blob + from_blob is #{fmt(py.median_ns / rt, 2)}x faster (#{fmt(py.median_ns / rt_view, 2)}x " <>
            "with a new view), DLPack export + import #{fmt(py.median_ns / dl, 2)}x (goal >= 1.5)"
        )

        Map.merge(py, %{
          speedup_blob_round_trip: py.median_ns / rt,
          speedup_blob_round_trip_new_view: py.median_ns / rt_view,
          speedup_dlpack_round_trip: py.median_ns / dl
        })
      end

    cuda =
      cuda_or_skip()
      |> Map.merge(%{
        python_cuda_ns: py[:cuda_median_ns],
        python_256_mib: %{to_host_ns: py[:cuda_256_mib_to_host_ns], from_host_ns: py[:cuda_256_mib_from_host_ns]}
      })

    print_cuda(cuda)

    results = %{
      machine: %{
        cpu: cpu_model(),
        schedulers: System.schedulers_online(),
        otp: System.otp_release(),
        libtorch: TensorBlob.torch_version()
      },
      operations:
        for {label, bytes, ms} <- rows do
          %{size: label, bytes: bytes, results: for({name, m} <- ms, into: %{}, do: {name, m})}
        end,
      best_median_ns: Map.new(best),
      flatness: Map.new(flat),
      memory: mem,
      scaling: Bench.Scaling.to_json(scaling, mixed),
      with_binary_views: crowd,
      nodes: nodes,
      safetensors: safetensors,
      python_dlpack: py,
      bridge: bridge,
      round_trips: round_trips,
      nx_round_trip: nx,
      cuda: cuda
    }

    # A run leaves the checkout as it was: the recorded run, bench/results.json,
    # changes only when asked (BENCH_RESULTS=bench/results.json).
    path = System.get_env("BENCH_RESULTS", "_build/bench/results.json")
    File.mkdir_p!(Path.dirname(path))
    File.write!(path, Bench.JSON.encode(results) <> "\n")
    IO.puts("Wrote #{path}")
  end

  defp print_table(rows) do
    names = rows |> hd() |> elem(2) |> Enum.map(&elem(&1, 0))
    bare = for {label, _, ms} <- rows, into: %{}, do: {label, ms |> List.keyfind("bare NIF call", 0) |> elem(1)}
    header = ["operation (median ns / p99 ns, x bare NIF)" | Enum.map(rows, &elem(&1, 0))]
    IO.puts(Enum.map_join(header, " | ", &String.pad_trailing(&1, 26)))

    for name <- names do
      cells =
        for {label, _, ms} <- rows do
          m = ms |> List.keyfind(name, 0) |> elem(1)
          "#{fmt(m.median_ns, 0)} / #{fmt(m.p99_ns, 0)} (x#{fmt(m.median_ns / bare[label].median_ns, 1)})"
        end

      IO.puts(Enum.map_join([name | cells], " | ", &String.pad_trailing(&1, 26)))
    end
  end

  defp best_cells(rows) do
    {_, _, small} = hd(rows)

    for {name, _} <- small, name != "copy: to_binary + from_binary" do
      {name, rows |> Enum.map(fn {_, _, ms} -> elem(List.keyfind(ms, name, 0), 1).median_ns end) |> Enum.min()}
    end
  end

  # Every from_blob and write! asks whether the memory overlaps a binary's
  # bytes: with many binaries viewed, that question must stay cheap.
  defp with_binary_views(n) do
    t = Tensor.zeros({1}, :float32)
    blob = TensorBlob.to_blob(t)
    from_blob = fn -> TensorBlob.from_blob(blob) end
    write = fn -> Tensor.write!(t, <<1.0::float-32-native>>) end
    alone = {measure(from_blob), measure(write)}
    payload = :binary.copy(<<0>>, 4096)
    views = for _ <- 1..n, do: Tensor.from_binary(payload, :float32, {1024}, copy: false)
    crowded = {measure(from_blob), measure(write)}
    _ = length(views)
    # Binaries showing tensors' memory: every write! asks about them too.
    shown = for _ <- 1..n, do: Tensor.to_binary(Tensor.zeros({4}, :float32), copy: false)
    write_shown = measure(write)
    _ = length(shown)

    %{
      binary_views: n,
      from_blob_alone_ns: elem(alone, 0).median_ns,
      write_alone_ns: elem(alone, 1).median_ns,
      from_blob_ns: elem(crowded, 0).median_ns,
      write_ns: elem(crowded, 1).median_ns,
      write_with_tensor_binaries_ns: write_shown.median_ns
    }
  end

  defp flatness(rows) do
    {_, _, small} = hd(rows)
    {_, _, large} = List.last(rows)

    for {name, m} <- small, name != "copy: to_binary + from_binary" do
      {name, elem(List.keyfind(large, name, 0), 1).median_ns / m.median_ns}
    end
  end

  defp fmt(x, 0), do: x |> round() |> Integer.to_string()
  defp fmt(x, d), do: :erlang.float_to_binary(x / 1, decimals: d)

  defp cpu_model do
    case File.read("/proc/cpuinfo") do
      {:ok, info} ->
        case Regex.run(~r/model name\s*:\s*(.+)/, info) do
          [_, name] -> String.trim(name)
          _ -> "unknown CPU"
        end

      _ ->
        "unknown CPU"
    end
  end
end

defmodule Bench.JSON do
  # Just enough JSON for the results: maps, lists, strings, numbers, atoms.
  def encode(m) when is_map(m) do
    "{" <> Enum.map_join(m, ",", fn {k, v} -> encode(to_string(k)) <> ":" <> encode(v) end) <> "}"
  end

  def encode(l) when is_list(l), do: "[" <> Enum.map_join(l, ",", &encode/1) <> "]"
  def encode(b) when is_binary(b), do: inspect(b, printable_limit: :infinity)
  def encode(n) when is_integer(n), do: Integer.to_string(n)
  def encode(f) when is_float(f), do: :erlang.float_to_binary(f, [:compact, decimals: 3])
  def encode(b) when is_boolean(b), do: to_string(b)
  def encode(nil), do: "null"
  def encode(a) when is_atom(a), do: encode(Atom.to_string(a))
end

case System.argv() do
  ["--flatness" | runs] ->
    Bench.flatness_only(String.to_integer(List.first(runs, "3")))

  # The baselines alone at 4 B (mix run bench/bench.exs --baselines): the
  # bench library's bare calls beside a map and a copy, in a second.
  ["--baselines"] ->
    t = Bench.tensor_of(4)

    for {name, fun, opts} <- Bench.baselines(t, 4) do
      %{median_ns: median, p99_ns: p99} = Bench.measure(fun, opts)
      IO.puts("#{String.pad_trailing(name, 32)} median #{Float.round(median, 1)} ns, p99 #{Float.round(p99, 1)} ns")
    end

  # The bridge and the round trips alone (mix run bench/bench.exs --bridge),
  # with their scaling at 1 and 2 schedulers.
  ["--bridge"] ->
    Bench.print_bridge(Bench.bridge(), Bench.round_trips())
    Bench.Scaling.print(Bench.Scaling.operations_table(300, 3, "ridge"), nil)

  # The child VMs of Bench.cpu_views_visible_and_hidden/0.
  ["--cpu-views"] ->
    m = Bench.cpu_views()
    IO.puts("cpu_views #{m.devices} #{m.new_view_ns / 1} #{m.unpinned_ns / 1}")

  _ ->
    Bench.run()
end
