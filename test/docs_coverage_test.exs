defmodule TensorBlob.DocsCoverageTest do
  # Every public function of the library's public Elixir modules has
  # documentation (the Erlang API's: test/tensor_blob_docs_tests.erl). A
  # module or function marked @moduledoc false / @doc false is not public.
  use ExUnit.Case, async: true

  @root Path.expand("..", __DIR__)

  # The library's own modules: those compiled from lib/ (the tests'
  # support modules are in the application too), less protocol
  # implementations, which are documented by their protocol.
  defp library_modules do
    {:ok, modules} = :application.get_key(:tensor_blob, :modules)

    # The source is read from the beam file, without loading the module:
    # a test support module whose NIF library is not built cannot load.
    for module <- modules,
        {:ok, {_, [compile_info: info]}} = :beam_lib.chunks(:code.which(module), [:compile_info]),
        source = info[:source],
        source |> to_string() |> Path.relative_to(@root) |> String.starts_with?("lib/"),
        Code.ensure_loaded?(module),
        not function_exported?(module, :__impl__, 1),
        do: module
  end

  test "every public function and macro of a public module has a @doc" do
    modules = library_modules()
    assert TensorBlob.Tensor in modules

    missing =
      for module <- modules,
          {:docs_v1, _, :elixir, _, moduledoc, _, docs} = Code.fetch_docs(module),
          moduledoc != :hidden,
          {{kind, name, arity}, _, _, doc, _} <- docs,
          kind in [:function, :macro],
          doc == :none,
          do: Exception.format_mfa(module, name, arity)

    assert missing == []
  end

  test "every public module has a @moduledoc" do
    missing =
      for module <- library_modules(),
          {:docs_v1, _, :elixir, _, moduledoc, _, _} = Code.fetch_docs(module),
          moduledoc == :none,
          do: inspect(module)

    assert missing == []
  end
end
