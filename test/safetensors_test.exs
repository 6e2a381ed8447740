defmodule TensorBlob.SafeTensorsTest do
  # safetensors files: what open/2 takes and refuses (the hostile files:
  # each refused with its reason, naming the file and the tensor, without
  # a crash, a hang or a mapping left behind), the lifetime of the mapping,
  # a file shrunk under its tensors, and write/3. Files live in a private
  # temporary directory of each test.
  use ExUnit.Case, async: true

  alias TensorBlob.{SafeTensors, Tensor}

  # The :nx tests call Nx, on the code path only where they run.
  @compile {:no_warn_undefined, [Nx, TensorBlob.Nx]}

  setup do
    dir = Path.join(System.tmp_dir!(), "tb_safetensors_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    on_exit(fn -> File.rm_rf!(dir) end)
    %{dir: dir}
  end

  # The dtypes the format and the table share, and the linked libtorch has:
  # from tables/0, never a list of our own.
  defp shared_dtypes do
    for d <- TensorBlob.tables().dtypes, d.safetensors != nil, d.available, do: d
  end

  defp file(dir, name, header, data) do
    path = Path.join(dir, name)
    File.write!(path, [<<byte_size(header)::little-64>>, header, data])
    path
  end

  defp entry(name, dtype, shape, b, e),
    do: ~s("#{name}":{"dtype":"#{dtype}","shape":[#{Enum.join(shape, ",")}],"data_offsets":[#{b},#{e}]})

  defp header(entries), do: "{" <> Enum.join(entries, ",") <> "}"

  # Padded with spaces to a multiple of 8 bytes, as writers pad it: the
  # data then starts aligned for every element size, and is mapped.
  defp aligned(header), do: header <> String.duplicate(" ", rem(8 - rem(byte_size(header), 8), 8))

  # What open/2 raises: {exception module, reason, argument, message}.
  defp refusal(path, opts \\ []), do: raised(fn -> SafeTensors.open(path, opts) end)

  defp assert_refused(path, reason, tensor \\ nil) do
    {ArgumentError, ^reason, :path, message} = refusal(path)
    assert message =~ path
    if tensor, do: assert(message =~ inspect(tensor))
    message
  end

  # No mapping of a file of dir is left in this OS process.
  defp assert_no_mapping(dir) do
    refute File.read!("/proc/self/maps") =~ dir
  end

  describe "open/2" do
    test "every shared dtype, 0-dim and empty tensors, and metadata, with their values", %{dir: dir} do
      tensors =
        for d <- shared_dtypes(), into: %{} do
          bytes = for i <- 1..(6 * d.element_size), into: <<>>, do: <<rem(i * 7, 2)>>
          {"t_#{d.name}", Tensor.from_binary(bytes, d.name, {2, 3})}
        end

      tensors =
        Map.merge(tensors, %{
          "scalar" => Tensor.from_binary(<<42::little-64>>, :int64, {}),
          "empty" => Tensor.from_binary(<<>>, :float32, {0, 4})
        })

      path = Path.join(dir, "all.safetensors")
      :ok = SafeTensors.write(path, tensors, %{"format" => "pt", "é" => "ü\"\n"})
      %{tensors: opened, metadata: meta} = SafeTensors.open(path)
      assert meta == %{"format" => "pt", "é" => "ü\"\n"}
      assert Map.keys(opened) |> Enum.sort() == Map.keys(tensors) |> Enum.sort()

      for {name, t} <- tensors do
        o = opened[name]
        assert Tensor.dtype(o) == Tensor.dtype(t), name
        assert Tensor.shape(o) == Tensor.shape(t), name
        assert Tensor.to_binary(o) == Tensor.to_binary(t), name
        if Tensor.shape(t) != {0, 4}, do: assert(Tensor.memory(o) == :file, name)
      end
    end

    test "only: some names; a name the file lacks is refused", %{dir: dir} do
      path =
        file(dir, "two.st", header([entry("a", "U8", [2], 0, 2), entry("b", "U8", [1], 2, 3)]) <> "  ", <<1, 2, 3>>)

      assert %{tensors: %{"b" => b} = ts} = SafeTensors.open(path, only: ["b"])
      assert map_size(ts) == 1
      assert Tensor.to_binary(b) == <<3>>
      {ArgumentError, :missing, :only, message} = refusal(path, only: ["c"])
      assert message =~ ~s("c")
    end

    test "a tensor at an offset its element size does not divide is copied once, or refused", %{dir: dir} do
      # a 2-byte header: data starts at byte 10, which 4 does not divide
      h = header([entry("x", "F32", [1], 0, 4)])
      pad = rem(4 - rem(8 + byte_size(h), 4), 4) + 2
      path = file(dir, "odd.st", h <> String.duplicate(" ", pad), <<1.5::float-little-32>>)
      %{tensors: %{"x" => x}} = SafeTensors.open(path)
      assert Tensor.memory(x) == :owned
      assert Tensor.to_binary(x) == <<1.5::float-little-32>>
      {ArgumentError, :misaligned, :path, _} = refusal(path, misaligned: :refuse)
    end

    test "a misaligned tensor costs its own bytes once; refused, nothing", %{dir: dir} do
      # 32 MiB of F32 at an offset 4 does not divide, beside an aligned one
      n = Bitwise.bsl(8, 20)
      bytes = 4 * n
      h = header([entry("x", "F32", [n], 0, bytes)])
      pad = rem(4 - rem(8 + byte_size(h), 4), 4) + 2
      data = :binary.copy(<<1.5::float-little-32>>, n)
      path = file(dir, "big_odd.st", h <> String.duplicate(" ", pad), data)
      # the peak resident memory (VmHWM) of a fresh VM of its own, so no
      # other test's allocations count: the library loaded first, then
      # the open measured
      grown = fn opts ->
        code = """
        Hwm = fun() -> {ok, S} = file:read_file("/proc/self/status"),
                       {match, [K]} = re:run(S, "VmHWM:[^0-9]*([0-9]+)", [{capture, all_but_first, list}]),
                       list_to_integer(K) * 1024 end,
        _ = tensor_blob:to_binary(tensor_blob:zeros({4}, float32)),
        B = Hwm(),
        R = try maps:size(maps:get(tensors, tensor_blob_safetensors:open(<<"#{path}">>, #{opts})))
            catch error:{badarg, _} -> refused end,
        io:format("~p ~p~n", [R, Hwm() - B]),
        halt().
        """

        {out, 0} = System.cmd("erl", ["-noshell", "-pa", Path.join(:code.lib_dir(:tensor_blob), "ebin"), "-eval", code])
        [result, grown] = String.split(out)
        {result, String.to_integer(grown)}
      end

      {"refused", refused} = grown.("\#{misaligned => refuse}")
      {"1", copied} = grown.("\#{}")

      # Under AddressSanitizer (make asan-test) the peaks are its own: its
      # shadow and quarantine grow with every allocation.
      unless System.get_env("LD_PRELOAD", "") =~ "libasan" do
        # A refusal copies nothing (one copy would be the tensor's bytes);
        # the copy is made once (two would be twice its bytes).
        assert refused < div(bytes, 2), "the refusal grew the peak by #{refused} bytes"
        assert copied < bytes + div(bytes, 4), "the copy grew the peak by #{copied} bytes"
      end
    end

    test "a symbolic link to a regular file is followed", %{dir: dir} do
      path = file(dir, "real.st", header([entry("a", "U8", [1], 0, 1)]), <<7>>)
      link = Path.join(dir, "link.st")
      File.ln_s!(path, link)
      assert %{tensors: %{"a" => a}} = SafeTensors.open(link)
      assert Tensor.to_binary(a) == <<7>>
    end
  end

  describe "hostile files" do
    test "truncated, and header lengths that lie", %{dir: dir} do
      assert_refused(file(dir, "short.st", "", "") |> tap(&File.write!(&1, <<1, 2, 3>>)), :bad_file)
      assert_refused(file(dir, "empty.st", "", "") |> tap(&File.write!(&1, "")), :bad_file)
      path = Path.join(dir, "lying.st")
      File.write!(path, [<<1000::little-64>>, "{}"])
      assert assert_refused(path, :bad_file) =~ "is truncated: it has 10 bytes and its header needs 1008"
      File.write!(path, [<<0xFFFFFFFFFFFFFFFF::little-64>>, "{}"])
      assert assert_refused(path, :bad_file) =~ "limit"
      # the data cut short: the last tensor runs past the end
      h = header([entry("a", "F32", [4], 0, 16)])
      path = file(dir, "cut.st", h, <<0::64>>)
      message = assert_refused(path, :bad_file, "a")

      assert message =~
               "is truncated: it has #{8 + byte_size(h) + 8} bytes and its header needs #{8 + byte_size(h) + 16}"

      assert_no_mapping(dir)
    end

    test "a 100 MB header (a sparse file) is refused before it is read", %{dir: dir} do
      path = Path.join(dir, "huge.st")
      n = 100_000_001
      {:ok, f} = :file.open(path, [:write, :raw, :binary])
      :ok = :file.write(f, <<n::little-64>>)
      {:ok, _} = :file.position(f, 8 + n)
      :ok = :file.write(f, "}")
      :ok = :file.close(f)
      assert assert_refused(path, :bad_file) =~ "limit"
    end

    test "offsets that overlap, leave a gap, run past the end or end before they begin", %{dir: dir} do
      cases = [
        overlap: {[entry("a", "U8", [2], 0, 2), entry("b", "U8", [2], 1, 3)], 3, "b"},
        gap: {[entry("a", "U8", [2], 0, 2), entry("b", "U8", [1], 3, 4)], 4, "b"},
        past_end: {[entry("a", "U8", [2], 0, 2), entry("b", "U8", [2], 2, 4)], 3, "b"},
        reversed: {[entry("a", "U8", [0], 2, 0)], 2, "a"},
        left_over: {[entry("a", "U8", [2], 0, 2)], 3, nil},
        size: {[entry("a", "F32", [2], 0, 4)], 4, "a"}
      ]

      for {name, {entries, bytes, tensor}} <- cases do
        path = file(dir, "#{name}.st", header(entries), :binary.copy(<<0>>, bytes))
        assert_refused(path, :bad_file, tensor)
      end

      assert_no_mapping(dir)
    end

    test "shapes that overflow", %{dir: dir} do
      for {shape, i} <- Enum.with_index([[4_611_686_018_427_387_904, 4], [99_999_999_999_999_999_999], [-1]]) do
        path = file(dir, "big#{i}.st", header([entry("w", "F32", shape, 0, 0)]), "")
        assert_refused(path, :bad_file, "w")
      end

      assert_no_mapping(dir)
    end

    test "duplicate names, non-UTF-8, deep JSON, not an object, bad metadata, bad JSON", %{dir: dir} do
      dup = header([entry("a", "U8", [1], 0, 1), entry("a", "U8", [1], 1, 2)])
      assert_refused(file(dir, "dup.st", dup, <<1, 2>>), :bad_file, "a")
      assert_refused(file(dir, "utf8.st", ~s({"\xff":{}}), ""), :bad_file)
      deep = ~s({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":) <> String.duplicate("[", 100_000)
      assert assert_refused(file(dir, "deep.st", deep, <<1>>), :bad_file) =~ "deep"
      assert_refused(file(dir, "array.st", "[]", ""), :bad_file)
      assert_refused(file(dir, "meta.st", ~s({"__metadata__":{"k":1}}), ""), :bad_file)
      assert_refused(file(dir, "json.st", ~s({"a":{"dtype":"U8",}}), ""), :bad_file)
      assert_refused(file(dir, "trail.st", ~s({} x), ""), :bad_file)
      assert_no_mapping(dir)
    end

    test "an unknown dtype is refused, naming it and the tensor", %{dir: dir} do
      path = file(dir, "dtype.st", header([entry("w", "F5", [1], 0, 1)]), <<0>>)
      {ArgumentError, :bad_dtype, :path, message} = refusal(path)
      assert message =~ ~s("F5") and message =~ ~s("w") and message =~ path
    end

    test "a FIFO, a directory and a device are refused without blocking", %{dir: dir} do
      fifo = Path.join(dir, "fifo.st")
      {_, 0} = System.cmd("mkfifo", [fifo])
      for path <- [fifo, dir, "/dev/null"], do: assert_refused(path, :bad_file)
      {ArgumentError, :missing, :path, _} = refusal(Path.join(dir, "none.st"))
    end

    test "a file shrunk under its tensors: the library's copies raise, the VM lives", %{dir: dir} do
      {path, w, n} = truncated_under(dir, "shrunk.st", 0)
      assert_raise TensorBlob.Error, fn -> Tensor.to_binary(w) end
      assert_raise ArgumentError, fn -> Tensor.to_binary(w, copy: false) end
      assert_raise TensorBlob.Error, fn -> Tensor.write!(w, :binary.copy(<<1>>, n)) end
      assert_raise TensorBlob.Error, fn -> SafeTensors.write(Path.join(dir, "out.st"), %{"w" => w}) end
      refute File.exists?(Path.join(dir, "out.st"))
      assert File.exists?(path)
    end
  end

  # A file of one U8 tensor "w" of 1 MiB ({1024, 1024}), opened, then truncated on disk
  # to `keep` bytes under the mapped tensor: {path, w, n}.
  defp truncated_under(dir, name, keep) do
    n = Bitwise.bsl(1, 20)
    path = file(dir, name, aligned(header([entry("w", "U8", [1024, 1024], 0, n)])), :binary.copy(<<5>>, n))
    %{tensors: %{"w" => w}} = SafeTensors.open(path)
    assert Tensor.memory(w) == :file
    {:ok, f} = :file.open(path, [:read, :write, :raw])
    {:ok, _} = :file.position(f, keep)
    :ok = :file.truncate(f)
    :ok = :file.close(f)
    {path, w, n}
  end

  # The error fun raises: its module, reason, argument and message.
  defp raised(fun) do
    fun.()
    flunk("no error")
  rescue
    e in [ArgumentError, TensorBlob.Error] ->
      %{reason: reason, argument: argument} = :tensor_blob.error_reason(__STACKTRACE__)
      {e.__struct__, reason, argument, Exception.message(e)}
  end

  # What every door that touches a truncated file's tensor says: the file,
  # that it was truncated while mapped, its size now and the end the
  # tensor needs, gone, about the argument named.
  defp assert_truncated(fun, path, keep, argument \\ :tensor) do
    {TensorBlob.Error, :gone, ^argument, message} = raised(fun)
    assert message =~ "#{argument}: "

    assert message =~
             ~s(its file #{inspect(path)} was truncated while mapped (it has #{keep} bytes; the tensor needs up to )

    message
  end

  describe "a file truncated while mapped" do
    test "copies, writes and to_device name the file and say so", %{dir: dir} do
      {path, w, n} = truncated_under(dir, "copies.safetensors", 100)
      <<length::little-64, _::binary>> = File.read!(path)
      data_start = 8 + length
      message = assert_truncated(fn -> Tensor.to_binary(w) end, path, 100)
      assert message =~ "needs up to #{data_start + n})"
      # a slice needs the file up to its own end
      slice = Tensor.narrow(w, 0, 8, 2)
      assert assert_truncated(fn -> Tensor.to_binary(slice) end, path, 100) =~ "needs up to #{data_start + 10 * 1024})"
      assert_truncated(fn -> Tensor.to_binary(Tensor.transpose(w, 0, 1)) end, path, 100)
      assert_truncated(fn -> Tensor.copy(w) end, path, 100)
      assert_truncated(fn -> Tensor.to_device(w, :cpu) end, path, 100)
      assert_truncated(fn -> Tensor.write!(w, :binary.copy(<<1>>, n)) end, path, 100)
      # the Erlang API says the same, in Erlang's spelling of the path
      try do
        :tensor_blob.to_binary(Tensor.ref(w))
        flunk("no error")
      catch
        :error, {:tensor_blob, message} ->
          assert IO.iodata_to_binary(message) =~ ~s(tensor: its file <<"#{path}">> was truncated while mapped)
          assert %{reason: :gone, argument: :tensor} = :tensor_blob.error_reason(__STACKTRACE__)
      end
    end

    test "write/3 names the tensor and the file, and leaves no file", %{dir: dir} do
      {path, w, _} = truncated_under(dir, "w.safetensors", 0)
      out = Path.join(dir, "out.safetensors")
      message = assert_truncated(fn -> SafeTensors.write(out, %{"w" => w}) end, path, 0, :tensors)
      assert message =~ ~s(tensors: tensor "w": its file )
      # a strided tensor, copied to host bytes first, says the same
      strided = Tensor.transpose(w, 0, 1)
      assert_truncated(fn -> SafeTensors.write(out, %{"t" => strided}) end, path, 0, :tensors)
      assert File.ls!(dir) == ["w.safetensors"]
    end

    test "a DLPack export is refused before a consumer reads it", %{dir: dir} do
      {path, w, _} = truncated_under(dir, "d.safetensors", 4096)
      assert_truncated(fn -> TensorBlob.DLPack.export(w) end, path, 4096)
      assert_truncated(fn -> TensorBlob.DLPack.export(w, version: :legacy) end, path, 4096)
      assert_truncated(fn -> TensorBlob.DLPack.export(Tensor.narrow(w, 0, 0, 4)) end, path, 4096)
      # what the file still holds exports, and reads back
      capsule = TensorBlob.DLPack.export(Tensor.narrow(w, 0, 0, 2))
      assert Tensor.to_binary(TensorBlob.DLPack.import(capsule)) == :binary.copy(<<5>>, 2048)
    end

    test "Nodes.pack and IPC.export name the file", %{dir: dir} do
      {path, w, _} = truncated_under(dir, "p.safetensors", 0)
      assert_truncated(fn -> TensorBlob.Nodes.pack(w, node()) end, path, 0)
      assert_truncated(fn -> TensorBlob.IPC.export(w) end, path, 0)
    end

    test "a file renamed over (write/3 does) is not truncated: the mapping stays valid", %{dir: dir} do
      path = Path.join(dir, "r.safetensors")
      :ok = SafeTensors.write(path, %{"w" => {:binary.copy(<<3>>, 4096), :uint8, {4096}}})
      %{tensors: %{"w" => w}} = SafeTensors.open(path)
      :ok = SafeTensors.write(path, %{"w" => {<<1>>, :uint8, {1}}})
      assert %TensorBlob.DLPack{} = TensorBlob.DLPack.export(w)
      assert Tensor.to_binary(w) == :binary.copy(<<3>>, 4096)
    end

    @tag :nx
    test "the Nx door names the file", %{dir: dir} do
      {:ok, _} = Application.ensure_all_started(:nx)
      {path, w, _} = truncated_under(dir, "nx.safetensors", 0)
      assert_truncated(fn -> Nx.sum(TensorBlob.Nx.to_nx(w)) end, path, 0)
    end
  end

  describe "every dtype of the format" do
    # Every dtype of the format (tables/0's safetensors list), a tensor of
    # [2, 8] values each: its bytes are 2 * 8 * bits / 8, a pattern of its
    # own. Whether the linked libtorch holds it comes from the tables too.
    defp every_format_dtype(dir) do
      formats = TensorBlob.tables().safetensors

      {entries, data, _} =
        Enum.reduce(formats, {[], [], 0}, fn f, {entries, data, at} ->
          bytes = 2 * f.bits
          pattern = for i <- 1..bytes, into: <<>>, do: <<rem(i * 31 + f.bits, 256)>>
          {[entry("t_#{f.name}", f.name, [2, 8], at, at + bytes) | entries], [data, pattern], at + bytes}
        end)

      path = file(dir, "all.st", aligned(header(Enum.reverse(entries))), data)
      {path, formats, IO.iodata_to_binary(data)}
    end

    defp held?(f), do: f.dtype != nil and :tensor_blob.dtype_info(f.dtype).available

    # The bytes of format dtype f's tensor in the file's data.
    defp bytes_of(formats, data, f) do
      at = formats |> Enum.take_while(&(&1 != f)) |> Enum.map(&(2 * &1.bits)) |> Enum.sum()
      binary_part(data, at, 2 * f.bits)
    end

    test "the format's 22 dtypes, each with its bits and the dtype that holds it" do
      formats = TensorBlob.tables().safetensors
      assert length(formats) == 22
      dtypes = Map.new(TensorBlob.tables().dtypes, &{&1.name, &1})

      for f <- formats do
        if f.dtype do
          d = dtypes[f.dtype]
          assert d.safetensors == f.name
          # an element holds whole values: one, or two for float4_e2m1fn_x2
          assert rem(d.element_size * 8, f.bits) == 0
        else
          assert f.bits == 6
        end
      end
    end

    test "info/1 lists them all without mapping the file", %{dir: dir} do
      {path, formats, _data} = every_format_dtype(dir)
      %{tensors: tensors, metadata: %{}, data_start: start, file_size: size} = SafeTensors.info(path)
      assert map_size(tensors) == length(formats)
      assert size == File.stat!(path).size and start == size - Enum.sum(Enum.map(formats, &(2 * &1.bits)))
      assert_no_mapping(dir)

      for f <- formats do
        %{dtype: dtype, shape: {2, 8}, data_offsets: {b, e}, tensor_dtype: t, opens: opens} = tensors["t_#{f.name}"]
        assert {dtype, t, opens, e - b} == {f.name, f.dtype, held?(f), 2 * f.bits}
      end
    end

    test "open/2 refuses by default, skips or gives the bytes of what the linked libtorch cannot hold",
         %{dir: dir} do
      {path, formats, data} = every_format_dtype(dir)
      {unheld, held} = Enum.split_with(formats, &(not held?(&1)))
      # F6_E2M3 and F6_E3M2 have no libtorch dtype: never held
      assert length(unheld) >= 2
      {ArgumentError, :unsupported, :path, message} = refusal(path)
      assert message =~ "unsupported: :skip"

      %{tensors: skipped, unsupported: reported} = SafeTensors.open(path, unsupported: :skip)
      %{tensors: as_bytes, unsupported: reported_bytes} = SafeTensors.open(path, unsupported: :bytes)
      assert Enum.sort(Map.keys(reported)) == Enum.sort(for f <- unheld, do: "t_#{f.name}")
      assert Map.keys(reported_bytes) == Map.keys(reported)
      assert Enum.all?(Map.values(reported_bytes), &(&1.opened == :bytes))
      assert map_size(skipped) == length(held) and map_size(as_bytes) == length(formats)

      for f <- held do
        t = skipped["t_#{f.name}"]
        per = div(:tensor_blob.dtype_info(f.dtype).element_size * 8, f.bits)
        assert {Tensor.dtype(t), Tensor.shape(t)} == {f.dtype, {2, div(8, per)}}
        assert Tensor.to_binary(t) == bytes_of(formats, data, f)
      end

      for f <- unheld do
        %{dtype: dtype, shape: {2, 8}, opened: :skipped, why: why} = reported["t_#{f.name}"]
        assert dtype == f.name and why =~ f.name
        # its bytes, never another dtype: 8 values of bits each a row
        b = as_bytes["t_#{f.name}"]
        assert {Tensor.dtype(b), Tensor.shape(b)} == {:uint8, {2, f.bits}}
        assert Tensor.to_binary(b) == bytes_of(formats, data, f)
      end

      %{unsupported: only} = SafeTensors.open(path, unsupported: :bytes, only: ["t_F6_E2M3"])
      assert %{"t_F6_E2M3" => %{opened: :bytes}} = only
    end

    test "a tensor of its bytes outlives everything but itself", %{dir: dir} do
      {path, formats, data} = every_format_dtype(dir)
      f = Enum.find(formats, &(&1.name == "F6_E3M2"))

      b = (fn -> SafeTensors.open(path, unsupported: :bytes).tensors["t_F6_E3M2"] end).()

      File.rm!(path)
      :erlang.garbage_collect()
      assert Tensor.to_binary(b) == bytes_of(formats, data, f)
    end

    test "a packed tensor's last dimension fills whole bytes, as its offsets do", %{dir: dir} do
      for {dtype, shape, bytes} <- [{"F4", [2, 1], 1}, {"F4", [], 1}, {"F6_E2M3", [2], 2}, {"F6_E3M2", [3, 5], 12}] do
        path = file(dir, "packed.st", header([entry("p", dtype, shape, 0, bytes)]), :binary.copy(<<0>>, bytes))
        assert assert_refused(path, :bad_file, "p") =~ "whole bytes"
      end

      path = file(dir, "f6.st", header([entry("p", "F6_E2M3", [3, 4], 0, 9)]), :binary.copy(<<0>>, 9))
      assert %{tensors: %{"p" => %{shape: {3, 4}, data_offsets: {0, 9}}}} = SafeTensors.info(path)
    end

    test "the option is checked", %{dir: dir} do
      path = file(dir, "u8.st", header([entry("a", "U8", [1], 0, 1)]), <<1>>)
      {ArgumentError, :bad_value, :unsupported, _} = refusal(path, unsupported: :maybe)
      assert %{unsupported: %{}} = SafeTensors.open(path, unsupported: :skip)
    end
  end

  describe "messages" do
    test "JSON, text, and a misaligned refusal in Elixir's spelling", %{dir: dir} do
      json = Path.join(dir, "model.safetensors.index.txt")
      File.write!(json, ~s({"metadata": {}, "weight_map": {}}))
      assert assert_refused(json, :bad_file) =~ "looks like JSON (an index file?)"
      assert_raise ArgumentError, ~r/looks like JSON/, fn -> SafeTensors.info(json) end
      text = Path.join(dir, "notes.txt")
      File.write!(text, "these are not tensors at all\n")
      assert assert_refused(text, :bad_file) =~ "is text, not a safetensors file"

      h = header([entry("x", "F32", [1], 0, 4)])
      pad = rem(4 - rem(8 + byte_size(h), 4), 4) + 2
      path = file(dir, "odd.st", h <> String.duplicate(" ", pad), <<1.5::float-little-32>>)
      {ArgumentError, :misaligned, :path, message} = refusal(path, misaligned: :refuse)
      assert message =~ "misaligned: :refuse" and not (message =~ "=>")
    end
  end

  describe "lifetime" do
    test "a view of one tensor keeps the mapping after everything else is dropped", %{dir: dir} do
      n = 4096
      data = for i <- 0..(n - 1), into: <<>>, do: <<i::little-32>>
      path = file(dir, "life.st", aligned(header([entry("w", "I32", [n], 0, 4 * n)])), data)

      view =
        (fn ->
           %{tensors: %{"w" => w}} = SafeTensors.open(path)
           assert Tensor.memory(w) == :file
           Tensor.narrow(w, 0, 1000, 10)
         end).()

      capsule =
        (fn ->
           %{tensors: %{"w" => w}} = SafeTensors.open(path)
           TensorBlob.DLPack.export(Tensor.narrow(w, 0, 2000, 3))
         end).()

      :erlang.garbage_collect()
      File.rm!(path)
      assert Tensor.to_binary(view) == binary_part(data, 4000, 40)
      imported = TensorBlob.DLPack.import(capsule)
      assert Tensor.to_binary(imported) == binary_part(data, 8000, 12)
      # the last users gone, the mappings go
      _ = {view, imported}
      view = nil
      imported = nil
      capsule = nil
      :erlang.garbage_collect()
      _ = {view, imported, capsule}
      assert_no_mapping(dir)
    end

    test "write/3 renames over the target: a mapping of the old file stays valid", %{dir: dir} do
      path = Path.join(dir, "model.st")
      :ok = SafeTensors.write(path, %{"w" => {<<1, 2, 3, 4>>, :uint8, {4}}})
      %{tensors: %{"w" => old}} = SafeTensors.open(path)
      :ok = SafeTensors.write(path, %{"w" => {<<9, 9>>, :uint8, {2}}})
      assert Tensor.to_binary(old) == <<1, 2, 3, 4>>
      assert %{tensors: %{"w" => new}} = SafeTensors.open(path)
      assert Tensor.to_binary(new) == <<9, 9>>
      assert File.ls!(dir) == ["model.st"]
    end

    test "writes through a tensor go to private pages, never to the file", %{dir: dir} do
      path = file(dir, "w.st", aligned(header([entry("w", "U8", [4], 0, 4)])), <<1, 2, 3, 4>>)
      %{tensors: %{"w" => w}} = SafeTensors.open(path)
      assert Tensor.memory(w) == :file
      Tensor.write!(w, <<5, 6, 7, 8>>)
      assert Tensor.to_binary(w) == <<5, 6, 7, 8>>
      assert binary_part(File.read!(path), byte_size(File.read!(path)) - 4, 4) == <<1, 2, 3, 4>>
    end
  end

  describe "sharded checkpoints" do
    # Two shards and their index, as the reference's writers lay them out.
    defp sharded(dir) do
      a = Tensor.from_binary(<<1, 2>>, :uint8, {2})
      b = Tensor.from_binary(<<3, 4, 5>>, :uint8, {3})
      c = Tensor.from_binary(<<6>>, :uint8, {1})
      :ok = SafeTensors.write(Path.join(dir, "model-00001-of-00002.safetensors"), %{"layer.a" => a, "layer.b" => b})
      :ok = SafeTensors.write(Path.join(dir, "model-00002-of-00002.safetensors"), %{"head.c" => c})

      index(dir, %{
        "layer.a" => "model-00001-of-00002.safetensors",
        "layer.b" => "model-00001-of-00002.safetensors",
        "head.c" => "model-00002-of-00002.safetensors"
      })
    end

    defp index(dir, weight_map, name \\ "model.safetensors.index.json") do
      entries = Enum.map_join(weight_map, ", ", fn {k, v} -> ~s("#{k}": "#{v}") end)
      path = Path.join(dir, name)
      File.write!(path, ~s({"metadata": {"total_size": 6, "format": "pt"}, "weight_map": {#{entries}}}))
      path
    end

    test "info/1 of the index, or its folder, reads every shard's header and maps none", %{dir: dir} do
      index = sharded(dir)

      for path <- [index, dir] do
        %{tensors: tensors, metadata: %{"format" => "pt"}, shards: shards} = SafeTensors.info(path)
        assert Enum.sort(Map.keys(tensors)) == ["head.c", "layer.a", "layer.b"]

        assert %{shard: "model-00002-of-00002.safetensors", dtype: "U8", shape: {1}, opens: true} = tensors["head.c"]

        for {shard, %{file_size: size}} <- shards, do: assert(size == File.stat!(Path.join(dir, shard)).size)
        assert map_size(shards) == 2
      end

      assert_no_mapping(dir)
      File.rm!(Path.join(dir, "model-00002-of-00002.safetensors"))
      assert_raise ArgumentError, ~r/which is missing/, fn -> SafeTensors.info(index) end
    end

    test "the index, or its folder, opens every shard as one map", %{dir: dir} do
      index = sharded(dir)

      for path <- [index, dir] do
        %{tensors: ts, metadata: meta} = SafeTensors.open(path)

        assert Map.new(ts, fn {k, t} -> {k, Tensor.to_binary(t)} end) ==
                 %{"layer.a" => <<1, 2>>, "layer.b" => <<3, 4, 5>>, "head.c" => <<6>>}

        assert meta == %{"total_size" => "6", "format" => "pt"}
        assert Enum.all?(Map.values(ts), &(Tensor.memory(&1) == :file))
      end

      %{tensors: %{"layer" => %{"a" => _, "b" => _}, "head" => %{"c" => _}}} = SafeTensors.open(index, nested: true)
    end

    test "only: maps the shards that hold the names asked for, no other", %{dir: dir} do
      index = sharded(dir)
      %{tensors: ts} = SafeTensors.open(index, only: ["head.c"])
      assert Map.keys(ts) == ["head.c"]
      maps = File.read!("/proc/self/maps")
      assert maps =~ "model-00002-of-00002.safetensors"
      refute maps =~ "model-00001-of-00002.safetensors"
      assert Tensor.to_binary(ts["head.c"]) == <<6>>

      assert {ArgumentError, :missing, :only, message} = refusal(index, only: ["nope"])
      assert message =~ ~s("nope")
    end

    test "a missing shard, a misplaced or doubled tensor, and indexes that are none", %{dir: dir} do
      sharded(dir)
      shard1 = "model-00001-of-00002.safetensors"
      shard2 = "model-00002-of-00002.safetensors"

      missing = index(dir, %{"layer.a" => "gone.safetensors"}, "missing.safetensors.index.json")
      assert {ArgumentError, :missing, :path, message} = refusal(missing)
      assert message =~ "gone.safetensors"

      # head.c lives in shard 2; an index that places it in shard 1.
      misplaced =
        index(dir, %{"layer.a" => shard1, "layer.b" => shard1, "head.c" => shard1}, "m.safetensors.index.json")

      assert {ArgumentError, :bad_file, :path, message} = refusal(misplaced)
      assert message =~ "head.c"

      # A shard holding a tensor the index does not name.
      unnamed = index(dir, %{"layer.a" => shard1, "head.c" => shard2}, "u.safetensors.index.json")
      assert {ArgumentError, :bad_file, :path, message} = refusal(unnamed)
      assert message =~ "layer.b"

      # A shard that is a path out of the folder.
      escape = index(dir, %{"layer.a" => "../#{shard1}"}, "e.safetensors.index.json")
      assert {ArgumentError, :bad_file, :path, _} = refusal(escape)

      for {name, text} <- [
            {"text.safetensors.index.json", "not json"},
            {"nomap.safetensors.index.json", ~s({"metadata": {}})},
            {"twice.safetensors.index.json", ~s({"weight_map": {"a": "x", "a": "y"}})}
          ] do
        path = Path.join(dir, name)
        File.write!(path, text)
        assert {ArgumentError, :bad_file, :path, message} = refusal(path)
        assert message =~ path
      end

      # An index over the bound (a sparse file) is refused before it is read.
      big = Path.join(dir, "big.safetensors.index.json")
      {:ok, io} = :file.open(big, [:write, :raw, :binary])
      {:ok, _} = :file.position(io, 257 * 1024 * 1024)
      :ok = :file.write(io, "}")
      :ok = :file.close(io)
      assert {ArgumentError, :bad_file, :path, message} = refusal(big)
      assert message =~ "bytes"
      File.rm!(big)

      # A folder with several indexes, and one with none.
      assert {ArgumentError, :bad_file, :path, _} = refusal(dir)
      empty = Path.join(dir, "empty")
      File.mkdir_p!(empty)
      assert {ArgumentError, :bad_file, :path, message} = refusal(empty)
      assert message =~ "index"
    end

    test "each shard's mapping lives while its own tensors do", %{dir: dir} do
      index = sharded(dir)
      %{tensors: %{"head.c" => c}} = SafeTensors.open(index)
      TensorBlob.Test.Lifetime.collect()
      maps = File.read!("/proc/self/maps")
      assert maps =~ "model-00002-of-00002.safetensors"
      refute maps =~ "model-00001-of-00002.safetensors"
      assert Tensor.to_binary(c) == <<6>>
    end
  end

  describe "write/3" do
    test "strided views, regions and binaries, written row-major", %{dir: dir} do
      m = Tensor.from_binary(<<1, 2, 3, 4, 5, 6>>, :uint8, {2, 3})
      t = Tensor.transpose(m, 0, 1)
      region = TensorBlob.IPC.zeros({2}, :int16)
      Tensor.write!(region, <<7::little-16, 8::little-16>>)
      path = Path.join(dir, "mixed.st")
      :ok = SafeTensors.write(path, [{"t", t}, {"r", region}, {"b", {<<1.0::float-little-64>>, :float64, {1}}}])
      %{tensors: ts} = SafeTensors.open(path)
      assert Tensor.to_binary(ts["t"]) == <<1, 4, 2, 5, 3, 6>>
      assert Tensor.shape(ts["t"]) == {3, 2}
      assert Tensor.to_binary(ts["r"]) == <<7::little-16, 8::little-16>>
      assert Tensor.to_binary(ts["b"]) == <<1.0::float-little-64>>
      # largest element first: every offset fits its element size
      for {_, x} <- ts, do: assert(Tensor.memory(x) == :file)
    end

    test "refuses what the format cannot hold", %{dir: dir} do
      path = Path.join(dir, "bad.st")

      assert_raise ArgumentError, ~r/safetensors name/, fn ->
        SafeTensors.write(path, %{"c" => Tensor.zeros({1}, :complex128)})
      end

      assert_raise ArgumentError, ~r/twice/, fn ->
        SafeTensors.write(path, [{"a", Tensor.zeros({1}, :uint8)}, {"a", Tensor.zeros({1}, :uint8)}])
      end

      assert_raise ArgumentError, ~r/metadata/, fn ->
        SafeTensors.write(path, %{"a" => Tensor.zeros({1}, :uint8)}, %{"k" => 1})
      end

      refute File.exists?(path)
    end

    test "a model's nested parameters: names joined with \".\", and nested again by open(nested: true)", %{dir: dir} do
      path = Path.join(dir, "params.st")
      kernel = Tensor.from_binary(<<1, 2, 3, 4>>, :uint8, {2, 2})
      bias = Tensor.from_binary(<<5, 6>>, :uint8, {2})
      embed = Tensor.from_binary(<<9>>, :uint8, {1})

      :ok =
        SafeTensors.write(path, %{"encoder" => %{"dense" => %{"kernel" => kernel, "bias" => bias}}, "embed" => embed})

      %{tensors: flat} = SafeTensors.open(path)
      assert flat |> Map.keys() |> Enum.sort() == ["embed", "encoder.dense.bias", "encoder.dense.kernel"]
      assert Tensor.to_binary(flat["encoder.dense.kernel"]) == <<1, 2, 3, 4>>

      %{tensors: nested} = SafeTensors.open(path, nested: true)
      assert %{"encoder" => %{"dense" => %{"kernel" => k, "bias" => b}}, "embed" => e} = nested
      assert {Tensor.to_binary(k), Tensor.to_binary(b), Tensor.to_binary(e)} == {<<1, 2, 3, 4>>, <<5, 6>>, <<9>>}

      # A name that is a tensor and the start of another cannot nest.
      clash = Path.join(dir, "clash.st")
      :ok = SafeTensors.write(clash, %{"a" => embed, "a.b" => embed})
      assert {ArgumentError, :bad_value, :nested, message} = refusal(clash, nested: true)
      assert message =~ ~s("a.b")
      assert map_size(SafeTensors.open(clash).tensors) == 2

      # An empty map holds no tensor.
      assert_raise ArgumentError, ~r/tensors: expected/, fn -> SafeTensors.write(path, %{"layer" => %{}}) end
    end

    @tag :no_nx
    test "an Nx tensor, where Nx is not compiled in, is refused saying what to add", %{dir: dir} do
      path = Path.join(dir, "no_nx.st")
      nx = %{__struct__: Nx.Tensor, data: nil, type: {:f, 32}, shape: {}, names: []}
      assert_raise ArgumentError, ~r/add \{:nx/, fn -> SafeTensors.write(path, %{"w" => nx}) end
      refute File.exists?(path)
    end

    @tag :nx
    test "Nx tensors, of the binary backend and in nested maps, as they are", %{dir: dir} do
      {:ok, _} = Application.ensure_all_started(:nx)
      path = Path.join(dir, "nx.st")
      w = Nx.iota({2, 3}, type: :f32)
      params = %{"layer" => %{"w" => w, "b" => Nx.tensor([1, 2], type: :s64)}, "scale" => Nx.tensor(0.5, type: :bf16)}
      :ok = SafeTensors.write(path, params)
      %{tensors: %{"layer" => layer, "scale" => scale}} = SafeTensors.open(path, nested: true)
      assert Nx.to_binary(TensorBlob.Nx.to_nx(layer["w"])) == Nx.to_binary(w)
      assert Tensor.dtype(layer["b"]) == :int64
      assert Tensor.shape(scale) == {}
      assert Tensor.dtype(scale) == :bfloat16
    end
  end
end
