# :cuda tests need a GPU; :nx tests need Nx on the code path (NX_PATH);
# :torchx tests need Torchx there too.
exclude =
  [:cuda] ++
    if(Code.ensure_loaded?(Nx), do: [], else: [:nx]) ++
    if(Code.ensure_loaded?(Torchx.Backend), do: [], else: [:torchx])

ExUnit.start(exclude: exclude)
