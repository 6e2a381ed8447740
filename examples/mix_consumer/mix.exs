defmodule MixConsumer.MixProject do
  use Mix.Project

  # A minimal project that uses tensor_blob as a path dependency, to check the
  # library builds and loads as someone else's dependency. A path dependency
  # needs no Hex and no `mix deps.get`: Mix compiles it (and its NIF, through
  # its own :tensor_blob_nif compiler, which runs make in the library's root).
  # TENSOR_BLOB_PATH names the library's root when this project is copied
  # elsewhere (scripts/consumer_test.sh tests such a copy too).
  def project do
    [
      app: :mix_consumer,
      version: "0.1.0",
      elixir: "~> 1.14",
      start_permanent: false,
      deps: [{:tensor_blob, path: System.get_env("TENSOR_BLOB_PATH", "../..")}]
    ]
  end

  def application, do: [extra_applications: []]
end
