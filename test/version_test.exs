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

  test "the licence mix.exs declares is the LICENSE file's" do
    assert Mix.Project.config()[:package][:licenses] == ["Apache-2.0"]
    assert File.read!(Path.join(@root, "LICENSE")) =~ "Apache License\n                           Version 2.0"
  end
end
