# The options of TensorBlob.Nx.from_nx/2 and to_nx/2, checked. Compiled
# only when Nx is loaded, as lib/tensor_blob/nx.ex.
if Code.ensure_loaded?(Nx) do
  defmodule TensorBlob.Nx.Options do
    @moduledoc false
    import TensorBlob.Raise, only: [badarg!: 3]

    @doc false
    def __mix_recompile__?, do: not Code.ensure_loaded?(Nx)

    # to_nx/2: {{backend, backend_options}, unsafe_view}.
    def to_nx!(backend) when is_atom(backend) and backend != nil, do: {{backend!(backend), []}, false}
    def to_nx!({backend, opts}) when is_atom(backend) and is_list(opts), do: {{backend!(backend), opts}, false}

    def to_nx!(opts) when is_list(opts) do
      keyword!(opts, "backend: module, unsafe_view: boolean")
      opts = validate_options!(opts, [:backend, unsafe_view: false])

      backend =
        case Keyword.get_lazy(opts, :backend, &Nx.default_backend/0) do
          b when is_atom(b) and b != nil -> {backend!(b), []}
          {b, o} when is_atom(b) and is_list(o) -> {backend!(b), o}
          other -> invalid_option!(:backend, other, "module | {module, keyword}")
        end

      case opts[:unsafe_view] do
        u when is_boolean(u) -> {backend, u}
        other -> invalid_option!(:unsafe_view, other, "boolean")
      end
    end

    def to_nx!(other) do
      "to_nx: expected a backend (module or {module, keyword}) or options, got #{TensorBlob.Raise.inspect_term(other)}"
      |> badarg!(:bad_option, :none)
    end

    # A module that implements Nx.Backend, checked before any data moves:
    # otherwise the call fails later inside Nx (an UndefinedFunctionError,
    # a FunctionClauseError), or a module that merely has a from_binary/3
    # (Nx itself, TensorBlob.Tensor) makes something that is no Nx tensor.
    defp backend!(module) do
      if Code.ensure_loaded?(module) and function_exported?(module, :from_binary, 3) and nx_backend?(module) do
        module
      else
        ("backend: #{inspect(module)} is not an Nx backend (no loaded module of that name " <>
           "implements Nx.Backend); pass one such as Nx.BinaryBackend or Torchx.Backend")
        |> badarg!(:bad_option, :backend)
      end
    end

    # It says it implements Nx.Backend, or has the two callbacks Nx calls
    # first (init/1 when made the default, from_binary/3).
    defp nx_backend?(module) do
      behaviours = for {:behaviour, list} <- module.module_info(:attributes), b <- list, do: b
      Nx.Backend in behaviours or function_exported?(module, :init, 1)
    end

    # from_nx/2: {copy, device, ipc}.
    def from_nx!([]), do: {:auto, nil, false}

    def from_nx!(opts) do
      keyword!(opts, "copy: :auto | :never | :always, device: :cpu, ipc: boolean")
      opts = validate_options!(opts, copy: :auto, device: nil, ipc: false)
      copy = opts[:copy]
      copy in [:auto, :never, :always] or invalid_option!(:copy, copy, ":auto | :never | :always")
      opts[:device] in [nil, :cpu] or invalid_option!(:device, opts[:device], ":cpu")
      is_boolean(opts[:ipc]) or invalid_option!(:ipc, opts[:ipc], "boolean")
      {copy, opts[:device], opts[:ipc]}
    end

    # A proper list of {atom, value}: what Keyword.validate/2 takes (it
    # raises FunctionClauseError on anything else).
    defp keyword!(opts, known) do
      unless Keyword.keyword?(opts) do
        "options: expected a keyword list (#{known}), got #{TensorBlob.Raise.inspect_term(opts)}"
        |> badarg!(:bad_option, :options)
      end
    end

    # Keyword.validate/2, in the library's words.
    defp validate_options!(opts, known) do
      case Keyword.validate(opts, known) do
        {:ok, opts} ->
          opts

        {:error, unknown} ->
          keys =
            Enum.map(known, fn
              {key, _default} -> key
              key -> key
            end)

          "options: unknown option(s) #{TensorBlob.Raise.inspect_term(unknown)}; known: #{TensorBlob.Raise.inspect_term(keys)}"
          |> badarg!(:bad_option, :options)
      end
    end

    defp invalid_option!(key, value, expected) do
      "options: invalid #{key}: #{TensorBlob.Raise.inspect_term(value)}; expected #{expected}"
      |> badarg!(:bad_option, :options)
    end
  end
else
  defmodule TensorBlob.Nx.Options.Absent do
    @moduledoc false
    # Nx was not on the code path when this file was compiled.
    def __mix_recompile__?, do: Code.ensure_loaded?(Nx)
  end
end
