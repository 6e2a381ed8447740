defmodule TensorBlob.Test.PythonVM do
  @moduledoc false
  # Python in this VM, as a project that depends on Pythonx has it: its
  # application started and the interpreter initialized from the system's
  # python3 (its libpython, home and executable). Once per VM: whichever
  # suite asks first starts it, the others find it there.

  def start! do
    {:ok, _} = Application.ensure_all_started(:pythonx)

    {paths, 0} =
      System.cmd("python3", [
        "-c",
        "import os, sys, sysconfig; " <>
          "print(os.path.join(sysconfig.get_config_var('LIBDIR'), sysconfig.get_config_var('INSTSONAME'))); " <>
          "print(sys.base_prefix); print(sys.executable)"
      ])

    [lib, home, exe] = String.split(paths, "\n", trim: true)

    try do
      # Pythonx is on the code path only where the :python tests run.
      apply(Pythonx, :init, [lib, home, exe])
    rescue
      error -> if Exception.message(error) =~ "already", do: :ok, else: reraise(error, __STACKTRACE__)
    end

    :ok
  end

  alias TensorBlob.Test.Lifetime

  @doc """
  stats/0 once both sides have released what they can: Pythonx releases
  the Python objects of collected terms later (its janitor, around a later
  evaluation), so a count can stay put between two collections here and
  still change at the next Python call. Collects here and in Python until
  nothing changes across both.
  """
  def settled_stats(tries \\ 100) do
    probe = fn ->
      before = TensorBlob.stats()
      collect_both()
      {Lifetime.settled_stats() == before, nil}
    end

    :tensor_blob_test_util.poll(probe, tries, 20)
    TensorBlob.stats()
  end

  @doc "Waits (a few seconds at most) for stats/0 to equal expected, collecting on both sides."
  def await_stats(expected, tries \\ 200) do
    probe = fn ->
      collect_both()
      stats = TensorBlob.stats()
      {stats == expected, stats}
    end

    {_, stats} = :tensor_blob_test_util.poll(probe, tries, 10)
    stats
  end

  defp collect_both do
    Lifetime.collect()
    # Pythonx is on the code path only where the :python tests run.
    apply(Pythonx, :eval, ["import gc\ngc.collect()", %{}])
  end
end
