defmodule TensorBlob.VersionTest do
  use ExUnit.Case, async: true

  @root Path.expand("..", __DIR__)

  # One version: mix.exs, the OTP application and the newest CHANGELOG entry.
  test "mix.exs, tensor_blob.app.src and CHANGELOG.md name the same version" do
    version = Mix.Project.config()[:version]
    {:ok, [{:application, :tensor_blob, app}]} = :file.consult(Path.join(@root, "src/tensor_blob.app.src"))
    assert to_string(app[:vsn]) == version

    [newest | _] = Regex.scan(~r/^## (\S+)/m, File.read!(Path.join(@root, "CHANGELOG.md")), capture: :all_but_first)
    assert newest == [version]
  end

  test "mix.exs carries the package and docs metadata, and rebar3's app file the same links" do
    config = Mix.Project.config()
    package = config[:package]
    assert is_binary(config[:description]) and config[:description] != ""
    assert package[:links]["Source"] == config[:source_url]
    assert config[:source_url] =~ ~r{^https://}

    {:ok, [{:application, :tensor_blob, app}]} = :file.consult(Path.join(@root, "src/tensor_blob.app.src"))

    assert {~c"Source", to_charlist(config[:source_url])} in Enum.map(app[:links], fn {k, v} ->
             {to_charlist(k), to_charlist(v)}
           end)

    # Every file the package names exists, and building needs no other.
    for file <- package[:files], do: assert(File.exists?(Path.join(@root, file)), file)

    for needed <-
          ~w(c_src lib src priv/include Makefile scripts/build_cache.sh scripts/libtorch.sh scripts/rebar3_nif.sh mix.exs rebar.config),
        do: assert(needed in package[:files])

    # The README is the docs' main page, every guide an extra, in a group.
    docs = config[:docs]
    assert docs[:main] == "readme"
    guides = @root |> Path.join("guides/*.md") |> Path.wildcard() |> Enum.map(&Path.relative_to(&1, @root))
    assert guides != []
    for extra <- ["README.md", "CHANGELOG.md" | guides], do: assert(extra in docs[:extras], extra)
    assert Enum.sort(docs[:groups_for_extras][:Guides]) == Enum.sort(guides)
    grouped = docs[:groups_for_modules] |> Keyword.values() |> List.flatten()
    for module <- [TensorBlob, TensorBlob.Tensor, TensorBlob.DLPack, TensorBlob.IPC], do: assert(module in grouped)
  end

  test "the licence mix.exs declares is the LICENSE file's" do
    assert Mix.Project.config()[:package][:licenses] == ["Apache-2.0"]
    assert File.read!(Path.join(@root, "LICENSE")) =~ "Apache License\n                           Version 2.0"
  end
end
