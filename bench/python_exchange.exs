# DLPack 1.3's C exchange API at the Python door, and many tensors in one
# crossing: from_python and to_python of one 4 B tensor through PyTorch's
# table against the path of a producer without one (Python-level
# __dlpack__ and torch.from_dlpack of a capsule) and against an empty
# Pythonx.eval; a map of 256 tensors each way in one call against 256
# calls. Needs Pythonx on the code path and a python3 with PyTorch (the
# API rows need PyTorch 2.10 or later, whose tensor type has the table):
#
#   PYTHONX_PATH=$(scripts/build_pythonx.sh) MIX_ENV=prod mix run bench/python_exchange.exs
#
# or `make bench-python-exchange`, which builds the bench NIF and its Python
# extension first: then the same run ends with bench/exchange_loop.exs's
# C loop (tensor_blob's exchange API table beside PyTorch's), so every row
# of the comparison comes from one run.
#
# Prints a Markdown table: µs per call, the median of rounds' means, each
# round started settled (as bench/python.exs), the cases timed in turns.
Code.require_file("python_common.exs", __DIR__)

alias TensorBlob.{Python, Tensor}
alias TensorBlobBench.Python, as: Bench

:ok = Bench.start("torch")
eval = &Bench.eval/2

interleaved = fn cases, rounds, calls ->
  Map.new(Bench.interleaved(cases, rounds, calls), fn {k, us} -> {k, Float.round(us, 1)} end)
end

api? = Pythonx.decode(eval.("import torch\nhasattr(torch.Tensor, '__dlpack_c_exchange_api__')", %{}))
t = Tensor.zeros({1}, :float32)
x = eval.("import torch\ntorch.zeros(1)", %{})

# A torch tensor whose type hides the table: taken as a producer without
# one is (its __dlpack__, a capsule).
plain =
  eval.(
    "import torch\nclass Plain(torch.Tensor):\n    __dlpack_c_exchange_api__ = None\ntorch.zeros(1).as_subclass(Plain)",
    %{}
  )

# to_python as it goes where PyTorch has no table: a legacy export, made
# into a tensor by torch.from_dlpack of a capsule.
to_capsule = fn ->
  {k, slot} = :tensor_blob_python.python_slot_export(Tensor.ref(t), :legacy)

  try do
    eval.("__import__('tensor_blob_pythonx').to_torch(#{k})", %{})
  after
    :tensor_blob_python.python_slot_close(slot)
  end
end

params = for i <- 1..256, into: %{}, do: {"layer#{i}.weight", Tensor.zeros({1}, :float32)}
dict = Python.to_python_many(params)

one =
  interleaved.(
    [
      empty: fn -> eval.("None", %{}) end,
      from_api: fn -> Python.from_python(x) end,
      from_capsule: fn -> Python.from_python(plain) end,
      to_api: fn -> Python.to_python(t) end,
      to_capsule: to_capsule
    ],
    20,
    200
  )

many =
  interleaved.(
    [
      to_map: fn -> Python.to_python_many(params) end,
      from_map: fn -> Python.from_python_many(dict) end,
      to_each: fn -> Enum.each(params, fn {_, v} -> Python.to_python(v) end) end
    ],
    5,
    10
  )

versions = Pythonx.decode(eval.("import sys, torch\n(sys.version.split()[0], torch.__version__)", %{}))

IO.puts("""
Python in the VM (Python #{elem(versions, 0)}, PyTorch #{elem(versions, 1)}, Pythonx #{Application.spec(:pythonx, :vsn)}; \
PyTorch's tensor type #{if api?, do: "has", else: "has no"} DLPack C exchange API table). µs per call, the median of \
rounds' means, each round started settled, the cases timed in turns.

| case | through the table | through a capsule | empty eval |
|---|---|---|---|
| from_python, 4 B | #{one.from_api} | #{one.from_capsule} | #{one.empty} |
| to_python, 4 B | #{one.to_api} | #{one.to_capsule} | #{one.empty} |

| 256 tensors of 4 B | one call | per tensor | ÷ one tensor's call | 256 calls of to_python |
|---|---|---|---|---|
| to_python_many | #{many.to_map} | #{Float.round(many.to_map / 256, 2)} | #{Float.round(many.to_map / one.to_api, 1)}x | #{many.to_each} |
| from_python_many | #{many.from_map} | #{Float.round(many.from_map / 256, 2)} | #{Float.round(many.from_map / one.from_api, 1)}x | |
""")

# The exchange API's C loop, in the same run, where the bench NIF is built.
bench_nif = System.get_env("TENSOR_BLOB_BENCH_NIF") || Path.expand("../build/tensor_blob_bench_nif", __DIR__)

if File.exists?(bench_nif <> ".so") do
  case Code.eval_file(Path.join(__DIR__, "exchange_loop.exs")) do
    # The floor of a batch to PyTorch: PyTorch's own making and freeing of
    # each of its 256 tensors, whatever hands them over, beside 5x one
    # to_python call.
    {%{torch_make_ns: make_ns}, _} ->
      floor = 256 * make_ns / 1000

      IO.puts(
        "PyTorch's own work for 256 tensors (256 × #{Float.round(make_ns, 1)} ns): #{Float.round(floor, 1)} µs, " <>
          "#{Float.round(floor / one.to_api, 1)}x one to_python call (#{one.to_api} µs; 5x is " <>
          "#{Float.round(5 * one.to_api, 1)} µs); to_python_many took #{many.to_map} µs, " <>
          "#{Float.round(many.to_map / floor, 1)}x that floor."
      )

    _ ->
      :ok
  end
else
  IO.puts("(no bench NIF at #{bench_nif}.so: make bench-python-exchange builds it and runs the C loop too)")
end
