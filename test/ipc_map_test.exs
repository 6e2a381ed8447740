defmodule TensorBlob.IPCMapTest do
  # The maps of shared tensors that other languages read and print
  # (priv/python/tensor_blob.py): IPC.to_map/1, to_json/1 and open/1.
  # The exchanges with Python processes are in test/python/module_test.py.
  use ExUnit.Case, async: true

  alias TensorBlob.{IPC, Tensor}
  alias TensorBlob.IPC.JSON

  test "to_json/1 then open/1 opens the region, in both formats" do
    data = <<1::signed-64-native, -2::signed-64-native, 3::signed-64-native, 4::signed-64-native>>

    for export <- [&IPC.export/1, &IPC.export_torch/1] do
      handle = export.(Tensor.from_binary(data, :int64, {2, 2}))
      line = IPC.to_json(handle)

      assert line ==
               ~s({"handle": "#{handle.handle}", "dtype": "int64", "shape": [2, 2], "data_size": 32})

      opened = IPC.open(line)
      assert Tensor.shape(opened) == {2, 2} and Tensor.dtype(opened) == :int64
      assert Tensor.to_binary(opened) == data
      assert Tensor.memory(opened) == :ipc
      # The map, with string or atom keys, opens the same region.
      assert Tensor.to_binary(IPC.open(IPC.to_map(handle))) == data
      assert Tensor.to_binary(IPC.open(%{handle: handle.handle, dtype: :int64, shape: [4]})) == data
    end
  end

  test "open/1 takes the map Python prints: keys in any order, spaces, a name without its slash" do
    handle = IPC.export(IPC.zeros({3}, :float32))
    name = String.trim_leading(handle.handle, "/")
    line = ~s(  { "shape" : [3] ,"data_size":12, "dtype": "float32", "handle": "#{name}" } )
    assert Tensor.to_binary(IPC.open(line)) == <<0::96>>
    # The exporter's tensor keeps the region's name until the open above.
    assert Tensor.memory(handle.tensor) == :ipc
  end

  test "open/1 says what it expects" do
    handle = IPC.export(IPC.zeros({3}, :float32))

    for bad <- [
          "not json",
          ~s({"handle": "#{handle.handle}", "dtype": "float32", "shape": [3]} trailing),
          ~s([1, 2])
        ] do
      assert_raise ArgumentError, ~r/expected a shared tensor's map as JSON/, fn -> IPC.open(bad) end
    end

    names = Enum.map_join(TensorBlob.tables().dtypes, ", ", &Atom.to_string(&1.name))

    assert_raise ArgumentError, ~s[dtype: unknown dtype "float31_not_a_dtype" (one of #{names})], fn ->
      IPC.open(%{"handle" => handle.handle, "dtype" => "float31_not_a_dtype", "shape" => [3]})
    end
  end

  # Each malformed field, whatever its type, raises ArgumentError naming
  # it, in the map and in its JSON alike.
  test "open/1 names the field that is missing or malformed" do
    handle = IPC.export(IPC.zeros({3}, :float32))
    good = %{"handle" => handle.handle, "dtype" => "float32", "shape" => [3]}

    cases = [
      {Map.delete(good, "handle"), "handle: the map names no region"},
      {%{good | "handle" => 7}, "handle: expected a region's name (a string), got 7"},
      {Map.delete(good, "dtype"), "dtype: the map names no dtype (one of bool, "},
      {%{good | "dtype" => nil}, "dtype: the map names no dtype"},
      {%{good | "dtype" => 32}, "dtype: expected a dtype's name (a string), got 32"},
      {%{good | "dtype" => true}, "dtype: expected a dtype's name (a string), got true"},
      {Map.delete(good, "shape"), "shape: the map has no shape"},
      {%{good | "shape" => [1 | 3]}, "shape: expected a list of sizes (non-negative integers), got [1 | 3]"},
      {%{good | "shape" => [3 | :tail]}, "shape: expected a list of sizes"},
      {%{good | "shape" => [-1]}, "shape: expected a list of sizes"},
      {%{good | "shape" => [1.5]}, "shape: expected a list of sizes"},
      {%{good | "shape" => "3"}, "shape: expected a list of sizes"},
      {%{good | "shape" => %{}}, "shape: expected a list of sizes"},
      {Map.put(good, "data_size", "12"),
       ~s|data_size: expected the region's data bytes (a non-negative integer), got "12"|},
      {Map.put(good, "data_size", -1), "data_size: expected the region's data bytes"},
      {Map.put(good, "data_size", 8), "data_size: 8 bytes is less than the 12 that float32 [3] needs"}
    ]

    for {spec, message} <- cases do
      error = assert_raise ArgumentError, fn -> IPC.open(spec) end
      assert String.starts_with?(error.message, message), "#{inspect(spec)}: #{error.message}"

      # The same map with atom keys, and (where JSON can say it) as JSON.
      atoms = Map.new(spec, fn {k, v} -> {String.to_existing_atom(k), v} end)
      assert_raise ArgumentError, fn -> IPC.open(atoms) end

      if json?(spec) do
        error = assert_raise ArgumentError, fn -> IPC.open(JSON.encode(spec, :fallback)) end
        assert String.starts_with?(error.message, message), "JSON #{inspect(spec)}: #{error.message}"
      end
    end

    for other <- [:nope, 7, [1, 2], {:handle, "x"}] do
      assert_raise ArgumentError, ~r/expected a shared tensor's map/, fn -> IPC.open(other) end
    end

    # A huge size is refused without multiplying out the shape.
    huge = Bitwise.bsl(1, 100_000)
    error = assert_raise ArgumentError, fn -> IPC.open(Map.put(%{good | "shape" => [huge, huge]}, "data_size", 12)) end
    assert error.message =~ "data_size: 12 bytes is less than the 18446744073709551616"
  end

  defp json?(term) when is_map(term), do: Enum.all?(term, fn {k, v} -> is_binary(k) and json?(v) end)
  defp json?(term) when is_list(term), do: length_proper?(term) and Enum.all?(term, &json?/1)
  defp json?(term), do: is_binary(term) or is_integer(term) or is_boolean(term) or term == nil

  defp length_proper?([]), do: true
  defp length_proper?([_ | t]), do: length_proper?(t)
  defp length_proper?(_), do: false

  test "open/1 looks a dtype up in the library's table: names and aliases, strings and atoms" do
    for %{name: name, aliases: aliases, element_size: size, available: true} <- TensorBlob.tables().dtypes,
        as <- [name | aliases],
        key <- [as, Atom.to_string(as)] do
      handle = IPC.export(IPC.zeros({2}, name))
      opened = IPC.open(%{"handle" => handle.handle, "dtype" => key, "shape" => [2], "data_size" => 2 * size})
      assert Tensor.dtype(opened) == name, inspect(key)
      # The exporter's tensor keeps the region's name until the open above.
      assert Tensor.memory(handle.tensor) == :ipc
    end
  end

  # The dtype of a JSON line is found in a VM that has not yet loaded a
  # module that spells it as an atom.
  test "open/1 of a JSON line in a fresh VM" do
    handle = IPC.export(Tensor.from_binary(<<1.5::float-32-native, 2.5::float-32-native>>, :float32, {2}))
    ebin = Path.dirname(:code.which(TensorBlob.IPC))

    code = """
    line = System.fetch_env!("TB_LINE")
    t = TensorBlob.IPC.open(line)
    IO.puts(inspect({TensorBlob.Tensor.dtype(t), TensorBlob.Tensor.to_binary(t)}))
    """

    {out, status} =
      System.cmd("elixir", ["-pa", ebin, "-e", code], env: [{"TB_LINE", IPC.to_json(handle)}], stderr_to_stdout: true)

    assert status == 0, out
    assert out =~ inspect({:float32, <<1.5::float-32-native, 2.5::float-32-native>>})
    assert Tensor.memory(handle.tensor) == :ipc
  end

  # A line is bounded: a hostile one is refused at once, without decoding
  # it (a 5 MB handle took 8 s and 0.8 GB). The bounds on time leave room
  # for a loaded machine: they catch seconds, not milliseconds.
  # "At once" is counted in reductions (the machine's load does not change
  # them), the fewest of three runs: refusing a line by its length costs
  # about 100, decoding it first (what the bound is there against) from
  # 10,000 (the spaces) to 5,000,000 (the long name).
  test "open/1 refuses a line longer than a map needs, at once" do
    handle = IPC.export(IPC.zeros({3}, :float32))

    for line <- [
          ~s({"handle": "#{String.duplicate("a", 5_000_000)}", "dtype": "float32", "shape": [3]}),
          ~s({"handle": "#{handle.handle}", "dtype": "float32", "shape": [#{String.duplicate("1, ", 10_000)}1]}),
          ~s({"handle": "#{handle.handle}", "dtype": "float32", "shape": [3]}#{String.duplicate(" ", 10_000)})
        ] do
      error = assert_raise ArgumentError, fn -> IPC.open(line) end
      assert error.message =~ "of at most 8192 bytes", error.message
      assert error.message =~ "got #{byte_size(line)} bytes"
      cost = Enum.min(for _ <- 1..3, do: reductions(fn -> catch_error(IPC.open(line)) end))
      assert cost < 1_000, "#{cost} reductions"
    end

    # The longest line that is accepted decodes at once too: a name of
    # escapes, each a piece of its own, costs about in proportion to them:
    # 10x the escapes cost 18x (the name's error message among it), far
    # from the 100x of a decoder quadratic in them.
    [small, big] =
      for n <- [130, 1300] do
        line = ~s({"handle": "#{String.duplicate("\\u0041", n)}", "dtype": "float32", "shape": [3]})
        assert byte_size(line) <= 8192
        error = assert_raise ArgumentError, fn -> IPC.open(line) end
        assert error.message =~ "handle: "
        Enum.min(for _ <- 1..3, do: reductions(fn -> catch_error(IPC.open(line)) end))
      end

    assert big < 40 * small, "#{small} then #{big} reductions"
  end

  # The decoders themselves run in time linear in the text (the bound on
  # a line is for memory and for what a map needs), counted in reductions
  # (the machine's load does not change them): 10x the text, plain runs,
  # escapes and multi-byte characters, costs far less than the 100x of a
  # quadratic decoder.
  test "the JSON decoders are linear in the text" do
    for backend <- backends() do
      [small, big] =
        for n <- [100_000, 1_000_000] do
          text = ~s(["#{String.duplicate("a", n)}", "#{String.duplicate("\\n", n)}", "#{String.duplicate("é", n)}"])
          reductions(fn -> {:ok, [_, _, _]} = JSON.decode(text, backend) end)
        end

      assert big < 25 * small, "#{backend}: #{small} then #{big} reductions"
    end
  end

  # The decoder runs in a process whose heap is large enough from the
  # start that no collection runs: the VM charges a collection's work to
  # the process's reductions, and when collections land depends on sizes
  # other than the text's.
  defp reductions(fun) do
    parent = self()

    :erlang.spawn_opt(
      fn ->
        {:reductions, before} = Process.info(self(), :reductions)
        fun.()
        {:reductions, later} = Process.info(self(), :reductions)
        send(parent, {:reductions, later - before})
      end,
      [:link, min_heap_size: 32 * 1024 * 1024]
    )

    receive do
      {:reductions, n} -> n
    end
  end

  defp backends, do: if(Code.ensure_loaded?(:json), do: [:fallback, :stdlib], else: [:fallback])

  # A spec from outside the VM (a decoded JSON map) has string keys:
  # open/1 takes them; from_blob/2, whose spec names memory of this VM,
  # says its keys must be atoms rather than that a field is missing.
  test "a from_blob spec with string keys is refused as such" do
    t = Tensor.from_binary(<<1, 2, 3, 4>>, :uint8, {4})
    blob = TensorBlob.to_blob(t)
    spec = %{"ptr" => blob.ptr, "shape" => [4], "dtype" => "uint8", "owner" => t}

    error = assert_raise ArgumentError, fn -> TensorBlob.from_blob(spec) end
    assert error.message =~ ~s(spec: its keys must be atoms)
    assert error.message =~ ~s("ptr", "shape", "dtype", "owner")
    assert error.message =~ "TensorBlob.IPC.open/1"
  end

  test "to_map/1 refuses a CUDA handle, pointing at the CUDA share" do
    assert_raise ArgumentError, ~r/CUDA.export_torch_share/, fn ->
      IPC.to_map(%IPC.Handle{handle: <<0::512>>, address: 0, data_size: 4})
    end
  end

  # The small codec of older OTPs, tested on every OTP; stdlib's json
  # where it exists (OTP 27), against the same cases.
  @json_cases [
    {~s({"a": "q\\"\\\\\\n\\u00e9/", "b": [1, -2, [], {}], "c": null, "d": true}),
     %{"a" => "q\"\\\né/", "b" => [1, -2, [], %{}], "c" => nil, "d" => true}},
    {~s( {"handle":"/torch_1_2_3","shape":[2,3],"data_size":24} ),
     %{"handle" => "/torch_1_2_3", "shape" => [2, 3], "data_size" => 24}},
    {~s(["\\ud83d\\ude00", "é", "\\/", 0, -0, 123456789012345678901234567890]),
     ["😀", "é", "/", 0, 0, 123_456_789_012_345_678_901_234_567_890]},
    {~s([false, null, "\\t\\r\\b\\f"]), [false, nil, "\t\r\b\f"]}
  ]

  @json_refused [
    "",
    "{",
    ~s({"a" 1}),
    ~s({"a": 1.5}),
    ~s([1e3]),
    ~s({"a": 1,}),
    "[1 2]",
    "[01]",
    "[-]",
    ~s(["a\nb"]),
    ~s(["\\x"]),
    ~s(["\\u12G4"]),
    ~s(["\\u-123"]),
    "[1] x",
    ~s({"a": 1} {),
    ~s(["\\ud800"]),
    ~s(["\\udc00"]),
    ~s(["\\ud800\\u0041"])
  ]

  for backend <- [:fallback, :stdlib] do
    if backend == :stdlib and not Code.ensure_loaded?(:json),
      do: @tag(skip: "stdlib has no json module before OTP 27: the fallback codec serves")

    test "the JSON both ways (#{backend}): escapes, nesting, refusals" do
      backend = unquote(backend)

      for {text, value} <- @json_cases do
        assert JSON.decode(text, backend) == {:ok, value}, text
        assert JSON.decode(JSON.encode(value, backend), backend) == {:ok, value}
      end

      for bad <- @json_refused do
        assert JSON.decode(bad, backend) == :error, bad
      end

      # The line of a handle, spaced as Python prints it, either way.
      assert JSON.encode_object([{"handle", "/a\"b"}, {"shape", [2]}], backend) ==
               ~s({"handle": "/a\\"b", "shape": [2]})
    end
  end

  # A key twice in one object: decoders differ on its value (OTP 27's json
  # keeps the first, others the last), so every decoder refuses it, naming
  # the key, at any depth; the same key in two objects is no repeat.
  for backend <- [:fallback, :stdlib] do
    if backend == :stdlib and not Code.ensure_loaded?(:json),
      do: @tag(skip: "stdlib has no json module before OTP 27: the fallback codec serves")

    test "a key named twice in one object is refused, naming it (#{backend})" do
      backend = unquote(backend)

      for {text, key} <- [
            {~s({"dtype": "float32", "dtype": "float64"}), "dtype"},
            {~s({"handle": "/a", "shape": [2], "handle": "/a"}), "handle"},
            {~s({"a": 1, "\\u0061": 2}), "a"},
            {~s([1, {"x": {"b": 1, "c": 2, "b": 3}}]), "b"},
            {~s({"b": 1, "a": 1, "a": 2, "b": 2}), "a"}
          ] do
        assert JSON.decode(text, backend) == {:error, {:duplicate_key, key}}, text
      end

      assert JSON.decode(~s([{"x": 1}, {"x": 2}]), backend) == {:ok, [%{"x" => 1}, %{"x" => 2}]}
      assert JSON.decode(~s({"x": {"x": 1}}), backend) == {:ok, %{"x" => %{"x" => 1}}}
    end
  end

  test "open/1 refuses a line that names a field twice, naming it, before it opens anything" do
    t = IPC.torch_zeros({2}, :float32)
    handle = IPC.export_torch(t).handle

    for {line, field} <- [
          {~s({"handle": "#{handle}", "dtype": "float32", "shape": [2], "dtype": "float64"}), :dtype},
          {~s({"handle": "#{handle}", "shape": [2], "dtype": "float32", "shape": [1]}), :shape},
          {~s({"handle": "#{handle}", "dtype": "float32", "shape": [2], "extra": 1, "extra": 2}), :spec}
        ] do
      {e, data} =
        try do
          IPC.open(line)
        rescue
          e in ArgumentError -> {e, :tensor_blob.error_reason(__STACKTRACE__)}
        end

      assert data == %{reason: :bad_value, argument: field}
      key = if field == :spec, do: "extra", else: Atom.to_string(field)
      assert e.message =~ ~s(#{field}: the JSON names the key "#{key}" more than once)
    end

    # The line without its repeat opens (t, used here, holds the region).
    assert Tensor.to_binary(IPC.open(~s({"handle": "#{handle}", "dtype": "float32", "shape": [2]}))) ==
             Tensor.to_binary(t)
  end

  test "the backend follows the OTP" do
    assert JSON.backend() == if(Code.ensure_loaded?(:json), do: :stdlib, else: :fallback)
  end
end
