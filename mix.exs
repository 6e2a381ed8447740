defmodule Mix.Tasks.Compile.TensorBlobNif do
  @moduledoc false
  # Builds priv/tensor_blob_nif.so and the Erlang API's doc chunks with make:
  # no Hex package needed, so the project compiles offline, as a dependency
  # too. make records the build configuration (LIBTORCH_DIR, CUDA, compilers,
  # flags) beside the objects and rebuilds when it changes; the doc chunks
  # are copied into this application's directory under _build, where
  # code:get_doc/1 finds them.
  use Mix.Task.Compiler

  @root __DIR__

  @impl true
  def run(_args) do
    case make(["nif", "install-docs", "APP_DIR=#{Mix.Project.app_path()}"]) do
      {output, 0} ->
        if output =~ ~r/\b(cc|c\+\+|g\+\+|gcc|clang)\b/, do: Mix.shell().info(output)
        {:ok, []}

      {output, status} ->
        Mix.shell().error(output)
        Mix.raise("tensor_blob: building the NIF failed (make exited with #{status})")
    end
  end

  @impl true
  def clean do
    {_output, _status} = make(["clean-nif"])
    File.rm_rf!(Path.join(Mix.Project.app_path(), "doc"))
    :ok
  end

  defp make(targets) do
    make = System.find_executable("make") || Mix.raise("tensor_blob: `make` is needed to build the NIF")
    System.cmd(make, ["--no-print-directory" | targets], cd: @root, stderr_to_stdout: true)
  end
end

defmodule TensorBlob.MixProject do
  use Mix.Project

  # NX_PATH: directories holding an Nx build (an ebin, or folders with
  # */ebin: Nx and its dependencies), colon-separated. With it, TensorBlob.Nx
  # is compiled and the :nx tests run; the build goes to _build/nx so that
  # builds with and without Nx never mix.
  @nx_ebins for dir <- String.split(System.get_env("NX_PATH", ""), ":", trim: true),
                ebin <- [dir | Path.wildcard(Path.join(dir, "*/ebin"))],
                Path.basename(ebin) == "ebin" and File.dir?(ebin),
                do: Path.expand(ebin)
  Enum.each(@nx_ebins, &Code.prepend_path/1)

  def project do
    [
      app: :tensor_blob,
      version: "0.1.0",
      elixir: "~> 1.14",
      compilers: [:tensor_blob_nif] ++ Mix.compilers(),
      erlc_paths: erlc_paths(Mix.env()),
      elixirc_paths: elixirc_paths(Mix.env()),
      start_permanent: Mix.env() == :prod,
      deps: [],
      build_path: if(@nx_ebins == [], do: "_build", else: "_build/nx"),
      # Mix (Elixir 1.15+) prunes code paths that are not dependencies' before
      # compiling, NX_PATH's included: keep them when it is set.
      prune_code_paths: @nx_ebins == [],
      # Nx is optional and never a declared dependency (no Hex needed).
      xref: [exclude: [Nx, Nx.Type, Nx.Tensor, Nx.Pointer, Nx.BinaryBackend]],
      description: "Zero-copy tensor exchange for the BEAM",
      package: [
        licenses: ["Apache-2.0"],
        files: ~w(c_src lib src priv/.keep priv/include Makefile mix.exs rebar.config README.md)
      ]
    ]
  end

  def application, do: [extra_applications: []]

  defp erlc_paths(:test), do: ["src", "test/support"]
  defp erlc_paths(_), do: ["src"]

  defp elixirc_paths(:test), do: ["lib", "test/support"]
  defp elixirc_paths(_), do: ["lib"]
end
