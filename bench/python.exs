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
Code.require_file("python_common.exs", __DIR__)

alias TensorBlob.{Python, Tensor}
alias TensorBlobBench.Python, as: Bench

:ok = Bench.start("torch, numpy")
eval = &Bench.eval/2

interleaved = fn cases, rounds, calls ->
  Map.new(Bench.interleaved(cases, rounds, calls), fn {k, us} -> {k, round(us)} end)
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
