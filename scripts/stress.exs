# Stress: create-and-drop cycles of pinned views across processes.
#
#   mix run scripts/stress.exs [cycles]      (default 1,000,000)
#   make stress / make stress-ci             (1,000,000 / 100,000 cycles)
#
# 8 worker processes share the cycles. A cycle makes a pinned view of a
# tensor (from_blob(to_blob(t))) and drops it; some cycles narrow or
# transpose the view, some keep only the slice (dropping the view, and
# sometimes the source too) in a small ring that outlives them, some pin a
# tuple owner (a pin environment) instead of the tensor. Every so often a
# kept slice's bytes are checked against what its source held, each worker
# forces a GC of itself, and a collector process forces a GC of everything.
#
# At the end, with everything dropped and collected: TensorBlob.stats()
# must be back where it started, and RSS (VmRSS) must have grown by less than
# 64 MiB since the warm-up. Prints the figures; exits 1 otherwise.
Code.require_file("../bench/rss.exs", __DIR__)

defmodule Stress do
  alias TensorBlob.{BlobView, Tensor}

  @workers 8
  @ring 16
  @worker_gc_every 1_000
  @check_every 997
  @collector_ms 50
  @max_rss_growth_kib 64 * 1024
  @warmup_cycles 20_000
  @chain_depth 1_000_000

  def main(argv) do
    cycles =
      case argv do
        [] -> 1_000_000
        [n | _] -> String.to_integer(String.replace(n, "_", ""))
      end

    IO.puts("stress: #{fmt(cycles)} cycles across #{@workers} processes (libtorch #{TensorBlob.torch_version()})")
    start_stats = settle()
    rss_start = Bench.RSS.kib()

    # Warm-up: libtorch and the allocators set themselves up on first use;
    # that is not growth caused by the cycles.
    run(@warmup_cycles)
    warm_stats = settle()
    rss_warm = Bench.RSS.kib()

    {micros, peak} = :timer.tc(fn -> run(cycles) end)
    end_stats = settle()
    rss_end = Bench.RSS.kib()
    growth = rss_end - rss_warm

    IO.puts("""
    cycles:        #{fmt(cycles)} in #{Float.round(micros / 1.0e6, 2)} s (#{fmt(round(cycles / max(micros, 1) * 1.0e6))} cycles/s)
    stats start:   #{inspect(start_stats)}
    after warm-up: #{inspect(warm_stats)}
    peak live:     #{inspect(peak)}
    end:           #{inspect(end_stats)}
    VmRSS start:   #{fmt(rss_start)} KiB
    after warm-up: #{fmt(rss_warm)} KiB
    end:           #{fmt(rss_end)} KiB (growth since warm-up: #{fmt(growth)} KiB, limit #{fmt(@max_rss_growth_kib)} KiB)
    """)

    chain_failures = for kind <- [:dlpack, :pins, :binary_views], do: chain(kind, @chain_depth, start_stats)

    failures =
      [
        {end_stats != start_stats,
         "stats did not return to the start: #{inspect(start_stats)} -> #{inspect(end_stats)}"},
        {growth >= @max_rss_growth_kib, "RSS grew by #{fmt(growth)} KiB (limit #{fmt(@max_rss_growth_kib)} KiB)"}
      ]
      |> Kernel.++(chain_failures)
      |> Enum.filter(&elem(&1, 0))
      |> Enum.map(&elem(&1, 1))

    case failures do
      [] ->
        IO.puts("stress: ok")

      _ ->
        Enum.each(failures, &IO.puts("stress: FAILED: #{&1}"))
        System.halt(1)
    end
  end

  # A chain of views of views, `depth` deep, made in a process that then
  # exits: freeing it must not recurse once per link (it would overflow the
  # C stack), and every count must come back.
  defp chain(kind, depth, start_stats) do
    {micros, :ok} =
      :timer.tc(fn ->
        in_process(fn ->
          t0 = Tensor.from_binary(<<1, 2, 3, 4, 5, 6, 7, 8>>, :uint8, {8})
          last = Enum.reduce(1..depth, t0, fn _, p -> link(kind, p) end)
          if Tensor.to_binary(last) != <<1, 2, 3, 4, 5, 6, 7, 8>>, do: raise("chain #{kind}: wrong bytes")
          :ok
        end)
      end)

    end_stats = settle()

    IO.puts(
      "chain #{kind}: #{fmt(depth)} deep, made and read in #{Float.round(micros / 1.0e6, 2)} s, freed: #{inspect(end_stats)}"
    )

    {end_stats != start_stats, "chain #{kind}: stats did not return to the start: #{inspect(end_stats)}"}
  end

  defp in_process(fun) do
    {pid, ref} = spawn_monitor(fn -> exit({:done, fun.()}) end)

    receive do
      {:DOWN, ^ref, :process, ^pid, {:done, value}} -> value
      {:DOWN, ^ref, :process, ^pid, reason} -> raise "chain worker died: #{inspect(reason)}"
    end
  end

  defp link(:dlpack, p), do: TensorBlob.DLPack.import(TensorBlob.DLPack.export(p))

  defp link(:pins, p) do
    %BlobView{tensor: v} = TensorBlob.from_blob(TensorBlob.to_blob(p))
    v
  end

  defp link(:binary_views, p), do: Tensor.from_binary(Tensor.to_binary(p, copy: false), :uint8, {8}, copy: false)

  # Runs the cycles on the workers, with the collector forcing GCs meanwhile.
  # Returns the highest live counts the collector saw.
  defp run(cycles) do
    parent = self()
    collector = spawn_link(fn -> collector(parent, %{}) end)

    per_worker = div(cycles, @workers)
    counts = for i <- 0..(@workers - 1), do: per_worker + if(i < rem(cycles, @workers), do: 1, else: 0)

    tasks =
      for {n, i} <- Enum.with_index(counts) do
        Task.async(fn -> worker(i, n) end)
      end

    Enum.each(tasks, &Task.await(&1, :infinity))
    send(collector, {:stop, self()})

    receive do
      {:peak, peak} -> peak
    end
  end

  defp collector(parent, peak) do
    receive do
      {:stop, from} -> send(from, {:peak, peak})
    after
      @collector_ms ->
        gc_all()
        collector(parent, Map.merge(peak, TensorBlob.stats(), fn _k, a, b -> max(a, b) end))
    end
  end

  # Each worker owns a few sources: bytes 0, 1, 2, ... of several dtypes.
  defp worker(id, n) do
    :rand.seed(:exsss, {id + 1, 7, 42})

    sources =
      for {dtype, shape} <- [{:uint8, {16, 8}}, {:float32, {6, 5}}, {:int64, {4, 3, 2}}, {:bfloat16, {33}}],
          do: source(dtype, shape)

    loop(n, 0, sources, :queue.new(), 0)
  end

  defp source(dtype, shape) do
    bytes = byte_count(dtype, shape)
    binary = for i <- 0..(bytes - 1), into: <<>>, do: <<rem(i * 7 + 3, 251)>>
    {Tensor.from_binary(binary, dtype, shape), binary, shape}
  end

  defp byte_count(dtype, shape) do
    size = %{uint8: 1, float32: 4, int64: 8, bfloat16: 2}[dtype]
    Tuple.to_list(shape) |> Enum.reduce(size, &(&1 * &2))
  end

  defp loop(0, _i, _sources, _ring, _ring_len), do: :ok

  defp loop(n, i, sources, ring, ring_len) do
    {t, binary, shape} = Enum.at(sources, rem(i, length(sources)))

    {ring, ring_len} =
      case rem(i, 8) do
        0 ->
          # A fresh source, viewed; only a slice is kept, so the slice's
          # storage keeps the pin and the pin keeps the source alive.
          {fresh, _, _} = source(:uint8, {8, 4})
          %BlobView{tensor: v} = TensorBlob.from_blob(TensorBlob.to_blob(fresh))
          keep(ring, ring_len, {Tensor.narrow(v, 0, 2, 3), :fresh})

        1 ->
          # Only the transpose of the view is kept.
          %BlobView{tensor: v} = TensorBlob.from_blob(TensorBlob.to_blob(t))
          keep(ring, ring_len, {Tensor.transpose(v, 0, tuple_size(shape) - 1), {:whole, t, binary, shape}})

        2 ->
          # A tuple owner: a pin environment holding a copy of the term.
          %BlobView{tensor: v} = TensorBlob.from_blob(TensorBlob.to_blob(t), owner: {:owner, t, i})
          _ = Tensor.narrow(v, 0, 0, 1)
          {ring, ring_len}

        3 ->
          # A view of a view, both dropped.
          %BlobView{tensor: v} = TensorBlob.from_blob(TensorBlob.to_blob(t))
          %BlobView{tensor: w} = TensorBlob.from_blob(TensorBlob.to_blob(v))
          _ = Tensor.transpose(w, 0, tuple_size(shape) - 1)
          {ring, ring_len}

        _ ->
          # The plain cycle: view and drop, sometimes with a narrow.
          %BlobView{tensor: v} = TensorBlob.from_blob(TensorBlob.to_blob(t))
          if :rand.uniform(2) == 1, do: Tensor.narrow(v, 0, 0, 1)
          {ring, ring_len}
      end

    if rem(i, @check_every) == 0, do: check_ring(ring)
    if rem(i, @worker_gc_every) == 0, do: :erlang.garbage_collect()
    loop(n - 1, i + 1, sources, ring, ring_len)
  end

  defp keep(ring, len, item) when len < @ring, do: {:queue.in(item, ring), len + 1}
  defp keep(ring, len, item), do: {:queue.in(item, :queue.drop(ring)), len}

  # The kept slices still hold the bytes their sources held.
  defp check_ring(ring) do
    for item <- :queue.to_list(ring) do
      case item do
        {slice, :fresh} ->
          # Rows 2..4 of an {8, 4} uint8 source made by source/2.
          expected = for i <- 8..19, into: <<>>, do: <<rem(i * 7 + 3, 251)>>
          same!(Tensor.to_binary(slice), expected)

        {slice, {:whole, t, binary, _shape}} ->
          same!(Tensor.to_binary(Tensor.transpose(slice, 0, tuple_size(Tensor.shape(slice)) - 1)), binary)
          same!(Tensor.to_binary(t), binary)
      end
    end
  end

  defp same!(a, a), do: :ok
  defp same!(a, b), do: raise("stress: bytes differ: #{inspect(a, limit: 16)} vs #{inspect(b, limit: 16)}")

  defp gc_all, do: Enum.each(Process.list(), &:erlang.garbage_collect/1)

  # stats() once everything is collected: destructors run a little after
  # the collection that frees them, so wait for the counts to stay put.
  defp settle(tries \\ 200, last \\ nil)
  defp settle(0, last), do: last

  defp settle(tries, last) do
    gc_all()

    case TensorBlob.stats() do
      ^last ->
        last

      now ->
        Process.sleep(20)
        settle(tries - 1, now)
    end
  end

  defp fmt(n) when is_integer(n) do
    n
    |> Integer.to_string()
    |> String.reverse()
    |> String.replace(~r/(\d{3})(?=\d)/, "\\1,")
    |> String.reverse()
  end
end

Stress.main(System.argv())
