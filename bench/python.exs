# Tensors between tensor_blob and the Python of this VM (Pythonx): each
# direction at 4 B and 64 MiB, zero-copy (TensorBlob.Python) against
# Pythonx's own way (a binary encoded as Python bytes, rebuilt with
# numpy.frombuffer; and back through tobytes), and an empty Pythonx.eval,
# all in the same run. Needs Pythonx on the code path and a python3 with
# PyTorch and NumPy:
#
#   PYTHONX_PATH=$(scripts/build_pythonx.sh) MIX_ENV=prod mix run bench/python.exs
#
# Prints a Markdown table: each case's cost per call in microseconds (the
# median of its rounds' means, each round started settled), the cases of a size timed in turns (at 4 B
# 20 rounds of 200 calls each; at 64 MiB 5 rounds of 200, the copies 5 of
# 5), with the zero-copy ones as a multiple of an empty eval.
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

# The cases of one size are timed in turns (rounds of `calls` each), so
# that a change in the machine's load falls on all of them alike. A sample
# is one round timed as a whole, divided by its calls; the median of a
# case's samples, in µs. Nothing is stored per call: a growing list of
# samples would make every collection dearer, most of all for the cases
# that allocate most.
#
# Each round starts settled, outside the timing: this process's garbage
# collected, Pythonx's janitor done (it drops each collected Pythonx
# object in a call of its own, and every Pythonx.eval waits for it), the
# library's release thread done (Python's deleters of what from_python
# took: stats/0's `deferred`). Otherwise a case pays for the objects the
# case before it made: from_python, timed after to_python, took up to 0.5x
# an empty eval more that way.
deferred = fn -> TensorBlob.stats().deferred end
base_deferred = deferred.()

settle = fn ->
  :erlang.garbage_collect()
  {_, _} = Pythonx.eval("None", %{})
  :erlang.garbage_collect()

  Stream.repeatedly(fn -> deferred.() <= base_deferred || Process.sleep(1) end)
  |> Enum.find(&(&1 == true))
end

interleaved = fn cases, rounds, calls ->
  round = fn fun ->
    settle.()
    {us, _} = :timer.tc(fn -> Enum.each(1..calls, fn _ -> fun.() end) end)
    us / calls
  end

  Enum.each(cases, fn {_, fun} -> round.(fun) end)

  samples =
    for _ <- 1..rounds, {name, fun} <- cases, reduce: %{} do
      acc ->
        us = round.(fun)
        Map.update(acc, name, [us], &[us | &1])
    end

  Map.new(samples, fn {name, times} -> {name, round(Enum.at(Enum.sort(times), div(length(times), 2)))} end)
end

eval = fn code, globals ->
  {result, _} = Pythonx.eval(code, globals)
  result
end

rows =
  for {label, bytes, rounds, copy_calls} <- [{"4 B", 4, 20, 200}, {"64 MiB", 64 * 1024 * 1024, 5, 5}] do
    n = div(bytes, 4)
    t = Tensor.zeros({n}, :float32)
    binary = Tensor.to_binary(t)
    x = eval.("import torch\ntorch.zeros(n, dtype=torch.float32)", %{"n" => n})

    # The floors: an empty eval; one that makes a torch tensor (what any
    # way to PyTorch ends in); one that asks a tensor for DLPack and makes
    # no Pythonx object (what any way from PyTorch starts with).
    zero = [
      empty: fn -> eval.("None", %{}) end,
      to_floor: fn -> eval.("__import__('torch').zeros(1)", %{}) end,
      from_floor: fn -> eval.("obj.__dlpack__()\ndel obj", %{"obj" => x}) end,
      to_zero: fn -> Python.to_python(t) end,
      from_zero: fn -> Python.from_python(x) end
    ]

    copies = [
      to_copy: fn -> eval.("import numpy\nnumpy.frombuffer(b, dtype=numpy.float32)", %{"b" => binary}) end,
      from_copy: fn ->
        b = Pythonx.decode(eval.("x.numpy().tobytes()", %{"x" => x}))
        Tensor.from_binary(b, :float32, {n})
      end
    ]

    cases =
      if bytes == 4,
        do: interleaved.(zero ++ copies, rounds, copy_calls),
        else: Map.merge(interleaved.(zero, rounds, 200), interleaved.(copies, rounds, copy_calls))

    {label, cases}
  end

IO.puts("""
Python in the VM (Pythonx #{Application.spec(:pythonx, :vsn)}, #{elem(Pythonx.decode(eval.("import sys, torch, numpy\n(sys.version.split()[0], torch.__version__, numpy.__version__)", %{})), 0)} \
Python, libtorch #{TensorBlob.torch_version()}); µs per call (the median of rounds' means, each round started settled), each size's cases timed in turns. \
The floors: an empty eval; to Python, an eval that makes a torch tensor; from Python, an eval that calls \
`__dlpack__` and makes no Pythonx object.

| size | direction | zero-copy | empty eval | ÷ empty | floor | ÷ floor | Pythonx copy | speedup |
|---|---|---|---|---|---|---|---|---|\
""")

ratio = fn a, b -> "#{Float.round(a / max(b, 1), 1)}x" end

for {label, c} <- rows,
    {direction, zero, floor, copy} <- [
      {"to", c.to_zero, c.to_floor, c.to_copy},
      {"from", c.from_zero, c.from_floor, c.from_copy}
    ] do
  IO.puts(
    "| #{label} | #{direction} | #{zero} | #{c.empty} | #{ratio.(zero, c.empty)} | #{floor} | #{ratio.(zero, floor)} " <>
      "| #{copy} | #{ratio.(copy, zero)} |"
  )
end
