# :cuda tests need a GPU; :nx tests need Nx on the code path (NX_PATH);
# :torchx tests need Torchx there too; :telemetry tests need the telemetry
# library (NX_PATH holds it: make nx-test), and :no_telemetry tests its
# absence (make mix-test).
telemetry? = Code.ensure_loaded?(:telemetry)

unless telemetry? do
  IO.puts("note: telemetry is not on the code path: the :telemetry tests are excluded (make nx-test runs them)")
end

exclude =
  [:cuda] ++
    if(Code.ensure_loaded?(Nx), do: [], else: [:nx]) ++
    if(Code.ensure_loaded?(Torchx.Backend), do: [], else: [:torchx]) ++
    if(telemetry?, do: [:no_telemetry], else: [:telemetry])

ExUnit.start(exclude: exclude)
