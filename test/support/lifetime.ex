defmodule TensorBlob.Test.Lifetime do
  @moduledoc false
  # Helpers for lifetime tests: run work in a process that exits, churn
  # memory, and wait for resource destructors.

  @doc "Runs fun in a new process and returns its result; the process exits, dropping everything else it made."
  def in_process(fun) do
    parent = self()
    {pid, mref} = spawn_monitor(fn -> send(parent, {:result, self(), fun.()}) end)

    receive do
      {:result, ^pid, value} ->
        receive do
          {:DOWN, ^mref, :process, ^pid, _} -> value
        end

      {:DOWN, ^mref, :process, ^pid, reason} ->
        raise "worker died: #{inspect(reason)}"
    end
  end

  @doc "Allocates and drops tensors and binaries so freed memory is reused, then collects."
  def churn(rounds \\ 200) do
    for i <- 1..rounds do
      t = TensorBlob.Tensor.zeros({64, 64}, :float32)
      _ = :binary.copy(<<i::32>>, 4096)
      _ = TensorBlob.to_blob(t)
    end

    collect()
  end

  # The collecting and settling are the EUnit suites' (one helper for both).
  def collect, do: :tensor_blob_test_util.gc_all()

  @doc "Collects until stats/0 stops changing (destructors run after GC), and returns it."
  def settled_stats, do: :tensor_blob_test_util.settled_stats()

  @doc "Waits (up to ~2 s) until stats/0 equals expected; returns the last stats."
  def await_stats(expected, tries \\ 200) do
    await(fn stats -> stats == expected end, tries)
  end

  @doc """
  Waits (about `tries` times 10 ms, collecting garbage) for a condition on
  `TensorBlob.stats/0`; returns the last stats. Through the tests' one
  polling helper, `:tensor_blob_test_util.poll/3`.
  """
  def await(condition, tries \\ 200) do
    probe = fn ->
      collect()
      stats = TensorBlob.stats()
      {condition.(stats), stats}
    end

    {_, stats} = :tensor_blob_test_util.poll(probe, tries, 10)
    stats
  end

  @doc """
  Runs fun in a process that exits (in_process/1), then asserts that every
  count of stats/0 returns to where it was before.
  """
  def assert_freed_after(fun) do
    require ExUnit.Assertions
    start = settled_stats()
    in_process(fun)
    ExUnit.Assertions.assert(await_stats(start) == start)
  end

  @doc """
  The lifetime rule's test: `make` runs in a process that exits and gives
  the last user of some memory; every other user is dropped, memory is
  churned and collected, `read` reads the data back through the last
  user, and once it too is dropped every count of stats/0 returns to
  where it was before `make`.
  """
  def assert_last_user(make, read) do
    require ExUnit.Assertions
    start = settled_stats()
    last = in_process(make)
    churn()
    read.(last, start)
    # The last user, dropped here: nothing else holds it.
    last = nil
    _ = last
    ExUnit.Assertions.assert(await_stats(start) == start)
  end
end
