defmodule TensorBlob.ExportBatteryTest do
  # Every public function, not a hand-made list: the application's modules
  # whose docs are not hidden, and each of their exported functions whose
  # doc is not hidden (a function added to the API is in this battery
  # without anyone adding a row). Each is called with every argument
  # replaced by each hostile value, and answers one way: an ArgumentError
  # or TensorBlob.Error whose data has a reason from tables()'s reasons and
  # names an argument. Never FunctionClauseError, CaseClauseError,
  # MatchError, BadFunctionError, Protocol.UndefinedError or a bare
  # ErlangError; and never a return where the function's spec gives the
  # argument a type the hostile value is not of. The door battery
  # (door_contract_test.exs) calls each door with good arguments and one
  # bad one; this one reaches what its table does not list.
  #
  # Not async: among the calls are the settings' setters (refused here, but
  # a setter that took a value would change the application env).
  use ExUnit.Case, async: false

  # Terms that are no argument of any function: each type once, an improper
  # list, a struct of no module, a dead tensor's reference.
  defp hostile do
    [nil, :nope, -1, 1.5, "text", <<1::3>>, [], [1 | 2], %{}, {1}, make_ref(), self(), fn -> :ok end] ++
      [%{__struct__: NoSuchModule}]
  end

  defp public_functions do
    {:ok, modules} = :application.get_key(:tensor_blob, :modules)

    for module <- Enum.sort(modules),
        # function_exported?/3 sees loaded modules only.
        {:module, _} = Code.ensure_loaded(module),
        {:docs_v1, _, _, _, moduledoc, _, entries} <- [Code.fetch_docs(module)],
        moduledoc != :hidden,
        # A protocol's implementations are called by the protocol, with
        # their struct.
        not function_exported?(module, :__impl__, 1),
        {{:function, name, most}, _, _, doc, meta} <- entries,
        doc != :hidden,
        # An Elixir function with default arguments has one entry, at its
        # highest arity.
        arity <- (most - Map.get(meta, :defaults, 0))..most,
        arity > 0,
        function_exported?(module, name, arity),
        do: {module, name, arity}
  end

  defp outcome(module, name, args) do
    {:ok, apply(module, name, args)}
  rescue
    e -> {:error, e, :tensor_blob.error_reason(__STACKTRACE__)}
  catch
    kind, value -> {:error, {kind, value}, :none}
  end

  # The types the spec gives each argument (one list per clause of the
  # spec); none where the function has no spec.
  defp argument_types(module, name, arity) do
    with {:ok, specs} <- Code.Typespec.fetch_specs(module),
         {_, clauses} <- List.keyfind(specs, {name, arity}, 0) do
      for clause <- clauses, do: clause_arguments(clause)
    else
      _ -> []
    end
  end

  defp clause_arguments({:type, _, :fun, [{:type, _, :product, args}, _]}), do: args
  defp clause_arguments({:type, _, :bounded_fun, [fun, _constraints]}), do: clause_arguments(fun)

  # Whether a value is of a type, read leniently: what this reading does
  # not know (user and remote types, variables) takes any value.
  defp of_type?({:type, _, t, _}, _) when t in [:any, :term], do: true
  defp of_type?({:type, _, t, _}, v) when t in [:atom, :node, :module], do: is_atom(v)
  defp of_type?({:type, _, :boolean, _}, v), do: is_boolean(v)

  defp of_type?({:type, _, t, _}, v) when t in [:integer, :non_neg_integer, :pos_integer, :neg_integer, :range],
    do: is_integer(v)

  defp of_type?({:type, _, :float, _}, v), do: is_float(v)
  defp of_type?({:type, _, :number, _}, v), do: is_number(v)
  defp of_type?({:type, _, t, _}, v) when t in [:binary, :bitstring], do: is_bitstring(v)

  defp of_type?({:type, _, t, _}, v) when t in [:iodata, :iolist, :string, :nonempty_string, :charlist],
    do: is_bitstring(v) or is_list(v)

  defp of_type?({:type, _, t, _}, v)
       when t in [:list, :nonempty_list, :maybe_improper_list, :nonempty_maybe_improper_list, :keyword],
       do: is_list(v)

  defp of_type?({:type, _, :map, _}, v), do: is_map(v)
  defp of_type?({:type, _, :tuple, _}, v), do: is_tuple(v)
  defp of_type?({:type, _, :reference, _}, v), do: is_reference(v)
  defp of_type?({:type, _, :pid, _}, v), do: is_pid(v)
  defp of_type?({:type, _, :fun, _}, v), do: is_function(v)
  defp of_type?({:type, _, :union, types}, v), do: Enum.any?(types, &of_type?(&1, v))
  defp of_type?({:atom, _, a}, v), do: v === a
  defp of_type?({:integer, _, n}, v), do: v === n
  defp of_type?({:ann_type, _, [_name, type]}, v), do: of_type?(type, v)
  defp of_type?(_unknown, _), do: true

  # A call with every argument hostile may return where some clause of the
  # spec takes that value for every argument (or there is no spec).
  defp may_return?([], _value), do: true

  defp may_return?(clauses, value),
    do: Enum.any?(clauses, fn args -> Enum.all?(args, &of_type?(&1, value)) end)

  test "every public function answers hostile arguments with an error of the contract" do
    functions = public_functions()
    reasons = TensorBlob.tables().reasons
    # The Erlang API and the Elixir facade are both in the battery.
    assert {:tensor_blob, :to_blob, 1} in functions
    assert {TensorBlob.Tensor, :from_binary, 3} in functions

    results =
      for {module, name, arity} <- functions,
          types = argument_types(module, name, arity),
          value <- hostile() do
        what = "#{inspect(module)}.#{name}/#{arity} with every argument #{inspect(value)}"

        case outcome(module, name, List.duplicate(value, arity)) do
          {:ok, result} ->
            if may_return?(types, value), do: :ok, else: "#{what}: returned #{inspect(result, limit: 5)}"

          {:error, %e{}, %{reason: reason, argument: argument}} when e in [ArgumentError, TensorBlob.Error] ->
            cond do
              reason not in reasons -> "#{what}: reason #{inspect(reason)} is no row of tables()'s reasons"
              argument in [nil, :none] or not is_atom(argument) -> "#{what}: the error names no argument"
              true -> :ok
            end

          {:error, error, _} ->
            "#{what}: raised #{inspect(error, limit: 5)}, not an error of the contract"
        end
      end

    assert Enum.reject(results, &(&1 == :ok)) == []
  end
end
