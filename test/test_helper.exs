# :cuda tests need a GPU; :nx tests need Nx on the code path (NX_PATH).
exclude = [:cuda] ++ if(Code.ensure_loaded?(Nx), do: [], else: [:nx])
ExUnit.start(exclude: exclude)
