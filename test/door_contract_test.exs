defmodule TensorBlob.DoorContractTest do
  # The door contract (ARCHITECTURE.md, "Doors"): one battery, generated from the
  # table of doors (test/support/doors.ex), run against every door. Each
  # door answers bad input with an error whose reason is a row of
  # tables()'s reasons and whose argument names the argument: never a
  # crash, a FunctionClauseError, CaseClauseError, MatchError or a bare
  # ErlangError. Per call it gives every argument each wrong type; a freed
  # tensor; a read-only tensor where the call writes; 0-dim, empty and
  # strided tensors of every dtype the linked libtorch holds; a process
  # killed in the middle of calls; calls from 2 processes at once. The
  # doors that need another runtime carry its tag (test/test_helper.exs).
  #
  # The configuration door sets the application env: not async.
  use ExUnit.Case, async: false

  alias TensorBlob.Test.{Doors, Lifetime}
  alias TensorBlob.Tensor

  # What a call gave: {:ok, result} or {:error, exception, data}, data the
  # error's %{reason, argument} (or :none where it carries none).
  defp outcome(call, args) do
    {:ok, call.run.(args)}
  rescue
    e -> {:error, e, :tensor_blob.error_reason(__STACKTRACE__)}
  catch
    kind, value -> {:error, {kind, value}, :none}
  end

  defp good_args(call), do: Enum.map(call.args, & &1.good.())

  defp with_arg(args, i, value), do: List.replace_at(args, i, value)

  # The error is of the contract: its exception one the facades raise, its
  # reason a row of the table, its argument one the argument may name.
  defp assert_contract_error(outcome, arg, what) do
    reasons = TensorBlob.tables().reasons

    case outcome do
      {:ok, result} ->
        flunk("#{what}: returned #{inspect(result, limit: 5)} where an error was expected")

      {:error, %e{} = ex, data} when e in [ArgumentError, TensorBlob.Error] ->
        assert is_map(data), "#{what}: #{inspect(ex)} carries no reason and argument"
        assert data.reason in reasons, "#{what}: reason #{inspect(data.reason)} is no row of tables()'s reasons"
        assert names?(arg, data.argument), "#{what}: argument #{inspect(data.argument)} does not name #{arg.name}"
        data

      {:error, ex, _} ->
        flunk("#{what}: raised #{inspect(ex, limit: 5)}, not an error of the contract")
    end
  end

  defp names?(%{names: :any_option}, argument), do: is_atom(argument) and argument not in [nil, :none]
  defp names?(%{names: names}, argument), do: argument in names
  defp names?(%{name: name}, argument), do: argument == name

  # An outcome that is a result or an error of the contract, for inputs
  # that a door may take or refuse (a layout, a dtype).
  defp assert_result_or_contract_error(outcome, arg, what) do
    case outcome do
      {:ok, _} -> :ok
      _ -> assert_contract_error(outcome, Map.put(arg, :names, :any_option), what)
    end
  end

  defp tensor_args(call),
    do: for({%{kind: k} = arg, i} <- Enum.with_index(call.args), k in [:tensor, :erl_tensor], do: {arg, i})

  # A tensor of ours in the form the argument takes.
  defp as_kind(%{kind: :erl_tensor}, %Tensor{} = t), do: Tensor.ref(t)
  defp as_kind(%{kind: :erl_tensor}, ref) when is_reference(ref), do: ref
  defp as_kind(%{kind: :tensor}, %Tensor{} = t), do: t
  defp as_kind(%{kind: :tensor}, ref) when is_reference(ref), do: Tensor.wrap(ref)

  # A tensor's reference that outlived its tensor.
  defp freed_ref do
    ext = Lifetime.in_process(fn -> :erlang.term_to_binary(Tensor.ref(Tensor.zeros({4}, :uint8))) end)
    Lifetime.collect()
    :erlang.binary_to_term(ext)
  end

  # 0-dim, empty and strided tensors of each dtype the linked libtorch holds.
  defp layouts do
    for %{name: dtype, available: true} <- TensorBlob.tables().dtypes,
        {layout, t} <- [
          {:zero_dim, Tensor.zeros({}, dtype)},
          {:empty, Tensor.zeros({2, 0}, dtype)},
          {:strided, Tensor.transpose(Tensor.zeros({2, 3}, dtype), 0, 1)}
        ],
        do: {dtype, layout, t}
  end

  for %{door: door, tag: tag, calls: calls} = row <- Doors.table() do
    describe "#{door}" do
      if tag, do: @describetag(tag)

      # The applications the door's runtime needs started (Nx's backend
      # setting, ...).
      setup do
        for app <- unquote(Map.get(row, :apps, [])), do: {:ok, _} = Application.ensure_all_started(app)

        unquote(
          case Map.get(row, :setup) do
            {m, f, a} -> quote(do: apply(unquote(m), unquote(f), unquote(Macro.escape(a))))
            nil -> nil
          end
        )

        :ok
      end

      for call <- calls do
        @call_name call.name

        test "#{call.name}: every argument, each wrong type" do
          call = find_call(unquote(door), @call_name)
          good = good_args(call)

          cases =
            for {arg, i} <- Enum.with_index(call.args), term <- Doors.terms(), Doors.wrong?(arg.kind, term) do
              what = "#{call.name} #{arg.name} = #{inspect(term)}"
              assert_contract_error(outcome(call, with_arg(good, i, term)), arg, what)
            end

          assert cases != []
        end

        test "#{call.name}: a freed tensor" do
          call = find_call(unquote(door), @call_name)
          good = good_args(call)

          for {arg, i} <- tensor_args(call) do
            data = assert_contract_error(outcome(call, with_arg(good, i, as_kind(arg, freed_ref()))), arg, call.name)
            assert data.reason == :not_a_tensor
          end
        end

        if call.writes do
          test "#{call.name}: a read-only tensor" do
            call = find_call(unquote(door), @call_name)
            good = good_args(call)

            for {arg, i} <- tensor_args(call) do
              read_only = Tensor.from_binary(<<1, 2, 3, 4>>, :uint8, {4}, copy: false)
              data = assert_contract_error(outcome(call, with_arg(good, i, as_kind(arg, read_only))), arg, call.name)
              assert data.reason == :read_only
            end
          end
        end

        test "#{call.name}: 0-dim, empty and strided tensors of every dtype" do
          call = find_call(unquote(door), @call_name)
          good = good_args(call)

          for {arg, i} <- tensor_args(call), {dtype, layout, t} <- layouts() do
            what = "#{call.name}: #{layout} #{dtype}"
            assert_result_or_contract_error(outcome(call, with_arg(good, i, as_kind(arg, t))), arg, what)
          end
        end

        test "#{call.name}: a process killed in the middle of calls" do
          call = find_call(unquote(door), @call_name)
          # What the good arguments hold for the VM's life (an export) is made first.
          _ = good_args(call)
          # The counts as the door's runtime settles them (a row's stats:
          # module; Python's objects are released on a later evaluation).
          stats = unquote(Map.get(row, :stats, Lifetime))
          start = stats.settled_stats()
          parent = self()

          pid =
            spawn(fn ->
              send(parent, {:started, self()})
              Stream.repeatedly(fn -> outcome(call, good_args(call)) end) |> Stream.run()
            end)

          ref = Process.monitor(pid)
          assert_receive {:started, ^pid}, 5000
          Process.sleep(5)
          Process.exit(pid, :kill)
          assert_receive {:DOWN, ^ref, :process, ^pid, :killed}, 5000
          # The door still answers, and nothing the killed process held is kept.
          assert {:ok, _} = outcome(call, good_args(call))
          assert stats.await_stats(start) == start
        end

        test "#{call.name}: calls from 2 processes at once" do
          call = find_call(unquote(door), @call_name)

          results =
            for _ <- 1..2 do
              Task.async(fn -> for _ <- 1..50, do: outcome(call, good_args(call)) end)
            end
            |> Task.await_many(60_000)

          for outcomes <- results, o <- outcomes, do: assert({:ok, _} = o)
        end
      end
    end
  end

  # The battery's cases per door, as the doors' table lists them.
  test "every door of the table has calls, and each call arguments" do
    doors = Doors.table()
    assert Enum.map(doors, & &1.door) |> Enum.uniq() |> length() == length(doors)

    for %{door: door, calls: calls} <- doors do
      assert calls != [], "#{door} lists no call"
      for call <- calls, do: assert(call.args != [], "#{door}: #{call.name} lists no argument")
    end
  end

  defp find_call(door, name) do
    %{calls: calls} = Enum.find(Doors.table(), &(&1.door == door))
    Enum.find(calls, &(&1.name == name))
  end
end
