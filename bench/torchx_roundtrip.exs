# Torchx round trip: TensorBlob.Nx.from_nx of a Torchx tensor, then to_nx of
# the result back to Torchx. Median and p99 per call (ns) over batches, and
# the RSS a round trip of 64 MiB adds while its result lives.
#   NX_PATH=<Nx+Torchx build> MIX_ENV=test mix run bench/torchx_roundtrip.exs
# TB_NX_MODULE=<file.ex> loads another TensorBlob.Nx first (to compare builds).
if file = System.get_env("TB_NX_MODULE") do
  Code.put_compiler_option(:ignore_module_conflict, true)
  Code.compile_file(file)
end

{:ok, _} = Application.ensure_all_started(:torchx)
alias TensorBlob.Nx, as: TNx

rss = fn ->
  [_, pages | _] = File.read!("/proc/self/statm") |> String.split()
  String.to_integer(pages) * 4096
end

time = fn fun, batches, per ->
  for _ <- 1..5, do: fun.()

  samples =
    for _ <- 1..batches do
      t0 = System.monotonic_time(:nanosecond)
      for _ <- 1..per, do: fun.()
      div(System.monotonic_time(:nanosecond) - t0, per)
    end
    |> Enum.sort()

  {Enum.at(samples, div(batches, 2)), Enum.at(samples, div(batches * 99, 100))}
end

for {label, shape, batches, per} <- [{"16 KiB", {4096}, 200, 100}, {"64 MiB", {4096, 4096}, 20, 1}] do
  tx = Nx.iota(shape, type: :f32, backend: Torchx.Backend)
  {fm, fp} = time.(fn -> TNx.from_nx(tx) end, batches, per)
  {rm, rp} = time.(fn -> TNx.to_nx(TNx.from_nx(tx), Torchx.Backend) end, batches, per)
  :erlang.garbage_collect()
  before = rss.()
  back = TNx.to_nx(TNx.from_nx(tx), Torchx.Backend)
  grown = rss.() - before
  true = Nx.to_binary(back) == Nx.to_binary(tx)

  IO.puts(
    "#{label}: from_nx #{fm} / #{fp} ns; from_nx + to_nx #{rm} / #{rp} ns; RSS +#{div(grown, 1024)} KiB while the result lives"
  )
end
