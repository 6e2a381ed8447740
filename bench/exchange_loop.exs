# DLPack 1.3's C exchange API in one C loop shape (bench/nif/exchange_loop.h),
# 1,000,000 rounds, best of 5: tensor_blob's table over terms
# (priv/include/tensor_blob.h: managed_tensor_from_term_no_sync + deleter,
# in the bench NIF) beside PyTorch's (managed_tensor_from_py_object_no_sync
# + deleter of a torch tensor, in the bench's Python extension, run by
# $PYTHON), of 4 B and 1 GiB tensors; with the bridge's own export
# (tensor_blob_to_dlpack) in the same loop. Three turns in alternation,
# each side's least kept. Then what PyTorch's own making and freeing of one
# tensor from a managed tensor costs (managed_tensor_to_py_object_no_sync
# and the release of what it made: the extension's make_loop less its
# loop), the floor of every tensor a batch hands PyTorch. Built and run by
#
#   make bench-exchange
#
# PyTorch's row is skipped, saying why, where the extension was not built
# (no Python headers) or PyTorch has no table. Prints a Markdown table.
Code.require_file("nif/tensor_blob_bench_nif.ex", __DIR__)

alias TensorBlob.Tensor

n = 1_000_000
rounds = 5
sizes = [{"4 B", 1}, {"1 GiB", div(1_073_741_824, 4)}]
ext = Path.dirname(System.get_env("TENSOR_BLOB_BENCH_NIF") || Path.expand("../build/x", __DIR__))
python = System.get_env("PYTHON") || "python3"

torch = fn elements ->
  code = """
  import sys
  sys.path.insert(0, sys.argv[1])
  import torch, torch_exchange_loop
  t = torch.empty(#{elements}, dtype=torch.float32)
  print(torch.__version__)
  print(torch_exchange_loop.loop(t, #{n}, #{rounds}))
  print(torch_exchange_loop.make_loop(t, #{div(n, 10)}, #{rounds}))
  """

  cond do
    not File.exists?(Path.join(ext, "torch_exchange_loop.so")) ->
      {:skipped, "no bench extension (make bench-nif builds it where Python's headers are)"}

    true ->
      case System.cmd(python, ["-c", code, ext], stderr_to_stdout: true) do
        {out, 0} ->
          [version, ns, make_ns] = String.split(out, "\n", trim: true) |> Enum.take(-3)
          {:ok, version, String.to_float(ns), String.to_float(make_ns)}

        {out, _} ->
          {:skipped, out |> String.split("\n", trim: true) |> List.last()}
      end
  end
end

# Three turns, each side's best of 5 in each, the sides in alternation (a
# busy machine slows both alike); each side's least kept.
rows =
  for {label, elements} <- sizes do
    t = Tensor.zeros({elements}, :float32)

    turns =
      for _ <- 1..3 do
        ours = :tensor_blob_bench_nif.exchange_loop(t, n, rounds)
        bridge = Enum.min(for _ <- 1..rounds, do: :tensor_blob_bench_nif.bridge_loop(t, n) / n)
        {ours, bridge, torch.(elements)}
      end

    least = fn f -> turns |> Enum.map(f) |> Enum.min() end

    theirs =
      case Enum.filter(turns, &match?({_, _, {:ok, _, _, _}}, &1)) do
        [] ->
          elem(hd(turns), 2)

        done ->
          least_of = fn i -> done |> Enum.map(&elem(elem(&1, 2), i)) |> Enum.min() end
          {:ok, elem(elem(hd(done), 2), 1), least_of.(2), least_of.(3) - least_of.(2)}
      end

    {label, least.(&elem(&1, 0)), least.(&elem(&1, 1)), theirs}
  end

fmt = fn x -> :erlang.float_to_binary(x * 1.0, decimals: 1) end

IO.puts("""
DLPack C exchange API, one C loop shape (#{n} rounds, best of #{rounds}, least of 3 turns in alternation); ns per from-object + deleter.

| tensor | tensor_blob's table (term) | tensor_blob_to_dlpack (bridge) | PyTorch's table (torch.Tensor) |
|---|---|---|---|\
""")

for {label, ours, bridge, theirs} <- rows do
  theirs =
    case theirs do
      {:ok, version, ns, _} -> "#{fmt.(ns)} (PyTorch #{version})"
      {:skipped, why} -> "skipped: #{why}"
    end

  IO.puts("| #{label} | #{fmt.(ours)} | #{fmt.(bridge)} | #{theirs} |")
end

# PyTorch's making and freeing of a tensor, at 4 B: what a batch's every
# tensor costs PyTorch whatever hands it over (bench/python_exchange.exs
# reads it from this file's value).
case rows do
  [{_, _, _, {:ok, version, _, make_ns}} | _] ->
    IO.puts(
      "\nPyTorch #{version} makes a torch.Tensor of a managed tensor and frees it " <>
        "(managed_tensor_to_py_object_no_sync + release, 4 B): #{fmt.(make_ns)} ns."
    )

    %{torch_make_ns: make_ns}

  _ ->
    %{}
end
