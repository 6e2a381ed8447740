# What the Python benches share (bench/python.exs,
# bench/python_exchange.exs): the Python of this VM started, each round
# started settled, the cases of a size timed in turns.
defmodule TensorBlobBench.Python do
  @moduledoc false

  # Pythonx started on the python3 on PATH, with `imports` imported.
  def start(imports) do
    {:ok, _} = Application.ensure_all_started(:pythonx)

    {paths, 0} =
      System.cmd("python3", [
        "-c",
        "import os, sys, sysconfig; print(os.path.join(sysconfig.get_config_var('LIBDIR'), " <>
          "sysconfig.get_config_var('INSTSONAME'))); print(sys.base_prefix); print(sys.executable)"
      ])

    [lib, home, exe] = String.split(paths, "\n", trim: true)
    :ok = Pythonx.init(lib, home, exe)
    {_, _} = Pythonx.eval("import #{imports}", %{})
    :ok
  end

  def eval(code, globals) do
    {result, _} = Pythonx.eval(code, globals)
    result
  end

  # The cases are timed in turns (rounds of `calls` each), so that a change
  # in the machine's load falls on all of them alike. A sample is one round
  # timed as a whole, divided by its calls; the median of a case's samples,
  # in µs. Nothing is stored per call: a growing list of samples would make
  # every collection dearer, most of all for the cases that allocate most.
  def interleaved(cases, rounds, calls) do
    base = deferred()

    round = fn fun ->
      settle(base)
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

    Map.new(samples, fn {name, times} -> {name, Enum.at(Enum.sort(times), div(length(times), 2))} end)
  end

  # Each round starts settled, outside the timing: this process's garbage
  # collected, Pythonx's janitor done (it drops each collected Pythonx
  # object in a call of its own, and every Pythonx.eval waits for it), the
  # library's release thread done (Python's deleters of what from_python
  # took: stats/0's `deferred`). Otherwise a case pays for the objects the
  # case before it made: from_python, timed after to_python, took up to
  # 0.5x an empty eval more that way.
  defp settle(base) do
    :erlang.garbage_collect()
    {_, _} = Pythonx.eval("None", %{})
    :erlang.garbage_collect()

    Stream.repeatedly(fn -> deferred() <= base || Process.sleep(1) end)
    |> Enum.find(&(&1 == true))
  end

  defp deferred, do: TensorBlob.stats().deferred
end
