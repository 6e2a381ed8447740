# Throughput of every exchange operation with 1, 2 (and, where there are
# more, all) busy schedulers: one process per scheduler, each with its own
# tensor, running for a fixed time; and the mixed loop of many processes at
# once. `TB_SCALING_STANDALONE=1 mix run bench/scaling.exs` prints it
# alone (TB_SCALING_ONLY=text: only the operations whose names hold it, and
# no mixed loop); bench.exs includes it.
Code.require_file("nif/tensor_blob_bench_nif.ex", __DIR__)

defmodule Bench.Scaling do
  alias TensorBlob.{DLPack, Tensor}

  # Each operation is made from a fresh tensor of the process that runs it,
  # so no two processes share memory (the case that must scale).
  def operations do
    [
      {"to_blob", fn t -> fn -> TensorBlob.to_blob(t) end end},
      {"from_blob, own blob", fn t -> (b = TensorBlob.to_blob(t)) && fn -> TensorBlob.from_blob(b) end end},
      {"from_blob, new view",
       fn t -> (b = %{TensorBlob.to_blob(t) | dtype: :int32}) && fn -> TensorBlob.from_blob(b) end end},
      {"from_blob, term owner",
       fn t -> (b = TensorBlob.to_blob(t)) && fn -> TensorBlob.from_blob(b, owner: {:keep, t}) end end},
      {"DLPack export + import", fn t -> fn -> DLPack.import(DLPack.export(t)) end end},
      # Every release through the release thread's queue (shared by all
      # schedulers), as from_python's are.
      {"DLPack, deferred release", fn t -> fn -> DLPack.import(DLPack.export(t), defer_release: true) end end},
      # The slot table Python exchanges cross (shared by all schedulers):
      # an export put in the lowest free slot, then released on close.
      {"Python slot, export + close",
       fn t ->
         fn ->
           {_k, slot} = :tensor_blob_python.python_slot_export(Tensor.ref(t), :legacy)
           :tensor_blob_python.python_slot_close(slot)
         end
       end},
      {"DLPack through an address", fn t -> fn -> t |> DLPack.export() |> DLPack.consume() |> DLPack.import() end end},
      {"to_binary copy: false", fn t -> fn -> Tensor.to_binary(t, copy: false) end end},
      {"from_binary copy: false",
       fn t ->
         bin = Tensor.to_binary(t)
         fn -> Tensor.from_binary(bin, :float32, {16}, copy: false) end
       end},
      # The C bridge from another library's NIF: a C loop of 100 exports
      # and deleters per call, and take + release as two calls.
      {"bridge, C loop of 100", fn t -> fn -> :tensor_blob_bench_nif.bridge_loop(t, 100) end end},
      {"bridge, take + release", fn t -> fn -> :tensor_blob_bench_nif.release(:tensor_blob_bench_nif.take(t)) end end},
      {"bare NIF making a resource", fn _t -> fn -> :tensor_blob_bench_nif.bare_resource() end end}
    ]
  end

  # Operations per second of `workers` processes, each running the function
  # that make.(own tensor) returns for ms milliseconds.
  def rate(make, workers, ms) do
    parent = self()
    # The first call may load the library: not on the clock.
    _ = Tensor.zeros({16}, :float32)
    start = :erlang.monotonic_time(:millisecond) + 50

    pids =
      for _ <- 1..workers do
        spawn_link(fn ->
          # Each process makes its own tensor, as a caller's would be.
          fun = make.(Tensor.zeros({16}, :float32))
          wait_until(start)
          send(parent, {:count, self(), spin(fun, start + ms, 0)})
        end)
      end

    total = for(pid <- pids, do: receive(do: ({:count, ^pid, n} -> n))) |> Enum.sum()
    :erlang.garbage_collect()
    total * 1000 / ms
  end

  defp wait_until(t) do
    if :erlang.monotonic_time(:millisecond) < t, do: wait_until(t)
  end

  defp spin(fun, deadline, n) do
    if rem(n, 64) == 0 and :erlang.monotonic_time(:millisecond) >= deadline do
      n
    else
      fun.()
      spin(fun, deadline, n + 1)
    end
  end

  def scheduler_counts do
    online = System.schedulers_online()
    Enum.uniq([1, min(2, online), online])
  end

  # The best of `tries` runs of each (the machine may be busy).
  def operations_table(ms \\ 300, tries \\ 3, only \\ nil) do
    counts = scheduler_counts()

    for {name, make} <- operations(), only == nil or String.contains?(name, only) do
      rates = for n <- counts, into: %{}, do: {n, best(tries, fn -> rate(make, n, ms) end)}
      {name, rates}
    end
  end

  # The mixed loop of issue "thousands of processes": a new view, a binary
  # view each way, a DLPack round trip; collections happen meanwhile.
  def mixed_loop(t, bin) do
    b = %{TensorBlob.to_blob(t) | dtype: :int32}
    _ = TensorBlob.from_blob(b)
    _ = Tensor.to_binary(t, copy: false)
    _ = Tensor.from_binary(bin, :float32, {16}, copy: false)
    _ = DLPack.import(DLPack.export(t))
    :ok
  end

  def mixed(processes, ms) do
    make = fn t ->
      bin = Tensor.to_binary(t)
      fn -> mixed_loop(t, bin) end
    end

    rate(make, processes, ms)
  end

  def mixed_table(ms \\ 500, tries \\ 3) do
    for n <- [1, 2, 1000], into: %{}, do: {n, best(tries, fn -> mixed(n, ms) end)}
  end

  defp best(tries, f), do: Enum.max(for(_ <- 1..tries, do: f.()))

  def print(table, mixed) do
    counts = scheduler_counts()

    IO.puts(
      "Scaling: operations per second, one process per busy scheduler, each on its own tensor " <>
        "(best of 3); the ratio to 1 scheduler in brackets (goal >= 1.8 at 2)"
    )

    for {name, rates} <- table do
      one = rates[1]

      cells =
        for n <- counts do
          r = rates[n]
          if n == 1, do: "#{fmt_m(r)}", else: "#{n}: #{fmt_m(r)} (#{Float.round(r / one, 2)}x)"
        end

      IO.puts("  #{String.pad_trailing(name, 28)} " <> Enum.join(cells, "   "))
    end

    if mixed, do: print_mixed(mixed)
  end

  defp print_mixed(mixed) do
    IO.puts(
      "Mixed loop (a new view, a binary view each way, a DLPack round trip): 1 process " <>
        "#{fmt_k(mixed[1])}, 2 processes #{fmt_k(mixed[2])} (#{Float.round(mixed[2] / mixed[1], 2)}x), " <>
        "1,000 processes #{fmt_k(mixed[1000])} (#{Float.round(mixed[1000] / mixed[1], 2)}x) loops/s"
    )
  end

  def to_json(table, mixed) do
    %{
      operations:
        for {name, rates} <- table, into: %{} do
          {name, for({n, r} <- rates, into: %{}, do: {"schedulers_#{n}", r})}
        end,
      mixed_loops_per_s: for({n, r} <- mixed, into: %{}, do: {"processes_#{n}", r})
    }
  end

  defp fmt_m(r), do: "#{Float.round(r / 1.0e6, 2)} M/s"
  defp fmt_k(r), do: "#{round(r / 1000)} k"
end

if System.get_env("TB_SCALING_STANDALONE") do
  only = System.get_env("TB_SCALING_ONLY")
  table = Bench.Scaling.operations_table(300, 3, only)
  mixed = if only, do: nil, else: Bench.Scaling.mixed_table()
  Bench.Scaling.print(table, mixed)
  stats = TensorBlob.stats()
  :erlang.garbage_collect()
  IO.puts("stats after: #{inspect(stats)}")
end
