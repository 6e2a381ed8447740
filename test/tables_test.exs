defmodule TensorBlob.TablesTest do
  # The guides' tables derive from the library's tables: a dtype the C table
  # gains (or a fact about one that changes) fails here until the guide
  # says so too.
  use ExUnit.Case, async: true

  @guide "guides/dtypes.md"
  @formats_heading "## The safetensors format's dtypes"

  # The rows of the guide's dtype table: the cells of each line that starts
  # with a canonical dtype in backquotes.
  defp guide_rows do
    [dtypes | _] = String.split(File.read!(@guide), @formats_heading)
    for "| `" <> _ = line <- String.split(dtypes, "\n"), do: cells(line)
  end

  # The rows of the guide's table of the format's dtypes: after its heading,
  # each line that starts with a name in capitals.
  defp format_rows do
    [_, formats] = String.split(File.read!(@guide), @formats_heading)
    for line <- String.split(formats, "\n"), line =~ ~r/^\| [A-Z]/, do: cells(line)
  end

  defp cells(line), do: line |> String.trim() |> String.trim("|") |> String.split("|") |> Enum.map(&String.trim/1)

  # The names and Nx types a cell shows in backquotes (a module named in
  # passing, as `TensorBlob.Nx`, is neither).
  defp terms(cell) do
    for [_, code] <- Regex.scan(~r/`([^`]+)`/, cell),
        term = code |> Code.eval_string() |> elem(0),
        not (is_atom(term) and match?("Elixir." <> _, Atom.to_string(term))),
        do: term
  end

  test "the dtypes guide's table is the library's dtype table" do
    # In the guide's order, which groups them for the reader.
    rows = Map.new(guide_rows(), fn [name | _] = row -> {name, row} end)
    table = TensorBlob.tables().dtypes
    assert Enum.sort(Map.keys(rows)) == Enum.sort(Enum.map(table, &"`#{&1.name}`"))
    assert map_size(rows) == length(guide_rows())

    for d <- table do
      [_name, bytes, dlpack, nx, names, libtorch] = rows["`#{d.name}`"]
      {code, bits, lanes} = d.dlpack
      assert bytes == "#{d.element_size}", "#{d.name}: bytes"
      shown = if lanes == 1, do: "{#{code}, #{bits}}", else: "{#{code}, #{bits}} x #{lanes}"
      assert dlpack == shown, "#{d.name}: DLPack"
      shown = terms(nx) ++ terms(names)
      # Its Nx type (where it has one) and its other names, nothing more.
      assert Enum.sort(shown -- [d.name]) == Enum.sort(List.wrap(d.nx) ++ d.aliases), "#{d.name}: names"

      if d.since == "1.13",
        do: assert(libtorch == "yes", "#{d.name}: libtorch 1.13"),
        else: assert(libtorch =~ "libtorch #{d.since}+", "#{d.name}: libtorch #{d.since}")
    end
  end

  test "the dtypes guide's table of the safetensors format is the library's" do
    rows = format_rows()
    table = TensorBlob.tables().safetensors
    assert Enum.map(rows, &hd/1) == Enum.map(table, & &1.name)

    for {[name, bits, dtype], f} <- Enum.zip(rows, table) do
      assert bits == "#{f.bits}", "#{name}: bits"

      case f.dtype do
        nil -> assert dtype =~ ~r/^none/, "#{name}: no dtype"
        d -> assert dtype =~ ~r/^`#{d}`/, "#{name}: dtype"
      end
    end
  end

  # The Elixir facade's types are the Erlang API's, which the EUnit suite
  # checks against the tables (spec_types_test): Tensor.memory/1 and
  # Tensor.device/1 answer :tensor_blob.memory() and :tensor_blob.device().
  test "Tensor.memory/1 and device/1 answer the Erlang API's types, whose terms are the tables'" do
    {:ok, specs} = Code.Typespec.fetch_specs(TensorBlob.Tensor)
    {{:memory, 1}, [{:type, _, :fun, [_, memory]}]} = List.keyfind(specs, {:memory, 1}, 0)
    assert {:remote_type, _, [{:atom, _, :tensor_blob}, {:atom, _, :memory}, []]} = memory

    {:ok, types} = Code.Typespec.fetch_types(TensorBlob.Tensor)
    [device] = for {:type, {:device, type, []}} <- types, do: type
    assert {:remote_type, _, [{:atom, _, :tensor_blob}, {:atom, _, :device}, []]} = device
    answers = TensorBlob.tables().storage |> Enum.map(& &1.memory) |> Enum.uniq()
    assert TensorBlob.Tensor.memory(TensorBlob.Tensor.zeros({1}, :float32)) in answers
  end
end
