# The options of TensorBlob.Nx.from_nx/2 and to_nx/2, checked. Compiled
# only when Nx is loaded, as lib/tensor_blob/nx.ex.
if Code.ensure_loaded?(Nx) do
  defmodule TensorBlob.Nx.Options do
    @moduledoc false
    import TensorBlob.Raise, only: [badarg!: 3, translating: 1]

    @doc false
    def __mix_recompile__?, do: not Code.ensure_loaded?(Nx)

    # to_nx/2: {{backend, backend_options}, unsafe_view}.
    def to_nx!(backend) when is_atom(backend) and backend != nil, do: {{backend!(backend), []}, false}
    def to_nx!({backend, opts}) when is_atom(backend) and is_list(opts), do: {{backend!(backend), opts}, false}

    def to_nx!(opts) when is_list(opts) do
      backend = {:satisfies, "a module or {module, keyword}", &backend?/1}
      %{unsafe_view: unsafe_view} = opts = checked(opts, [{:backend, backend}, {:unsafe_view, :boolean, false}])

      case Map.get_lazy(opts, :backend, &Nx.default_backend/0) do
        {b, o} -> {{backend!(b), o}, unsafe_view}
        b -> {{backend!(b), []}, unsafe_view}
      end
    end

    def to_nx!(other) do
      "options: expected a backend (module or {module, keyword}) or options, got #{TensorBlob.Raise.inspect_term(other)}"
      |> badarg!(:bad_option, :options)
    end

    defp backend?(b) when is_atom(b) and b != nil, do: true
    defp backend?({b, o}) when is_atom(b) and b != nil and is_list(o), do: true
    defp backend?(_), do: false

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
        |> badarg!(:bad_value, :backend)
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
      spec = [
        {:copy, {:one_of, [:auto, :never, :always]}, :auto},
        {:device, {:one_of, [nil, :cpu]}, nil},
        {:ipc, :boolean, false}
      ]

      %{copy: copy, device: device, ipc: ipc} = checked(opts, spec)
      {copy, device, ipc}
    end

    # The library's option checker (tensor_blob_options), on a keyword list.
    defp checked(opts, spec), do: translating(do: :tensor_blob_options.check(opts, spec, :keywords))
  end
else
  defmodule TensorBlob.Nx.Options.Absent do
    @moduledoc false
    # Nx was not on the code path when this file was compiled.
    def __mix_recompile__?, do: Code.ensure_loaded?(Nx)
  end
end
