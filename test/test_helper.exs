# :cuda tests need a GPU; :nx tests need Nx on the code path (NX_PATH);
# :torchx tests need Torchx there too; :extorch tests need ExTorch there
# (scripts/compat_extorch.sh); :telemetry tests need the telemetry
# library (NX_PATH holds it: make nx-test), and :no_telemetry tests its
# absence (make mix-test), as :no_nx tests Nx's.
telemetry? = Code.ensure_loaded?(:telemetry)

unless telemetry? do
  IO.puts("note: telemetry is not on the code path: the :telemetry tests are excluded (make nx-test runs them)")
end

# Tests that need what only some machines allow carry a tag for it, and are
# excluded (so counted as excluded, never passed) where it is missing:
# :mount_ns a private /dev/shm (`unshare -m` and a tmpfs mounted there),
# :pid_ns a PID namespace, :other_user a peer node run as user nobody (root
# and setpriv).
allowed? = fn cmd, args ->
  System.find_executable(cmd) != nil and
    match?({_, 0}, System.cmd(cmd, args, stderr_to_stdout: true))
end

capabilities = [
  mount_ns: allowed?.("unshare", ["-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"]),
  pid_ns: allowed?.("unshare", ["--pid", "--fork", "true"]),
  other_user:
    allowed?.("id", ["-u"]) and System.cmd("id", ["-u"]) |> elem(0) |> String.trim() == "0" and
      System.find_executable("setpriv") != nil
]

missing = for {tag, false} <- capabilities, do: tag

# :python tests need Pythonx on the code path (PYTHONX_PATH, built by
# scripts/build_pythonx.sh: make pythonx-test); Pythonx needs Elixir >= 1.15.
python? = Code.ensure_loaded?(Pythonx)

unless python? do
  IO.puts(
    "note: Pythonx is not on the code path (Elixir #{System.version()}; it needs 1.15 or newer and " <>
      "PYTHONX_PATH): the :python tests are excluded (make pythonx-test runs them)"
  )
end

if missing != [] do
  IO.puts("note: this machine does not allow #{inspect(missing)}: the tests tagged so are excluded")
end

# :python_module: the door contract's row for the Python module of
# priv/python (test/support/doors.ex), run by a Python (PYTHON, /usr/bin/python3 or
# python3; PyTorch is not needed).
# :safetensors_reference tests need a python3 with the safetensors format's
# reference implementation and PyTorch (the Debian 13 root has them: make
# safetensors-compat-test).
python_module? = TensorBlob.Test.Doors.python() != nil

reference? =
  match?(
    {_, 0},
    System.cmd(System.get_env("PYTHON", "python3"), ["-c", "import safetensors, torch"], stderr_to_stdout: true)
  )

exclude =
  [:cuda] ++
    if(python_module?, do: [], else: [:python_module]) ++
    if(reference?, do: [], else: [:safetensors_reference]) ++
    missing ++
    if(Code.ensure_loaded?(Nx), do: [:no_nx], else: [:nx]) ++
    if(Code.ensure_loaded?(Torchx.Backend), do: [], else: [:torchx]) ++
    if(Code.ensure_loaded?(ExTorch.Tensor.Blob), do: [], else: [:extorch]) ++
    if(telemetry?, do: [:no_telemetry], else: [:telemetry]) ++
    if(python?, do: [], else: [:python])

ExUnit.start(exclude: exclude)
