defmodule Mix.Tasks.Compile.TensorBlobNif do
  @moduledoc false
  # Builds the NIF library and the Erlang API's doc chunks with make: no Hex
  # package needed, so the project compiles offline, as a dependency too.
  # make is given this application's directory under _build (APP_DIR): as
  # someone's dependency, everything is built there (objects in obj/, the
  # library in priv/, the chunks in doc/chunks), never in this checkout, so
  # a read-only checkout builds and projects sharing one keep their builds
  # apart; as the top-level project, in build/ and priv/ as `make` does.
  # make records the build configuration (LIBTORCH_DIR, CUDA, compilers,
  # flags) beside the objects and rebuilds when it changes.
  use Mix.Task.Compiler

  @root __DIR__

  # Quiet, as Mix's own compilers are: make prints a command only when it
  # fails (and then Mix shows all make said), and its compilers' warnings;
  # `mix compile --verbose`, V=1 or TB_VERBOSE=1 show every command. The
  # objects come from the object cache when an earlier build of the same
  # configuration made them (scripts/build_cache.sh).
  @impl true
  def run(args) do
    {opts, _, _} = OptionParser.parse(args, switches: [verbose: :boolean, force: :boolean])
    verbose = opts[:verbose] || System.get_env("V") == "1" || System.get_env("TB_VERBOSE") == "1"
    stamp = stamp_path()
    inputs = inputs()

    # Nothing that make reads has changed since it last succeeded here, and
    # its products are in place: make would do nothing, so it is not run
    # (it costs more than the rest of a no-op `mix compile`).
    if !opts[:force] and File.read(stamp) == {:ok, inputs} and products?() do
      {:noop, []}
    else
      build(stamp, inputs, verbose)
    end
  end

  defp build(stamp, inputs, verbose) do
    # A cold build takes a while before anything else is said: say what it does.
    unless File.exists?(built_library()) do
      Mix.shell().info("==> tensor_blob: compiling the NIF against #{libtorch()} (once; later builds are incremental)")
    end

    case make(["nif", "install-docs", "APP_DIR=#{Mix.Project.app_path()}" | if(verbose, do: ["V=1"], else: [])]) do
      {output, 0} ->
        cond do
          verbose and output != "" -> Mix.shell().info(output)
          output =~ ~r/\bwarning:/ -> Mix.shell().info(output)
          true -> :ok
        end

        File.mkdir_p!(Path.dirname(stamp))
        File.write!(stamp, inputs)
        {:ok, []}

      {output, status} ->
        File.rm(stamp)
        Mix.shell().error(output)
        Mix.raise("tensor_blob: building the NIF failed (make exited with #{status})")
    end
  end

  @impl true
  def clean do
    {_output, _status} = make(["clean-nif", "APP_DIR=#{Mix.Project.app_path()}"])
    File.rm_rf!(Path.join(Mix.Project.app_path(), "doc"))
    File.rm(stamp_path())
    :ok
  end

  defp stamp_path, do: Path.join(Mix.Project.manifest_path(), "compile.tensor_blob_nif")

  # make's products are in place: the library and the reaper in the
  # application's priv (for the top-level project a link to this checkout's
  # priv). As a dependency they are copies of what make built in obj/:
  # Mix copies the checkout's priv over the application's before each
  # compile, and a checkout built on its own holds a library of its own
  # build there, which must not stand in for this one (make copies the
  # right one back).
  defp products? do
    app = Mix.Project.app_path()
    priv = Path.join(app, "priv")
    names = ["tensor_blob_nif.so", "tensor_blob_reaper"]

    if top_level?() do
      Enum.all?(names, &File.exists?(Path.join(priv, &1)))
    else
      Enum.all?(
        names,
        &(File.read(Path.join(priv, &1)) == File.read(Path.join([app, "obj", &1])) and File.exists?(Path.join(priv, &1)))
      )
    end
  end

  # Built as the top-level project (in this checkout's _build), as make
  # tells them apart.
  defp top_level?, do: String.starts_with?(Mix.Project.app_path() <> "/", Path.join(@root, "_build") <> "/")

  # Where make links the library (Makefile's NIF).
  defp built_library do
    if top_level?(),
      do: Path.join(@root, "priv/tensor_blob_nif.so"),
      else: Path.join([Mix.Project.app_path(), "obj", "tensor_blob_nif.so"])
  end

  # Everything make's result depends on, as text: the sources and headers
  # it compiles, the Erlang sources of the doc
  # chunks, the Makefile, the settings it reads from the environment, the
  # Erlang runtime and the libtorch it builds against (its version header
  # and library). Cheap to compute: a few stats, no process.
  @env_inputs ~w(LIBTORCH_DIR TB_CUDA CUDA_HOME CC CXX OPT SANITIZE TENSOR_BLOB_CACHE TENSOR_BLOB_CACHE_DIR)
  defp inputs do
    files =
      [
        "c_src/**/*",
        "priv/include/**/*",
        "src/*.erl",
        "src/*.hrl",
        "Makefile",
        "scripts/build_cache.sh",
        "scripts/libtorch.sh"
      ]
      |> Enum.flat_map(&Path.wildcard(Path.join(@root, &1)))
      |> Kernel.++(libtorch_files())
      |> Enum.sort()
      |> Enum.map(fn file ->
        # The sources by their content (a time in seconds can miss an edit
        # made within the second of a build), libtorch's files by size and time.
        case File.stat(file) do
          {:ok, %File.Stat{type: :regular, size: size, mtime: mtime}} ->
            if String.starts_with?(file, @root <> "/"),
              do: "#{file} #{Base.encode16(:erlang.md5(File.read!(file)))}",
              else: "#{file} #{size} #{inspect(mtime)}"

          _ ->
            ""
        end
      end)

    env = for var <- @env_inputs, do: "#{var}=#{System.get_env(var)}"
    runtime = "erts=#{:code.root_dir()} #{:erlang.system_info(:version)} app=#{Mix.Project.app_path()}"
    Enum.join([runtime | env] ++ files, "\n")
  end

  defp libtorch_dir do
    case System.get_env("LIBTORCH_DIR", "") do
      dir when dir in ["", "/usr", "/usr/"] -> nil
      dir -> dir
    end
  end

  # libtorch's version headers (2.14 declares the numbers in
  # torch/headeronly/version.h, older ones in torch/version.h) and library.
  defp libtorch_files do
    include = if dir = libtorch_dir(), do: Path.join(dir, "include"), else: "/usr/include"

    libraries =
      if dir = libtorch_dir(),
        do: Path.wildcard(Path.join(dir, "lib/libtorch.*")),
        else: Path.wildcard("/usr/lib/*/libtorch.so*")

    [Path.join(include, "torch/headeronly/version.h"), Path.join(include, "torch/csrc/api/include/torch/version.h")] ++
      libraries
  end

  # "libtorch 1.13.0 of the system", from its version header (as
  # scripts/libtorch.sh reads it for make).
  defp libtorch do
    where = if dir = libtorch_dir(), do: "at #{dir}", else: "of the system"

    version =
      Enum.find_value(Enum.take(libtorch_files(), 2), "(version unknown)", fn file ->
        with {:ok, text} <- File.read(file),
             [_ | _] = parts <-
               for(p <- ~w(MAJOR MINOR PATCH), m = Regex.run(~r/TORCH_VERSION_#{p} (\d+)/, text), do: List.last(m)) do
          Enum.join(parts, ".")
        else
          _ -> nil
        end
      end)

    "libtorch #{version} #{where}"
  end

  defp make(targets) do
    make = System.find_executable("make") || Mix.raise("tensor_blob: `make` is needed to build the NIF")
    System.cmd(make, ["--no-print-directory" | targets], cd: @root, stderr_to_stdout: true)
  end
end

defmodule TensorBlob.MixProject do
  use Mix.Project

  @version "0.1.0"
  # The repository: the package's link, and where the docs' "source" links
  # point (at the tag of this version).
  @source_url "https://github.com/tensor-blob/tensor_blob"

  # NX_PATH: directories holding an Nx build (an ebin, or folders with
  # */ebin: Nx and its dependencies), colon-separated. With it, TensorBlob.Nx
  # is compiled and the :nx tests run; the build goes to _build/nx so that
  # builds with and without Nx never mix. PYTHONX_PATH (a Pythonx build,
  # scripts/build_pythonx.sh) is taken the same way: TensorBlob.Python and
  # the :python tests.
  @nx_ebins for dir <-
                  String.split(System.get_env("NX_PATH", "") <> ":" <> System.get_env("PYTHONX_PATH", ""), ":",
                    trim: true
                  ),
                ebin <- [dir | Path.wildcard(Path.join(dir, "*/ebin"))],
                Path.basename(ebin) == "ebin" and File.dir?(ebin),
                do: Path.expand(ebin)
  Enum.each(@nx_ebins, &Code.prepend_path/1)

  def project do
    [
      app: :tensor_blob,
      version: @version,
      elixir: "~> 1.14",
      compilers: [:tensor_blob_nif] ++ Mix.compilers(),
      erlc_paths: erlc_paths(Mix.env()),
      elixirc_paths: elixirc_paths(Mix.env()),
      start_permanent: Mix.env() == :prod,
      deps: deps(),
      build_path: if(@nx_ebins == [], do: "_build", else: "_build/nx"),
      # Mix (Elixir 1.15+) prunes code paths that are not dependencies' before
      # compiling, NX_PATH's included: keep them when it is set.
      prune_code_paths: @nx_ebins == [],
      # Files under test/ that are not ExUnit tests: a module dialyzer reads,
      # the Python tests' peer (Elixir 1.19+ warns of files it neither loads
      # nor ignores).
      test_ignore_filters: [&String.starts_with?(&1, ["test/dialyzer/", "test/python/"])],
      description:
        "Zero-copy tensor exchange for the BEAM: libtorch tensors shared by pointer with Nx/Torchx, " <>
          "ExTorch, DLPack, binaries, shared memory and other NIFs",
      source_url: @source_url,
      package: package(),
      docs: docs()
    ] ++ optional_calls()
  end

  # Nx and Pythonx are optional dependencies only when tensor_blob is
  # someone's dependency (see deps/0): their calls are not warned of where
  # they are absent. Elixir 1.20 deprecates xref's exclude for the
  # compiler's no_warn_undefined; before 1.15 only xref's exclude also
  # silences "defined in application :nx ... does not depend on :nx".
  @optional_modules [Nx, Nx.Type, Nx.Tensor, Nx.Pointer, Nx.BinaryBackend, Nx.LazyContainer, Nx.Container] ++
                      [Pythonx, Pythonx.Encoder]
  defp optional_calls do
    if Version.match?(System.version(), ">= 1.15.0"),
      do: [elixirc_options: [no_warn_undefined: @optional_modules]],
      else: [xref: [exclude: @optional_modules]]
  end

  defp package do
    [
      licenses: ["Apache-2.0"],
      links: %{"Source" => @source_url, "Changelog" => "#{@source_url}/blob/v#{@version}/CHANGELOG.md"},
      # What building needs (the Makefile's own files included), and the
      # documentation; not the tests, benchmarks or fuzzers.
      files:
        ~w(c_src lib src priv/.keep priv/include priv/python guides Makefile scripts/build_cache.sh scripts/libtorch.sh scripts/doc_chunks.escript scripts/rebar3_nif.sh mix.exs rebar.config README.md CHANGELOG.md LICENSE)
    ]
  end

  # ExDoc's settings (`mix docs` where ex_doc is installed; tensor_blob
  # depends on it nowhere, so the offline build needs nothing).
  defp docs do
    guides = Path.wildcard(Path.join(__DIR__, "guides/*.md")) |> Enum.map(&Path.relative_to(&1, __DIR__)) |> Enum.sort()

    [
      main: "readme",
      source_url: @source_url,
      source_ref: "v#{@version}",
      extras: ["README.md" | guides] ++ ["ARCHITECTURE.md", "CHANGELOG.md"],
      groups_for_extras: [Guides: guides, Project: ["ARCHITECTURE.md", "CHANGELOG.md"]],
      groups_for_modules: [
        Exchange: [TensorBlob, TensorBlob.Tensor, TensorBlob.Blob, TensorBlob.BlobView, TensorBlob.Error],
        Interop: [
          TensorBlob.DLPack,
          TensorBlob.Nx,
          TensorBlob.Python,
          TensorBlob.IPC,
          TensorBlob.IPC.Handle,
          TensorBlob.Nodes,
          TensorBlob.CUDA
        ],
        Erlang: [:tensor_blob]
      ]
    ]
  end

  def application, do: [extra_applications: []]

  # Nx, Pythonx and ExTorch are optional dependencies (TensorBlob.Nx,
  # TensorBlob.Python and TensorBlob.ExTorch are compiled when each is
  # there), declared only when tensor_blob is built as someone's dependency:
  # then Mix builds them first and keeps them on the code path while
  # compiling tensor_blob (Elixir 1.15+ prunes the paths of what a
  # dependency does not declare), and recompiles tensor_blob when one comes
  # or goes, so each module exists exactly when the consumer has its library.
  # As the top-level project (its own build and tests) there is no
  # dependency at all: nothing needs Hex, and NX_PATH (PYTHONX_PATH) gives
  # them to the tests.
  #
  # A Hex requirement needs Hex even where the consumer overrides it (Mix
  # looks for an SCM for every child dependency), so: where the consumer
  # itself lists one from a path or git, the same source is declared (the
  # two converge, no `override:` needed); otherwise, with Hex, the
  # requirement below; without Hex and without it in the consumer, nothing.
  @optional_deps [nx: ">= 0.9.0", pythonx: ">= 0.4.0", extorch: ">= 0.4.0"]
  @source_opts [:path, :git, :github, :ref, :branch, :tag, :sparse, :subdir, :submodules, :depth]

  defp deps do
    # While Mix loads a dependency's mix.exs, the project on the stack is
    # the one that depends on it; for the top-level project there is none.
    if Mix.Project.get() do
      for {app, requirement} <- @optional_deps, dep = optional_dep(app, requirement), do: dep
    else
      []
    end
  end

  defp optional_dep(app, requirement) do
    case consumer_source(app) do
      [_ | _] = source -> {app, source ++ [optional: true]}
      _ -> if Code.ensure_loaded?(Hex), do: {app, requirement, optional: true}
    end
  end

  # How the consuming project lists app: its path or git options, or nil.
  defp consumer_source(app) do
    opts =
      Enum.find_value(Mix.Project.config()[:deps] || [], fn
        {^app, opts} when is_list(opts) -> opts
        {^app, _requirement, opts} when is_list(opts) -> opts
        _ -> nil
      end)

    case Keyword.take(opts || [], @source_opts) do
      [] ->
        nil

      source ->
        if path = source[:path] do
          Keyword.put(source, :path, Path.expand(path, Path.dirname(Mix.Project.project_file())))
        else
          source
        end
    end
  end

  defp erlc_paths(:test), do: ["src", "test/support"]
  defp erlc_paths(_), do: ["src"]

  defp elixirc_paths(:test), do: ["lib", "test/support"]
  defp elixirc_paths(_), do: ["lib"]
end
