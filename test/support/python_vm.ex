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
end
