{:ok, _} = Application.ensure_all_started(:pythonx)
{paths, 0} = System.cmd("python3", ["-c", "import os, sys, sysconfig; print(os.path.join(sysconfig.get_config_var('LIBDIR'), sysconfig.get_config_var('INSTSONAME'))); print(sys.base_prefix); print(sys.executable)"])
[lib, home, exe] = String.split(paths, "\n", trim: true)
:ok = Pythonx.init(lib, home, exe)
{_, _} = Pythonx.eval("import torch, numpy", %{})
alias TensorBlob.{Python, Tensor}
t = Tensor.zeros({1}, :float32)
{x, _} = Pythonx.eval("import torch\ntorch.zeros(1)", %{})
Python.to_python(t)
m = "_tensor_blob_pythonx"
cases = [
  empty: fn -> Pythonx.eval("None", %{}) end,
  empty_global: fn -> Pythonx.eval("None", %{"obj" => x}) end,
  import_only: fn -> Pythonx.eval("__import__('#{m}')", %{}) end,
  torch_zeros: fn -> Pythonx.eval("__import__('torch').zeros(1)", %{}) end,
  x_dlpack: fn -> Pythonx.eval("obj.__dlpack__()", %{"obj" => x}) end,
  slot_export_close: fn -> {_k, s} = :tensor_blob_dlpack.python_slot_export(Tensor.ref(t), :legacy); :tensor_blob_dlpack.python_slot_close(s) end,
  to_python: fn -> Python.to_python(t) end,
  from_python: fn -> Python.from_python(x) end,
  take_only: fn -> {k, s} = :tensor_blob_dlpack.python_slot_receive(); Pythonx.eval("__import__('#{m}').take(obj, #{k})", %{"obj" => x}); s end,
  from_keep: fn -> Process.put(:keep, [Python.from_python(x) | Process.get(:keep, [])]) end,
  to_keep: fn -> Process.put(:keep2, [Python.to_python(t) | Process.get(:keep2, [])]) end,
  empty_keep: fn -> Process.put(:keep3, [Pythonx.eval("None", %{}) | Process.get(:keep3, [])]) end,
  dlpack_rt: fn -> t |> TensorBlob.DLPack.export() |> TensorBlob.DLPack.import() end,
]
samples = for _ <- 1..8, {name, fun} <- cases, reduce: %{} do
  acc ->
    Process.put(:keep, []); Process.put(:keep2, []); Process.put(:keep3, [])
    :erlang.garbage_collect()
    Process.sleep(50)
    Enum.reduce(1..300, acc, fn _, acc -> {us, _} = :timer.tc(fun); Map.update(acc, name, [us], &[us | &1]) end)
end
for {name, _} <- cases do
  times = Enum.sort(samples[name])
  IO.puts("#{name}: median #{Enum.at(times, div(length(times), 2))} p10 #{Enum.at(times, div(length(times), 10))}")
end
slots = for _ <- 1..2000, do: :tensor_blob_dlpack.python_slot_receive()
ks = Enum.map(slots, &elem(&1, 0))
{r, _} = Pythonx.eval("""
import time
mod = __import__('#{m}')
t0 = time.perf_counter()
for k in ks:
    mod.take(obj, k)
t1 = time.perf_counter()
for k in ks:
    obj.__dlpack__()
t2 = time.perf_counter()
((t1 - t0) / len(ks) * 1e6, (t2 - t1) / len(ks) * 1e6)
""", %{"ks" => ks, "obj" => x})
IO.inspect(Pythonx.decode(r), label: "median python take us, dlpack us")
{us, _} = :timer.tc(fn -> for {_, s} <- slots, do: :tensor_blob_dlpack.python_slot_close(s) end)
IO.puts("median close (import) us: #{us / 2000}")
