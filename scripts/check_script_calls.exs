# The benches and scripts are not compiled with the library, so a function
# they call that was renamed or moved fails only when someone runs them
# (`make bench` stopped on such a call once). This check reads each file
# given (default: bench/, scripts/ and examples/*.exs), finds every call, capture
# and pipe into a module of the library (an Erlang module of the
# application, or TensorBlob.* through the file's aliases), and fails on
# one the module does not export at that arity.
#
#   mix run --no-start scripts/check_script_calls.exs [FILE ...]
#
# A TensorBlob module that is not compiled here (an optional door: Nx,
# Python, ExTorch) is checked when it is; that it exists at all is checked
# against lib/'s sources.
defmodule CheckScriptCalls do
  def main(files) do
    {:ok, app_modules} = :application.get_key(:tensor_blob, :modules)
    sources = Path.wildcard("lib/**/*.ex") |> Enum.map(&File.read!/1) |> Enum.join("\n")

    results = Enum.flat_map(files, &check_file(&1, app_modules, sources))
    {bad, checked} = Enum.split_with(results, &match?({:error, _}, &1))
    skipped = Enum.count(checked, &(&1 == :skipped))

    Enum.each(bad, fn {:error, text} -> IO.puts(:stderr, "check_script_calls: " <> text) end)

    if bad == [] do
      IO.puts(
        "check_script_calls: #{length(checked) - skipped} calls into the library in #{length(files)} files, " <>
          "all exported#{if skipped > 0, do: " (#{skipped} into doors not compiled here)", else: ""}, ok"
      )
    else
      System.halt(1)
    end
  end

  defp check_file(file, app_modules, sources) do
    ast = file |> File.read!() |> Code.string_to_quoted!(file: file, columns: false)
    aliases = collect_aliases(ast)

    ast
    |> calls([])
    |> Enum.flat_map(fn {mod_ast, fun, arity, line} ->
      case resolve(mod_ast, aliases, app_modules) do
        nil -> []
        mod -> [check(mod, fun, arity, "#{file}:#{line}", sources)]
      end
    end)
  end

  # `alias TensorBlob.{A, B}`, `alias TensorBlob.A` and `alias TensorBlob.A, as: B`.
  defp collect_aliases(ast) do
    {_, acc} =
      Macro.prewalk(ast, %{}, fn
        {:alias, _, [{{:., _, [{:__aliases__, _, base}, :{}]}, _, subs} | _]} = node, acc ->
          {node, Enum.reduce(subs, acc, fn {:__aliases__, _, s}, a -> Map.put(a, List.last(s), base ++ s) end)}

        {:alias, _, [{:__aliases__, _, parts}, [as: {:__aliases__, _, [as]}]]} = node, acc ->
          {node, Map.put(acc, as, parts)}

        {:alias, _, [{:__aliases__, _, parts}]} = node, acc ->
          {node, Map.put(acc, List.last(parts), parts)}

        node, acc ->
          {node, acc}
      end)

    acc
  end

  # Every remote call as {module_ast, fun, arity, line}: a call's own
  # arguments, plus one when it is the right side of a pipe; a capture's
  # stated arity.
  defp calls({:|>, _, [left, {{:., meta, [mod, fun]}, _, args}]}, acc) when is_atom(fun) and is_list(args) do
    acc = Enum.reduce(args, calls(left, acc), &calls/2)
    [{mod, fun, length(args) + 1, meta[:line]} | calls(mod, acc)]
  end

  defp calls({:&, _, [{:/, _, [{{:., meta, [mod, fun]}, _, []}, arity]}]}, acc)
       when is_atom(fun) and is_integer(arity) do
    [{mod, fun, arity, meta[:line]} | acc]
  end

  # `alias TensorBlob.{A, B}` is no call.
  defp calls({{:., _, [_, :{}]}, _, _}, acc), do: acc

  defp calls({{:., meta, [mod, fun]}, _, args}, acc) when is_atom(fun) and is_list(args) do
    [{mod, fun, length(args), meta[:line]} | Enum.reduce(args, calls(mod, acc), &calls/2)]
  end

  defp calls({a, _, b}, acc), do: calls(b, calls(a, acc))
  defp calls({a, b}, acc), do: calls(b, calls(a, acc))
  defp calls(list, acc) when is_list(list), do: Enum.reduce(list, acc, &calls/2)
  defp calls(_, acc), do: acc

  defp resolve(mod, _aliases, app_modules) when is_atom(mod) do
    if mod in app_modules or String.starts_with?(Atom.to_string(mod), "tensor_blob_nif"), do: mod
  end

  defp resolve({:__aliases__, _, [first | rest]}, aliases, _app_modules) do
    parts = Map.get(aliases, first, [first]) ++ rest
    if hd(parts) == :TensorBlob, do: Module.concat(parts)
  end

  defp resolve(_, _, _), do: nil

  defp check(mod, fun, arity, where, sources) do
    name = inspect(mod)

    cond do
      Code.ensure_loaded?(mod) ->
        if function_exported?(mod, fun, arity) or macro_exported?(mod, fun, arity),
          do: :ok,
          else: {:error, "#{where}: #{name}.#{fun}/#{arity} is not exported"}

      String.contains?(sources, "defmodule #{name} do") ->
        :skipped

      true ->
        {:error, "#{where}: #{name} is no module of the library"}
    end
  end
end

files =
  case System.argv() do
    [] -> Enum.flat_map(["bench/*.exs", "scripts/*.exs", "examples/*.exs"], &Path.wildcard/1)
    given -> given
  end

CheckScriptCalls.main(files)
