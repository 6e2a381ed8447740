defmodule Mix.Tasks.Compile.TensorBlobNif do
  @moduledoc false
  # Builds priv/tensor_blob_nif.so with make: no Hex package needed, so the
  # project compiles offline, as a dependency too.
  use Mix.Task.Compiler

  @root __DIR__

  @impl true
  def run(_args) do
    make = System.find_executable("make") || Mix.raise("tensor_blob: `make` is needed to build the NIF")

    case System.cmd(make, ["--no-print-directory", "nif"], cd: @root, stderr_to_stdout: true) do
      {output, 0} ->
        if output =~ ~r/\b(cc|c\+\+|g\+\+|gcc|clang)\b/, do: Mix.shell().info(output)
        {:ok, []}

      {output, status} ->
        Mix.shell().error(output)
        Mix.raise("tensor_blob: building the NIF failed (make exited with #{status})")
    end
  end
end

defmodule TensorBlob.MixProject do
  use Mix.Project

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
      description: "Zero-copy tensor exchange for the BEAM",
      package: [licenses: ["Apache-2.0"], files: ~w(c_src lib src priv/.keep Makefile mix.exs rebar.config README.md)]
    ]
  end

  def application, do: [extra_applications: []]

  defp erlc_paths(:test), do: ["src", "test/support"]
  defp erlc_paths(_), do: ["src"]

  defp elixirc_paths(:test), do: ["lib", "test/support"]
  defp elixirc_paths(_), do: ["lib"]
end
