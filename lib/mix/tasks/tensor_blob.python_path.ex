defmodule Mix.Tasks.TensorBlob.PythonPath do
  @shortdoc "Prints the folder of tensor_blob's Python module, for PYTHONPATH"
  @moduledoc """
  Prints the folder that holds the `tensor_blob` Python module shipped with
  the library (its `priv/python`), for a shell to capture:

      export PYTHONPATH=$(mix tensor_blob.python_path | tail -n 1)
      python3 -c 'import tensor_blob'

  The task prints the path alone, as the last line of standard output:
  what it compiles on the way (the project, if it is not up to date) goes
  to standard error. Mix checks the project's dependencies before it can
  run a task of one of them, and what a dependency prints then (its first
  build, or a path dependency that prints each time it is checked) comes
  before the task starts, on standard output: `tail -n 1` keeps the path.
  """
  use Mix.Task

  @impl true
  def run(_args) do
    # The project's compile, its output (Mix's shell and the commands it
    # runs) sent to standard error: the task's group leader is swapped for
    # one that writes there for the length of the compile.
    to_stderr(fn -> Mix.Task.run("compile", []) end)

    case :code.priv_dir(:tensor_blob) do
      {:error, _} ->
        Mix.raise(
          "tensor_blob.python_path: tensor_blob is not on the code path; run it in a project that depends on it"
        )

      priv ->
        IO.write(Path.join(to_string(priv), "python") <> "\n")
    end
  end

  defp to_stderr(fun) do
    leader = Process.group_leader()
    relay = spawn_link(fn -> relay(leader) end)
    Process.group_leader(self(), relay)

    try do
      fun.()
    after
      Process.group_leader(self(), leader)
      send(relay, :done)
    end
  end

  # An I/O server that hands every request of standard output to the
  # standard error device.
  defp relay(leader) do
    receive do
      {:io_request, from, reply_as, request} ->
        send(:erlang.whereis(:standard_error), {:io_request, from, reply_as, request})
        relay(leader)

      :done ->
        :ok
    end
  end
end
