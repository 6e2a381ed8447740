# Tensors between tensor_blob and the Python of this VM (Pythonx): each
# direction at 4 B and 64 MiB, zero-copy (TensorBlob.Python) against
# Pythonx's own way (a binary encoded as Python bytes, rebuilt with
# numpy.frombuffer; and back through tobytes), and an empty Pythonx.eval,
# all in the same run. Needs Pythonx on the code path and a python3 with
# PyTorch and NumPy:
#
#   PYTHONX_PATH=$(scripts/build_pythonx.sh) MIX_ENV=prod mix run bench/python.exs
#
# Prints a Markdown table: the median of each case in microseconds (2000
# calls; the copies at 64 MiB 15).
{:ok, _} = Application.ensure_all_started(:pythonx)

{paths, 0} =
  System.cmd("python3", [
    "-c",
    "import os, sys, sysconfig; print(os.path.join(sysconfig.get_config_var('LIBDIR'), " <>
      "sysconfig.get_config_var('INSTSONAME'))); print(sys.base_prefix); print(sys.executable)"
  ])

[lib, home, exe] = String.split(paths, "\n", trim: true)
:ok = Pythonx.init(lib, home, exe)
{_, _} = Pythonx.eval("import torch, numpy", %{})

alias TensorBlob.{Python, Tensor}

median = fn runs, fun ->
  fun.()

  times =
    for _ <- 1..runs do
      {us, _} = :timer.tc(fun)
      us
    end

  Enum.at(Enum.sort(times), div(runs, 2))
end

eval = fn code, globals ->
  {result, _} = Pythonx.eval(code, globals)
  result
end

empty = median.(2000, fn -> eval.("None", %{}) end)

rows =
  for {label, bytes, runs} <- [{"4 B", 4, 2000}, {"64 MiB", 64 * 1024 * 1024, 15}] do
    n = div(bytes, 4)
    t = Tensor.zeros({n}, :float32)
    binary = Tensor.to_binary(t)
    x = eval.("import torch\ntorch.zeros(n, dtype=torch.float32)", %{"n" => n})

    to_zero = median.(2000, fn -> Python.to_python(t) end)
    to_copy = median.(runs, fn -> eval.("import numpy\nnumpy.frombuffer(b, dtype=numpy.float32)", %{"b" => binary}) end)
    from_zero = median.(2000, fn -> Python.from_python(x) end)

    from_copy =
      median.(runs, fn ->
        b = Pythonx.decode(eval.("x.numpy().tobytes()", %{"x" => x}))
        Tensor.from_binary(b, :float32, {n})
      end)

    {label, to_zero, to_copy, from_zero, from_copy}
  end

IO.puts("""
Python in the VM (Pythonx #{Application.spec(:pythonx, :vsn)}, #{elem(Pythonx.decode(eval.("import sys, torch, numpy\n(sys.version.split()[0], torch.__version__, numpy.__version__)", %{})), 0)} \
Python, libtorch #{TensorBlob.torch_version()}); median µs; an empty Pythonx.eval: #{empty} µs

| size | to Python: to_python/2 | to Python: Pythonx copy | speedup | from Python: from_python/1 | from Python: Pythonx copy | speedup |
|---|---|---|---|---|---|---|\
""")

for {label, tz, tc, fz, fc} <- rows do
  IO.puts(
    "| #{label} | #{tz} | #{tc} | #{Float.round(tc / max(tz, 1), 1)}x | #{fz} | #{fc} | #{Float.round(fc / max(fz, 1), 1)}x |"
  )
end
