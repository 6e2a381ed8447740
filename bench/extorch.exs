# The ExTorch exchanges, beside ExTorch's own to_blob + from_blob, in one VM
# with ExTorch, tensor_blob and Torchx (scripts/compat_extorch.sh runs it:
# NX_PATH must hold the Nx/Torchx and ExTorch builds). Prints one table,
# median and p99 per call, in microseconds, for float32 tensors of 4 B,
# 1 KiB and 4 MiB.
unless Code.ensure_loaded?(TensorBlob.ExTorch) do
  IO.puts("bench/extorch.exs: ExTorch is not on the code path (NX_PATH); nothing measured")
  System.halt(0)
end

defmodule ExTorchBench do
  alias TensorBlob.ExTorch, as: TEx
  alias TensorBlob.Tensor

  @sizes [{"4 B", 1}, {"1 KiB", 256}, {"4 MiB", 1024 * 1024}]

  # Per-call median and p99 (ns) over batches of calls, in a fresh process.
  def measure(fun, batch) do
    parent = self()

    {pid, ref} =
      spawn_monitor(fn ->
        for _ <- 1..5, do: run(fun, batch)
        samples = Enum.sort(for _ <- 1..60, do: run(fun, batch) / batch)
        send(parent, {self(), {pct(samples, 0.5), pct(samples, 0.99)}})
      end)

    receive do
      {^pid, r} ->
        Process.demonitor(ref, [:flush])
        r

      {:DOWN, ^ref, :process, ^pid, reason} ->
        raise "measure: #{inspect(reason)}"
    end
  end

  defp run(fun, n) do
    t0 = :erlang.monotonic_time(:nanosecond)
    for _ <- 1..n, do: fun.()
    :erlang.monotonic_time(:nanosecond) - t0
  end

  defp pct(sorted, p), do: Enum.at(sorted, round(p * (length(sorted) - 1)))

  def main do
    {:ok, _} = Application.ensure_all_started(:extorch)
    torchx? = Code.ensure_loaded?(Torchx.Backend)
    if torchx?, do: {:ok, _} = Application.ensure_all_started(:torchx)

    rows =
      for {label, n} <- @sizes do
        x = ExTorch.rand({n}, dtype: :float32)
        ours = Tensor.from_binary(:binary.copy(<<1.0::float-32-native>>, n), :float32, {n})
        view = TEx.from_extorch(x)
        batch = if n > 1024, do: 10, else: 500

        cases =
          [
            {"ExTorch's own to_blob + from_blob(owner:)",
             fn -> ExTorch.Tensor.Blob.from_blob(ExTorch.Tensor.Blob.to_blob(x), owner: x) end},
            {"ExTorch's own clone (a copy, for scale)", fn -> ExTorch.clone(x) end},
            {"tensor_blob's own copy (to_device :cpu, for scale)", fn -> Tensor.to_device(ours, :cpu) end},
            {"ExTorch -> tensor_blob (from_extorch, pinned)", fn -> TEx.from_extorch(x) end},
            {"tensor_blob -> ExTorch (default: one copy)", fn -> TEx.to_extorch(ours) end},
            {"tensor_blob -> ExTorch (unsafe_view: true)", fn -> TEx.to_extorch(ours, unsafe_view: true) end},
            {"ExTorch's memory back to ExTorch (view of x)", fn -> TEx.to_extorch(view) end}
          ] ++
            if torchx? do
              [
                {"triangle ExTorch -> tb -> Torchx -> tb -> ExTorch (2 copies)",
                 fn ->
                   tx = TensorBlob.Nx.to_nx(TEx.from_extorch(x), Torchx.Backend)
                   TEx.to_extorch(TensorBlob.Nx.from_nx(tx))
                 end},
                {"ExTorch -> tb -> Nx.BinaryBackend (zero-copy)",
                 fn -> TensorBlob.Nx.to_nx(TEx.from_extorch(x), Nx.BinaryBackend) end}
              ]
            else
              []
            end

        for {name, fun} <- cases do
          {median, p99} = measure(fun, batch)
          {label, name, median / 1000, p99 / 1000}
        end
      end

    IO.puts("| size | exchange | median µs | p99 µs |")
    IO.puts("|---|---|---:|---:|")

    for {size, name, median, p99} <- List.flatten(rows) do
      IO.puts(
        "| #{size} | #{name} | #{:erlang.float_to_binary(median, decimals: 2)} | " <>
          "#{:erlang.float_to_binary(p99, decimals: 2)} |"
      )
    end
  end
end

ExTorchBench.main()
