defmodule TensorBlobTest do
  use ExUnit.Case, async: false
  import Bitwise

  alias TensorBlob.{Blob, BlobView, Tensor}
  alias TensorBlob.Test.Lifetime

  @f32 for x <- [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], into: <<>>, do: <<x::float-32-native>>

  defp f32s(list), do: for(x <- list, into: <<>>, do: <<x::float-32-native>>)

  # A float32 view of t's memory with this shape and these strides.
  defp strided_view(t, shape, strides) do
    b = TensorBlob.to_blob(t)

    case TensorBlob.from_blob(%{ptr: b.ptr, shape: shape, strides: strides, dtype: :float32}, owner: t) do
      %BlobView{tensor: v} -> v
      v -> v
    end
  end

  defp t23, do: Tensor.from_binary(@f32, :float32, {2, 3})

  # The reductions fun costs, counted in a process of its own.
  defp reductions(fun) do
    parent = self()

    spawn_link(fn ->
      {:reductions, before} = Process.info(self(), :reductions)
      fun.()
      {:reductions, later} = Process.info(self(), :reductions)
      send(parent, {:reductions, later - before})
    end)

    receive do
      {:reductions, n} -> n
    end
  end

  describe "to_blob/1" do
    test "describes the tensor's memory, with the tensor as owner" do
      t = t23()
      blob = TensorBlob.to_blob(t)

      assert %Blob{shape: {2, 3}, strides: [3, 1], dtype: :float32, device: :cpu} = blob
      assert blob.element_size == 4
      assert blob.byte_size == 24
      assert blob.owner == t
      assert is_integer(blob.ptr) and blob.ptr > 0
      assert rem(blob.ptr, 4) == 0
    end

    test "an offset view reports the offset pointer and its own extent" do
      t = Tensor.zeros({3, 4}, :float32)
      base = TensorBlob.to_blob(t).ptr
      row = TensorBlob.to_blob(Tensor.narrow(t, 0, 1, 2))
      col = TensorBlob.to_blob(Tensor.narrow(t, 1, 2, 2))

      assert row.ptr == base + 16
      assert row.byte_size == 32
      assert col.ptr == base + 8
      # rows 0..2, cols 2..3: last element at 2*4 + 1 elements from ptr
      assert col.byte_size == (2 * 4 + 1 + 1) * 4
      assert col.strides == [4, 1]
    end

    test "a transposed tensor keeps its strides" do
      blob = t23() |> Tensor.transpose(0, 1) |> TensorBlob.to_blob()
      assert blob.shape == {3, 2}
      assert blob.strides == [1, 3]
      assert blob.byte_size == 24
    end
  end

  describe "from_blob/2" do
    test "a tensor's own blob gives the tensor back; nothing is made" do
      t = t23()
      before = TensorBlob.stats()
      assert %BlobView{tensor: ^t, owner: ^t} = TensorBlob.from_blob(TensorBlob.to_blob(t))
      assert TensorBlob.stats() == before
    end

    test "another layout inside the owner is a view sharing the owner tensor's storage" do
      t = t23()
      blob = TensorBlob.to_blob(t)

      assert %BlobView{tensor: view, owner: ^t} = TensorBlob.from_blob(%{blob | shape: {3, 2}, strides: [2, 1]})
      refute view == t
      # The owner's storage is shared (its reference count is the pin), so
      # the view answers as the owner does.
      assert Tensor.memory(view) == :owned
      assert TensorBlob.to_blob(view).ptr == blob.ptr
      assert Tensor.to_binary(view) == @f32
    end

    test "a write through the view is read back through the original, and the reverse" do
      t = t23()
      %BlobView{tensor: view} = TensorBlob.from_blob(TensorBlob.to_blob(t))

      Tensor.write!(view, f32s([9, 8, 7, 6, 5, 4]))
      assert Tensor.to_binary(t) == f32s([9, 8, 7, 6, 5, 4])

      Tensor.write!(t, f32s([0, 1, 0, 1, 0, 1]))
      assert Tensor.to_binary(view) == f32s([0, 1, 0, 1, 0, 1])
    end

    test "a map with owner: pins that owner" do
      t = t23()
      blob = TensorBlob.to_blob(t)
      spec = %{ptr: blob.ptr, shape: {3, 2}, dtype: :float32}

      assert %BlobView{tensor: view, owner: ^t} = TensorBlob.from_blob(spec, owner: t)
      assert Tensor.memory(view) == :owned
      assert Tensor.to_binary(view) == @f32
    end

    test "owner: :none asks for an unpinned tensor; the caller answers for the memory" do
      t = t23()
      blob = TensorBlob.to_blob(t)
      view = TensorBlob.from_blob(%{ptr: blob.ptr, shape: {2, 3}, dtype: :float32}, owner: :none)

      assert %BlobView{tensor: %Tensor{} = bare, owner: :none} = view
      assert Tensor.memory(bare) == :unpinned
      refute Tensor.pinned?(bare)
      assert inspect(bare) =~ "cpu unpinned"
      assert Tensor.to_binary(bare) == @f32
      assert %BlobView{owner: :none} = unpinned = TensorBlob.from_blob(%{blob | owner: :none})
      assert Tensor.memory(unpinned) == :unpinned
      # The option takes precedence over the blob's owner.
      assert Tensor.memory(TensorBlob.from_blob(blob, owner: :none)) == :unpinned
    end

    test "from_blob has one result, and every function that takes a tensor takes it" do
      t = t23()
      blob = TensorBlob.to_blob(t)
      spec = %{ptr: blob.ptr, shape: {3, 2}, dtype: :float32}

      results = [
        TensorBlob.from_blob(blob),
        TensorBlob.from_blob(spec, owner: t),
        TensorBlob.from_blob(spec, owner: {:keep, t}),
        TensorBlob.from_blob(spec, owner: :none)
      ]

      for view <- results do
        assert %BlobView{tensor: %Tensor{} = tensor} = view
        # The previous round's packed binary showed the memory: let it go
        # (its destructor runs a little after the collection that frees it).
        Lifetime.settled_stats()
        assert Tensor.write!(view, @f32) == view
        assert Tensor.to_binary(view) == @f32
        assert Tensor.shape(view) == Tensor.shape(tensor)
        assert Tensor.strides(view) == Tensor.strides(tensor)
        assert Tensor.dtype(view) == :float32
        assert Tensor.device(view) == :cpu
        assert Tensor.memory(view) == Tensor.memory(tensor)
        assert Tensor.pinned?(view) == Tensor.pinned?(tensor)
        assert Tensor.to_binary(Tensor.narrow(view, 0, 0, 1)) == binary_part(@f32, 0, 4 * elem(Tensor.shape(view), 1))
        assert Tensor.shape(Tensor.transpose(view, 0, 1)) == view |> Tensor.shape() |> then(&{elem(&1, 1), elem(&1, 0)})
        assert Tensor.to_binary(Tensor.to_device(view, :cpu)) == @f32
        # Its blob names the tensor (not the struct) as the owner.
        assert %Blob{ptr: ptr, owner: ^tensor} = TensorBlob.to_blob(view)
        assert ptr == blob.ptr
        assert Tensor.to_binary(TensorBlob.DLPack.import(TensorBlob.DLPack.export(view))) == @f32
        assert Tensor.to_binary(TensorBlob.IPC.export(view).tensor) == @f32
        assert Tensor.to_binary(TensorBlob.Nodes.unpack(TensorBlob.Nodes.pack(view, node(), via: :binary))) == @f32
      end
    end

    test "a map with no owner raises, saying how to pin or to ask for an unpinned view" do
      t = t23()
      blob = TensorBlob.to_blob(t)
      spec = %{ptr: blob.ptr, shape: {2, 3}, dtype: :float32}

      for no_owner <- [
            fn -> TensorBlob.from_blob(spec) end,
            fn -> TensorBlob.from_blob(spec, []) end,
            fn -> TensorBlob.from_blob(Map.put(spec, :owner, nil)) end,
            fn -> TensorBlob.from_blob(%{blob | owner: nil}) end,
            fn -> TensorBlob.from_blob(%{blob | owner: :undefined}) end,
            fn -> TensorBlob.from_blob(blob, owner: nil) end,
            fn -> TensorBlob.from_blob(struct(Blob, spec)) end
          ] do
        error = assert_raise ArgumentError, no_owner
        assert error.message =~ ~r/^owner: /
        # Elixir spelling of every way out.
        assert error.message =~ "owner: term"
        assert error.message =~ "owner: :none"
        assert error.message =~ "the caller answers"
        assert_safe_fixes_first(error.message)
      end
    end

    # The safe ways out (pin the owner, or copy) come before the unpinned
    # view, and the unpinned view comes with what it costs.
    defp assert_safe_fixes_first(message) do
      {pin, _} = :binary.match(message, "owner: term")
      {copy, _} = :binary.match(message, "from_binary")
      {none, _} = :binary.match(message, "owner: :none")
      assert pin < none and copy < none, message
      assert message =~ ~r/owner: :none.*after the memory is freed kills the VM/
    end

    test "the docs of from_blob offer the owner or a copy before owner: :none, and say its cost" do
      {:docs_v1, _, :elixir, _, _, _, docs} = Code.fetch_docs(TensorBlob)
      [doc] = for {{:function, :from_blob, 2}, _, _, %{"en" => doc}, _} <- docs, do: doc

      [owner_term, copy, none] =
        Enum.map(["an owner term", "copy the data", "`owner: :none`"], &elem(:binary.match(doc, &1), 0))

      assert owner_term < copy and copy < none
      assert doc =~ ~r/`owner: :none`.*kills the VM/s
    end

    test "explicit strides view a transposed layout" do
      t = t23()
      blob = TensorBlob.to_blob(t)

      %BlobView{tensor: view} = TensorBlob.from_blob(%{blob | shape: {3, 2}, strides: [1, 3]})
      assert Tensor.to_binary(view) == f32s([1, 4, 2, 5, 3, 6])
      assert Tensor.strides(view) == [1, 3]
    end

    test "zero-size and scalar tensors round trip" do
      empty = Tensor.zeros({0, 3}, :float32)
      %BlobView{tensor: v} = TensorBlob.from_blob(TensorBlob.to_blob(empty))
      assert Tensor.shape(v) == {0, 3}
      assert Tensor.to_binary(v) == ""

      scalar = Tensor.from_binary(<<42::64-signed-native>>, :int64, {})
      blob = TensorBlob.to_blob(scalar)
      assert blob.shape == {} and blob.byte_size == 8
      %BlobView{tensor: v} = TensorBlob.from_blob(blob)
      assert Tensor.to_binary(v) == <<42::64-signed-native>>

      assert Tensor.to_binary(TensorBlob.from_blob(%{ptr: 0, shape: {0}, dtype: :int32}, owner: :none)) == ""
    end
  end

  describe "documentation" do
    test "stats/0's docs and specs name every key it returns" do
      keys = Enum.sort(Map.keys(TensorBlob.stats()))
      {:docs_v1, _, :elixir, _, _, _, docs} = Code.fetch_docs(TensorBlob)
      [doc] = for {{:function, :stats, 0}, _, _, %{"en" => doc}, _} <- docs, do: doc
      for key <- keys, do: assert(doc =~ "`#{key}`", "TensorBlob.stats/0's doc does not name #{key}")
      # The specs of both APIs: a map of exactly these keys.
      for module <- [TensorBlob, :tensor_blob] do
        {:ok, specs} = Code.Typespec.fetch_specs(module)
        [{:type, _, :fun, [_args, {:type, _, :map, fields}]}] = for {{:stats, 0}, [spec]} <- specs, do: spec
        assert Enum.sort(for {:type, _, :map_field_exact, [{:atom, _, k}, _]} <- fields, do: k) == keys, inspect(module)
      end
    end

    test "the Erlang API's doc chunks are installed where Mix builds the app" do
      assert {:docs_v1, _, :erlang, _, %{"en" => _}, _, docs} = Code.fetch_docs(:tensor_blob)
      assert Enum.any?(docs, &match?({{:function, :from_blob, 2}, _, _, %{"en" => _}, _}, &1))
    end
  end

  describe "dtypes" do
    test "every supported dtype survives to_blob -> from_blob -> to_blob" do
      for dtype <- TensorBlob.dtypes() do
        size = TensorBlob.to_blob(Tensor.zeros({1}, dtype)).element_size
        # 0/1 bytes are valid for every dtype, bool included
        bytes = for i <- 1..(6 * size), into: <<>>, do: <<rem(i * 7, 2)>>
        t = Tensor.from_binary(bytes, dtype, {2, 3})
        blob = TensorBlob.to_blob(t)
        %BlobView{tensor: view} = TensorBlob.from_blob(blob)
        again = TensorBlob.to_blob(view)

        assert blob.dtype == dtype
        assert again.dtype == dtype

        assert Map.take(again, [:ptr, :shape, :strides, :element_size, :byte_size]) ==
                 Map.take(blob, [:ptr, :shape, :strides, :element_size, :byte_size])

        assert Tensor.to_binary(view) == bytes
      end
    end

    test "Nx's shorthands name the same dtypes as Nx's type tuples" do
      for {short, tuple} <- [
            f32: {:f, 32},
            f64: {:f, 64},
            f16: {:f, 16},
            bf16: {:bf, 16},
            c64: {:c, 64},
            c128: {:c, 128},
            u8: {:u, 8},
            s8: {:s, 8},
            s16: {:s, 16},
            s32: {:s, 32},
            s64: {:s, 64}
          ] do
        assert Tensor.dtype(Tensor.zeros({2}, short)) == Tensor.dtype(Tensor.zeros({2}, tuple))
        t = Tensor.zeros({2}, tuple)
        %BlobView{tensor: v} = TensorBlob.from_blob(%{TensorBlob.to_blob(t) | dtype: short})
        assert Tensor.dtype(v) == Tensor.dtype(t)
      end

      for {short, tuple} <- [u16: {:u, 16}, u32: {:u, 32}, u64: {:u, 64}] do
        assert :tensor_blob.nx_type(short) == tuple
      end
    end

    test "the linked libtorch's dtypes include those of libtorch 1.13" do
      supported = TensorBlob.dtypes()
      classic = for %{name: d, since: "1.13"} <- TensorBlob.tables().dtypes, do: d
      assert classic != []

      for d <- classic do
        assert d in supported
      end
    end

    test "dtypes the linked libtorch lacks raise TensorBlob.Error, never a substitute" do
      all = for %{name: d} <- TensorBlob.tables().dtypes, do: d

      for d <- all -- TensorBlob.dtypes() do
        error = assert_raise TensorBlob.Error, fn -> Tensor.zeros({2}, d) end
        assert error.message =~ Atom.to_string(d)
      end
    end

    test "ExTorch names and Nx types are accepted; output is canonical" do
      # Every other name and Nx type of the library's table (the names
      # themselves are a contract of test/tensor_blob_tests.erl).
      for %{name: canonical, aliases: aliases, nx: nx, available: true} <- TensorBlob.tables().dtypes,
          name <- aliases ++ List.wrap(nx) do
        assert Tensor.dtype(Tensor.zeros({1}, name)) == canonical
      end
    end
  end

  describe "tensors" do
    test "shape, strides, dtype, device, memory" do
      t = t23()
      assert Tensor.shape(t) == {2, 3}
      assert Tensor.strides(t) == [3, 1]
      assert Tensor.dtype(t) == :float32
      assert Tensor.device(t) == :cpu
      assert Tensor.memory(t) == :owned
    end

    test "to_binary copies row-major bytes whatever the strides" do
      t = t23()
      assert t |> Tensor.transpose(0, 1) |> Tensor.to_binary() == f32s([1, 4, 2, 5, 3, 6])
      assert t |> Tensor.narrow(1, 1, 2) |> Tensor.to_binary() == f32s([2, 3, 5, 6])
    end

    test "narrow and transpose share memory" do
      t = Tensor.zeros({2, 3}, :float32)
      t |> Tensor.narrow(1, 2, 1) |> Tensor.write!(f32s([7, 8]))
      assert Tensor.to_binary(t) == f32s([0, 0, 7, 0, 0, 8])
    end

    test "a write through a view whose elements share memory is refused, small or large" do
      # Inline (small) and on a dirty scheduler (past 256 KiB), a stride of
      # 0 and strides that overlap: refused, the memory left as it was.
      for n <- [4, 128 * 1024] do
        t = Tensor.from_binary(f32s(Enum.to_list(1..n)), :float32, {n})
        before = Tensor.to_binary(t)
        b = TensorBlob.to_blob(t)

        view = fn shape, strides ->
          case TensorBlob.from_blob(%{ptr: b.ptr, shape: shape, strides: strides, dtype: :float32}, owner: t) do
            %BlobView{tensor: v} -> v
            v -> v
          end
        end

        broadcast = view.({n}, [0])
        e = assert_raise ArgumentError, fn -> Tensor.write!(broadcast, f32s(List.duplicate(9, n))) end
        assert e.message =~ "some of its elements are the same memory"

        windows = view.({div(n, 2), 2}, [1, 1])
        assert_raise ArgumentError, ~r/same memory/, fn -> Tensor.write!(windows, f32s(List.duplicate(9, n))) end
        assert Tensor.to_binary(t) == before

        # Disjoint strided views still take writes.
        evens = view.({div(n, 2)}, [2])
        Tensor.write!(evens, f32s(List.duplicate(0, div(n, 2))))
        assert Tensor.to_binary(t) |> binary_part(4, 4) == binary_part(before, 4, 4)
        assert Tensor.to_binary(t) |> binary_part(0, 4) == f32s([0])
      end
    end

    test "a write through a view whose elements meet only by a combination of strides is refused" do
      # No stride is 0 and none is a multiple of another within reach, yet
      # two indices address one element: {4, 3} strides [2, 3] has (3, 0)
      # and (0, 2) at offset 6; {2, 2, 2} strides [1, 4, 5] has (1, 1, 0)
      # and (0, 0, 1) at offset 5; {200000, 3} strides [2, 3] is the first
      # on a dirty scheduler (2.4 MB written).
      for {shape, strides} <- [{{4, 3}, [2, 3]}, {{2, 2, 2}, [1, 4, 5]}, {{200_000, 3}, [2, 3]}] do
        extent = Enum.sum(Enum.zip_with(Tuple.to_list(shape), strides, fn n, s -> (n - 1) * s end)) + 1
        t = Tensor.from_binary(f32s(Enum.to_list(1..extent)), :float32, {extent})
        before = Tensor.to_binary(t)
        v = strided_view(t, shape, strides)
        numel = Tuple.product(shape)
        e = assert_raise ArgumentError, fn -> Tensor.write!(v, f32s(List.duplicate(9, numel))) end
        assert e.message =~ "some of its elements are the same memory"
        assert e.message =~ inspect(strides)
        assert Tensor.to_binary(t) == before
      end

      # Interleaved but disjoint (0, 2, 4 and 3, 5, 7): written, element by
      # element where the view says.
      t = Tensor.from_binary(f32s(Enum.to_list(1..8)), :float32, {8})
      v = strided_view(t, {3, 2}, [2, 3])
      Tensor.write!(v, f32s([10, 11, 12, 13, 14, 15]))
      assert Tensor.to_binary(t) == f32s([10, 2, 12, 11, 14, 13, 7, 15])
    end

    test "inspect shows any device type as the device table names it: type, or type:index" do
      # Both Inspect implementations (Tensor, DLPack) format devices here;
      # a device type added to the table needs no clause of its own.
      assert Tensor.format_device(:cpu) == "cpu"
      assert Tensor.format_device({:cuda, 1}) == "cuda:1"
      assert Tensor.format_device({:rocm, 0}) == "rocm:0"
      assert_raise ArgumentError, ~r/device/, fn -> Tensor.format_device("cuda") end
    end

    test "inspect shows dtype, shape, device, memory and the first elements" do
      assert inspect(t23()) == "#TensorBlob.Tensor<float32[2][3] cpu owned [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]>"
      t = t23()
      %BlobView{tensor: v} = TensorBlob.from_blob(Map.delete(TensorBlob.to_blob(t), :owner), owner: {:keep, t})
      assert inspect(v) == "#TensorBlob.Tensor<float32[2][3] cpu pinned [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]>"
      # Logical (row-major) order whatever the strides, nested by the
      # shape, as Nx shows it; a scalar; no elements.
      assert inspect(Tensor.transpose(t23(), 0, 1)) ==
               "#TensorBlob.Tensor<float32[3][2] cpu owned [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]>"

      assert inspect(Tensor.transpose(t23(), 0, 1), limit: 3) =~
               "float32[3][2] cpu owned [[1.0, 4.0], [2.0, ...], ...]>"

      assert inspect(Tensor.narrow(Tensor.transpose(t23(), 0, 1), 0, 1, 2)) =~ "[[2.0, 5.0], [3.0, 6.0]]>"

      assert inspect(Tensor.from_binary(<<-7::64-signed-native>>, :int64, {})) ==
               "#TensorBlob.Tensor<int64 cpu owned -7>"

      assert inspect(Tensor.zeros({0, 3}, :int32)) == "#TensorBlob.Tensor<int32[0][3] cpu owned []>"
      # A struct built by hand without its ref is shown, not an Inspect.Error.
      refute inspect(%{__struct__: Tensor}) =~ "Inspect.Error"
      assert inspect(Tensor.from_binary(<<1, 0>>, :bool, {2})) =~ "[true, false]>"

      specials = <<0x7F800000::32-native, 0x7FC00000::32-native, 0xFF800000::32-native>>
      assert inspect(Tensor.from_binary(specials, :float32, {3})) =~ "[Inf, NaN, -Inf]>"
    end

    test "inspect's preview is bounded, and reads only the elements it shows" do
      big = Tensor.zeros({4096, 4096}, :int64)
      # Off-heap binaries this process references (a copy of the 128 MiB
      # would be one); :erlang.memory(:binary) is unsupported under +Mea min.
      held = fn -> :erlang.process_info(self(), :binary) |> elem(1) |> Enum.map(&elem(&1, 1)) |> Enum.sum() end
      binary_memory = held.()
      assert inspect(big) == "#TensorBlob.Tensor<int64[4096][4096] cpu owned [[0, 0, 0, 0, 0, 0, 0, 0, ...], ...]>"
      assert inspect(Tensor.transpose(big, 0, 1), limit: 3) =~ "[[0, 0, 0, ...], ...]>"
      # No copy of the 128 MiB (the copies would still be on this process's heap).
      assert held.() - binary_memory < 1_000_000
    end

    test "inspect of an unpinned view shows its address, never its values: a bad pointer does not kill the VM" do
      # In a VM of its own: before, printing such a view read address 4096
      # and the VM died of SIGSEGV. The Erlang side's describe/1 and
      # printing the reference read nothing either.
      ebin = Path.dirname(:code.which(:tensor_blob))

      code = ~S'''
      view = TensorBlob.from_blob(%{ptr: 4096, shape: {4}, dtype: :float32}, owner: :none)
      IO.puts("shown: " <> inspect(view.tensor))
      IO.puts("view: " <> inspect(view))
      ref = TensorBlob.Tensor.ref(view.tensor)
      IO.puts("described: " <> inspect(:tensor_blob.describe(ref)))
      :io.format(~c"printed: ~p~n", [ref])
      '''

      {out, status} = System.cmd("elixir", ["-pa", ebin, "-e", code], stderr_to_stdout: true)
      assert status == 0, out
      assert out =~ "shown: #TensorBlob.Tensor<float32[4] cpu unpinned at 0x1000>\n"
      assert out =~ ~r/view: %TensorBlob.BlobView\{.*#TensorBlob.Tensor<float32\[4\] cpu unpinned at 0x1000>/
      assert out =~ "described: #{inspect(%{device: :cpu, dtype: :float32, memory: :unpinned, shape: {4}})}\n"
      assert out =~ ~r/printed: #Ref<[0-9.]+>\n/

      # Here: an unpinned view of good memory shows the same, without values.
      t = t23()
      blob = TensorBlob.to_blob(t)
      %BlobView{tensor: v} = TensorBlob.from_blob(%{ptr: blob.ptr, shape: {6}, dtype: :float32}, owner: :none)
      address = "0x" <> String.downcase(Integer.to_string(blob.ptr, 16))
      assert inspect(v) == "#TensorBlob.Tensor<float32[6] cpu unpinned at #{address}>"
      assert Tensor.to_binary(v) == Tensor.to_binary(t)
    end

    test "inspect of a DLPack capsule shows version, dtype, shape, device and state" do
      capsule = TensorBlob.DLPack.export(t23())
      assert inspect(capsule) == "#TensorBlob.DLPack<versioned float32[2][3] cpu armed>"
      read_only = TensorBlob.DLPack.export(t23(), read_only: true)
      assert inspect(read_only) == "#TensorBlob.DLPack<versioned float32[2][3] cpu armed read_only>"
      legacy = TensorBlob.DLPack.export(Tensor.transpose(t23(), 0, 1), version: :legacy)
      assert inspect(legacy) == "#TensorBlob.DLPack<legacy float32[3][2] cpu armed>"
      _ = TensorBlob.DLPack.consume(capsule)
      assert inspect(capsule) == "#TensorBlob.DLPack<versioned consumed>"
    end
  end

  describe "large owners" do
    test "an owner of millions of terms is pinned off the normal schedulers" do
      t = Tensor.from_binary(@f32, :float32, {6})
      blob = TensorBlob.to_blob(t)
      owner = {t, Enum.to_list(1..3_000_000)}
      parent = self()

      # A normal scheduler held past 50 ms by one call is reported (a dirty
      # scheduler's time is not).
      previous = :erlang.system_monitor()

      try do
        :erlang.system_monitor(parent, [{:long_schedule, 50}])

        # The heap has room to spare: no collection of the owner runs on a
        # normal scheduler in the caller either.
        pid =
          :erlang.spawn_opt(
            fn ->
              v = TensorBlob.from_blob(%{blob | owner: owner})
              send(parent, {:done, Tensor.to_binary(v.tensor)})
            end,
            min_heap_size: 12_000_000
          )

        assert_receive {:done, @f32}, 30_000
        # A report names where the process was scheduled in and out; one in
        # the library's code is a call that held the scheduler. One that
        # names no code (in: :undefined) is the process's own exit freeing
        # its large heap, which a slow build (ASan) can stretch past 50 ms.
        in_library =
          for {:monitor, ^pid, :long_schedule, info} <- drain_monitor(pid),
              Enum.any?([info[:in], info[:out]], &library_code?/1),
              do: info

        assert in_library == []
      after
        case previous do
          {monitor, opts} -> :erlang.system_monitor(monitor, opts)
          :undefined -> :erlang.system_monitor(:undefined)
        end
      end
    end
  end

  defp drain_monitor(pid) do
    receive do
      {:monitor, ^pid, _, _} = report -> [report | drain_monitor(pid)]
    after
      0 -> []
    end
  end

  defp library_code?({module, _, _}) when is_atom(module) do
    name = Atom.to_string(module)
    String.starts_with?(name, "tensor_blob") or String.starts_with?(name, "Elixir.TensorBlob")
  end

  defp library_code?(_), do: false

  describe "lifetimes" do
    test "a slice of a view keeps the owner alive after the struct and the owner are dropped" do
      bytes = for i <- 0..4095, into: <<>>, do: <<i::32-native>>

      Lifetime.assert_last_user(
        fn ->
          owner = Tensor.from_binary(bytes, :int32, {64, 64})
          %BlobView{tensor: view} = TensorBlob.from_blob(TensorBlob.to_blob(owner))
          view |> Tensor.narrow(0, 10, 2) |> Tensor.transpose(0, 1)
        end,
        fn slice, before ->
          expected = for c <- 0..63, r <- 10..11, into: <<>>, do: <<r * 64 + c::32-native>>
          assert Tensor.to_binary(slice) == expected
          # The view shares the owner tensor's storage: no pin object is held.
          assert Tensor.memory(slice) == :owned
          assert TensorBlob.stats().pins == before.pins
        end
      )
    end

    test "a view of another dtype, inside the owner at an offset, outlives the owner it shares storage with" do
      before = Lifetime.settled_stats()
      bytes = for i <- 0..255, into: <<>>, do: <<i>>

      view =
        Lifetime.in_process(fn ->
          owner = Tensor.from_binary(bytes, :uint8, {256})
          blob = TensorBlob.to_blob(owner)
          spec = %{ptr: blob.ptr + 8, shape: {4, 3}, strides: [1, 4], dtype: :int16}
          %BlobView{tensor: v} = TensorBlob.from_blob(spec, owner: owner)
          v
        end)

      Lifetime.churn()
      halves = for <<h::16-signed-native <- binary_part(bytes, 8, 32)>>, do: h
      expected = for r <- 0..3, c <- 0..2, into: <<>>, do: <<Enum.at(halves, r + 4 * c)::16-signed-native>>
      assert Tensor.to_binary(view) == expected
      assert Tensor.memory(view) == :owned
      view = nil
      _ = view
      assert Lifetime.await_stats(before) == before
    end

    test "keeping only view.tensor is safe" do
      bytes = :binary.copy(<<1, 2, 3, 4>>, 1024)

      tensor =
        Lifetime.in_process(fn ->
          owner = Tensor.from_binary(bytes, :uint8, {4096})
          TensorBlob.from_blob(TensorBlob.to_blob(owner)).tensor
        end)

      Lifetime.churn()
      assert Tensor.to_binary(tensor) == bytes
    end

    test "stats return to the start after views are dropped" do
      Lifetime.assert_freed_after(fn ->
        t = t23()

        for _ <- 1..1000 do
          %BlobView{tensor: v} = TensorBlob.from_blob(TensorBlob.to_blob(t))
          Tensor.narrow(v, 0, 0, 1)
        end

        :ok
      end)
    end

    test "many processes make and drop views of one tensor at once" do
      before = Lifetime.settled_stats()
      t = Tensor.from_binary(for(i <- 0..255, into: <<>>, do: <<i>>), :uint8, {16, 16})
      blob = TensorBlob.to_blob(t)

      results =
        1..32
        |> Enum.map(fn n ->
          Task.async(fn ->
            for i <- 1..500 do
              %BlobView{tensor: v} = TensorBlob.from_blob(blob)
              row = rem(n + i, 16)
              <<_::binary>> = bin = v |> Tensor.narrow(0, row, 1) |> Tensor.to_binary()
              bin == for(c <- 0..15, into: <<>>, do: <<row * 16 + c>>)
            end
            |> Enum.all?()
          end)
        end)
        |> Task.await_many(60_000)

      assert Enum.all?(results)
      blob = nil
      t = nil
      _ = {blob, t}
      assert Lifetime.await_stats(before) == before
    end
  end

  describe "bad input raises ArgumentError naming the field and the value" do
    setup do
      t = t23()
      {:ok, t: t, blob: TensorBlob.to_blob(t)}
    end

    defp assert_badarg(fun, pattern) do
      error = assert_raise ArgumentError, fun
      assert error.message =~ pattern
    end

    test "a freed tensor's reference says what it may be" do
      # The reference outlives its tensor only outside the VM's terms: as
      # term_to_binary's output, read back after the process that held the
      # tensor exited. The VM documents no way to tell it from a reference
      # that never was a tensor's: both get the message that names both.
      ext = Task.async(fn -> :erlang.term_to_binary(Tensor.zeros({2}, :float32).ref) end) |> Task.await()
      freed = Tensor.wrap(:erlang.binary_to_term(ext))

      for ref <- [freed, Tensor.wrap(make_ref())] do
        error = assert_raise ArgumentError, fn -> Tensor.shape(ref) end

        assert error.message =~
                 ~r/^tensor: expected a tensor, got #Reference<[0-9.]+>, a reference that names no live tensor: a tensor that was freed/

        assert error.message =~ "Keep the tensor itself"
      end
    end

    test "a node named by a string: the atom to give, the Elixir way", %{t: t} do
      error = assert_raise ArgumentError, fn -> TensorBlob.Nodes.pack(t, "nodeb@vm") end
      assert error.message == ~s|node: expected a node name (an atom), got "nodeb@vm": name it as an atom, :"nodeb@vm"|
      refute error.message =~ "map"
      error = assert_raise ArgumentError, fn -> TensorBlob.Nodes.same_host?("nodeb@vm") end
      assert error.message =~ ~s|name it as an atom, :"nodeb@vm"|
      # The Erlang API says it the Erlang way, and a bad option map apart.
      {:badarg, message} = catch_error(:tensor_blob.node_pack(t.ref, "nodeb@vm", %{}))
      assert message =~ "name it as an atom, 'nodeb@vm'"
      {:badarg, message} = catch_error(:tensor_blob.node_pack(t.ref, node(), keep: 0))
      assert message == "options: expected a map, got [{keep,0}]"
    end

    test "a bool tensor takes bytes 0 and 1 only" do
      message =
        "binary: byte 1 is 2, and each byte of a bool tensor must be 0 (false) or 1 (true), as libtorch stores " <>
          "bools; map the values to 0 and 1 first"

      assert_badarg(fn -> Tensor.from_binary(<<1, 2>>, :bool, {2}) end, message)
      assert_badarg(fn -> Tensor.from_binary(<<1, 2>>, :bool, {2}, copy: false) end, message)
      assert_badarg(fn -> Tensor.write!(Tensor.zeros({2}, :bool), <<1, 2>>) end, message)
      assert Tensor.to_binary(Tensor.from_binary(<<1, 0>>, :bool, {2})) == <<1, 0>>
    end

    test "huge integers and huge option terms make short errors, fast", %{t: t, blob: blob} do
      h = 1 <<< 200_000
      big = :binary.copy("k", 50_000_000)

      cases = [
        shape: fn -> Tensor.zeros({h}, :float32) end,
        ptr: fn -> TensorBlob.from_blob(%{ptr: h, shape: {1}, dtype: :float32}, owner: t) end,
        negative_ptr: fn -> TensorBlob.from_blob(%{ptr: -h, shape: {1}, dtype: :float32}, owner: t) end,
        stride: fn -> TensorBlob.from_blob(%{ptr: blob.ptr, shape: {2}, strides: [h], dtype: :float32}, owner: t) end,
        start: fn -> Tensor.narrow(t, 0, h, 1) end,
        cuda_index: fn -> Tensor.to_device(t, {:cuda, h}) end,
        option_value: fn -> Tensor.to_binary(t, copy: h) end,
        stream: fn -> TensorBlob.DLPack.export(t, stream: h) end,
        keep: fn -> TensorBlob.Nodes.pack(t, node(), keep: h) end,
        option_key: fn -> Tensor.to_binary(t, [{:copy, true}, {big, 1}]) end,
        from_blob_option: fn -> TensorBlob.from_blob(blob, [{big, 1}]) end,
        from_blob_option_value: fn -> TensorBlob.from_blob(blob, [{:owner, t}, {:x, big}]) end,
        dlpack_option: fn -> TensorBlob.DLPack.import(TensorBlob.DLPack.export(t), [{big, h}]) end
      ]

      # Fast is counted in reductions (the machine's load does not change
      # them): each error costs at most 120,000, where printing the 50 MB
      # key costs 270,000,000 (:io_lib) to 1,100,000,000 (inspect/2).
      # Printing the integer runs in a BIF, which counts no reductions: the
      # messages' size is what shows it is not printed.
      for {name, fun} <- cases do
        error = assert_raise ArgumentError, fun
        message = Exception.message(error)
        assert byte_size(message) < 4096, "#{name}: #{byte_size(message)} bytes"
        cost = reductions(fn -> catch_error(fun.()) end)
        assert cost < 5_000_000, "#{name}: #{cost} reductions"
        # The Erlang API's message is bounded too.
        assert {:badarg, erlang} = catch_error(erlang_call(name, t, blob, h))
        assert byte_size(erlang) < 4096, "#{name} (Erlang): #{byte_size(erlang)} bytes"
      end

      assert_badarg(fn -> Tensor.zeros({h}, :float32) end, "<an integer of 200001 bits>")
      assert_badarg(fn -> Tensor.narrow(t, 0, -h, 1) end, "<a negative integer of 200001 bits>")
    end

    defp erlang_call(:stream, t, _blob, h), do: :tensor_blob.to_dlpack(t.ref, %{stream: h})
    defp erlang_call(:start, t, _blob, h), do: :tensor_blob.narrow(t.ref, 0, h, 1)
    defp erlang_call(:cuda_index, t, _blob, h), do: :tensor_blob.to_device(t.ref, {:cuda, h})
    defp erlang_call(:ptr, t, _blob, h), do: :tensor_blob.from_blob(%{ptr: h, shape: {1}, dtype: :float32}, %{owner: t})
    defp erlang_call(_name, _t, _blob, h), do: :tensor_blob.zeros({h}, :float32)

    test "spec shape", %{blob: blob} do
      assert_badarg(fn -> TensorBlob.from_blob(:nope) end, "spec")
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | shape: [2, 3]}) end, "shape")
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | shape: {2, -3}}) end, ~r/shape.*-3/)
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | shape: {2, 1.5}}) end, ~r/shape.*1.5/)
      big = 0x7FFFFFFFFFFFFFFF
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | shape: {big, 3}, strides: nil}) end, ~r/shape.*overflow/)
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | shape: {big + 1}}) end, "shape")
      many = List.to_tuple(List.duplicate(1, 65))
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | shape: many, strides: nil}) end, "shape")
    end

    test "missing keys", %{blob: blob} do
      for key <- [:ptr, :shape, :dtype] do
        assert_badarg(fn -> TensorBlob.from_blob(Map.delete(blob, key)) end, Atom.to_string(key))
      end
    end

    test "pointers", %{blob: blob} do
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | ptr: -8}) end, ~r/ptr.*-8/)
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | ptr: "0x10"}) end, "ptr")
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | ptr: 0, owner: :none}) end, ~r/ptr.*null/)
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | ptr: blob.ptr + 2}) end, ~r/ptr.*aligned/)
    end

    test "strides", %{blob: blob} do
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | strides: [1]}) end, ~r/strides.*2/)

      # A blob reshaped keeps its old strides: the message says how to drop them, and that works.
      assert_badarg(
        fn -> TensorBlob.from_blob(%{blob | shape: {6}}) end,
        "can be dropped for row-major ones: %{blob | strides: nil}"
      )

      assert Tensor.shape(TensorBlob.from_blob(%{blob | shape: {6}, strides: nil})) == {6}
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | strides: {3, 1}}) end, "strides")
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | strides: [3, -1]}) end, ~r/strides.*-1/)

      assert_badarg(
        fn -> TensorBlob.from_blob(%{blob | strides: [0x7FFFFFFFFFFFFFFF, 1], owner: :none}) end,
        ~r/strides.*overflow/
      )
    end

    test "extents outside a known owner", %{t: t, blob: blob} do
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | shape: {3, 3}, strides: nil}) end, ~r/ptr.*outside/)
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | ptr: blob.ptr + 4}) end, "outside")
      other = TensorBlob.to_blob(Tensor.zeros({2, 3}, :float32))
      assert_badarg(fn -> TensorBlob.from_blob(other, owner: t) end, "outside")
      assert_badarg(fn -> TensorBlob.from_blob(other, owner: :binary.copy(<<0>>, 1000)) end, "outside")
      # A small binary is copied by the pin, so no pointer is inside the pinned copy.
      assert_badarg(fn -> TensorBlob.from_blob(other, owner: <<1, 2, 3>>) end, "outside")
    end

    test "dtypes and devices", %{blob: blob} do
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | dtype: :float33}) end, ~r/dtype.*float33/)
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | dtype: {:u, 4}}) end, "dtype")
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | dtype: "float32"}) end, "dtype")
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | device: :gpu}) end, ~r/device.*gpu/)
      assert_badarg(fn -> TensorBlob.from_blob(%{blob | device: {:cuda, -1}}) end, "device")
    end

    test "a CUDA blob over host memory is refused, never viewed as CPU memory", %{blob: blob} do
      # Without CUDA in libtorch it cannot be viewed at all; with it, the
      # owner (a CPU tensor) proves the memory is the host's.
      if TensorBlob.CUDA.runtime().libtorch do
        assert_badarg(
          fn -> TensorBlob.from_blob(%{blob | device: {:cuda, 0}}) end,
          "device: the blob declares {:cuda, 0}, but the owner's memory is on :cpu"
        )

        # A binary is host memory too: its device is checked before its extent.
        bytes = :binary.copy(<<0>>, 4096)
        spec = %{ptr: blob.ptr, shape: blob.shape, dtype: blob.dtype, device: {:cuda, 0}}

        assert_badarg(
          fn -> TensorBlob.from_blob(spec, owner: bytes) end,
          "device: the blob declares {:cuda, 0}, but the owner's memory is on :cpu"
        )
      else
        error = assert_raise TensorBlob.Error, fn -> TensorBlob.from_blob(%{blob | device: {:cuda, 0}}) end
        assert error.message =~ "CUDA"
      end
    end

    test "options", %{blob: blob} do
      assert_badarg(fn -> TensorBlob.from_blob(blob, pin: true) end, "pin")
      assert_badarg(fn -> TensorBlob.from_blob(blob, %{owner: blob}) end, "options")
      assert_badarg(fn -> TensorBlob.from_blob(blob, [{:owner, blob} | :tail]) end, "options")
      assert_badarg(fn -> TensorBlob.from_blob(blob, :owner) end, "options")
    end

    test "tensor functions given something else" do
      for bad <- [:atom, self(), make_ref(), %{ref: :x}, "t"] do
        assert_badarg(fn -> TensorBlob.to_blob(bad) end, "tensor")
        assert_badarg(fn -> Tensor.shape(bad) end, "tensor")
        assert_badarg(fn -> Tensor.to_binary(bad) end, "tensor")
        assert_badarg(fn -> Tensor.narrow(bad, 0, 0, 1) end, "tensor")
        assert_badarg(fn -> Tensor.write!(bad, <<>>) end, "tensor")
      end
    end

    test "messages show terms the Elixir way", %{t: t} do
      # Raised by the Erlang facade: rendered with inspect/1, never as Erlang terms.
      error = assert_raise ArgumentError, fn -> TensorBlob.to_blob({2, 0}) end
      assert error.message == "tensor: expected a tensor, got {2, 0}"

      error = assert_raise ArgumentError, fn -> Tensor.zeros({2}, "float32") end
      assert error.message =~ ~s(dtype: unknown dtype "float32")
      assert error.message =~ ":float32"
      assert error.message =~ "{:f, 32}"
      refute error.message =~ "<<"

      error = assert_raise ArgumentError, fn -> TensorBlob.from_blob(TensorBlob.to_blob(t), pin: true) end
      assert error.message =~ "pin: unknown option; known: [:owner]"

      error = assert_raise ArgumentError, fn -> Tensor.to_binary(t, copy: :maybe) end
      assert error.message =~ "copy: expected a boolean or :if_needed, got :maybe"

      error = assert_raise ArgumentError, fn -> Tensor.zeros({2}, "float32") end

      assert error.message ==
               ~s(dtype: unknown dtype "float32"; expected one of #{inspect(TensorBlob.dtypes())} ) <>
                 "(those this libtorch holds), an ExTorch name (such as :float or :long) or an Nx type " <>
                 "(such as {:f, 32} or :f32)"
    end

    test "messages raised inside the NIF show terms the Elixir way", %{t: t, blob: blob} do
      for {call, message} <- [
            {fn -> Tensor.zeros({2, :a}, :float32) end,
             "shape: dimension 1 must be a non-negative 64-bit integer, got :a in {2, :a}"},
            {fn -> TensorBlob.from_blob(%{blob | shape: {2, 1.5}}) end,
             "shape: dimension 1 must be a non-negative 64-bit integer, got 1.5 in {2, 1.5}"},
            {fn -> TensorBlob.from_blob(%{blob | strides: [3, -1]}) end,
             "strides: stride 1 must be a non-negative 64-bit integer, got -1 in [3, -1]"},
            {fn -> TensorBlob.from_blob(%{blob | ptr: "0x10"}) end,
             ~s(ptr: expected a non-negative integer address, got "0x10")},
            {fn -> TensorBlob.from_blob(%{blob | device: {:cuda, -1}}) end,
             "device: expected :cpu or {:cuda, index}, got {:cuda, -1}"},
            {fn -> Tensor.to_device(t, "cuda") end, ~s(device: expected :cpu or {:cuda, index}, got "cuda")},
            {fn -> Tensor.from_binary([1, 2], :uint8, {2}) end, "binary: expected a binary, got [1, 2]"},
            {fn -> TensorBlob.IPC.open("a/b", :uint8, {1}) end,
             ~s(handle: "a/b" is no shared-memory name (an optional leading slash, then 1 to 253 bytes ) <>
               "with no slash or NUL)"},
            {fn -> t |> Tensor.transpose(0, 1) |> Tensor.to_binary(copy: false) end,
             "tensor: not contiguous (shape {3, 2}, strides [1, 3]); a binary shows row-major memory only, " <>
               "so copy it (copy: true)"}
          ] do
        assert_raise ArgumentError, message, call
      end

      # A spec missing a key: the field leads as text, the spec is an Elixir
      # map (in whatever key order this Elixir inspects maps).
      error = assert_raise ArgumentError, fn -> TensorBlob.from_blob(Map.delete(blob, :ptr)) end
      assert error.message =~ ~r/^ptr: missing key in blob spec %\{/
      assert error.message =~ "__struct__: TensorBlob.Blob"
      assert error.message =~ "dtype: :float32"
      refute error.message =~ "=>"

      # The Erlang API called directly keeps Erlang's rendering.
      assert {:badarg, "shape: dimension 1 must be a non-negative 64-bit integer, got a in {2,a}"} ==
               catch_error(:tensor_blob.zeros({2, :a}, :float32))
    end

    test "a huge term in a message is inspected with limits, never cut in the middle", %{blob: blob} do
      # A struct too large to show whole is shown by its fields (its own
      # Inspect would walk all of it).
      huge = MapSet.new(1..100_000)
      error = assert_raise ArgumentError, fn -> TensorBlob.from_blob(%{blob | ptr: huge}) end
      assert error.message =~ ~r/^ptr: expected a non-negative integer address, got %MapSet\{map: %\{.*, \.\.\.\}/
      assert byte_size(error.message) < 1100

      small = MapSet.new(1..3)
      error = assert_raise ArgumentError, fn -> TensorBlob.from_blob(%{blob | ptr: small}) end
      assert error.message == "ptr: expected a non-negative integer address, got MapSet.new([1, 2, 3])"

      structs = List.duplicate(%URI{host: String.duplicate("h", 10_000)}, 1000)
      error = assert_raise ArgumentError, fn -> Tensor.from_binary(structs, :uint8, {2}) end
      assert error.message =~ ~r/^binary: expected a binary, got \[%URI\{.*\.\.\.\]$/
      assert byte_size(error.message) < 1100
    end

    test "a layout whose elements' byte size overflows is refused, naming the shape", %{t: t, blob: blob} do
      # Strides of 0 hold any count of elements in a few bytes; numel times
      # the element size must still fit, or no accessor could use the view
      # (each raised "libtorch scalar type 6 has no dtype here").
      for {shape, dtype} <- [
            {{1 <<< 62}, :float32},
            {{1 <<< 61}, :float64},
            {{1 <<< 60}, :complex128},
            {Tuple.duplicate(2, 62), :float32}
          ] do
        spec = %{ptr: blob.ptr, shape: shape, strides: List.duplicate(0, tuple_size(shape)), dtype: dtype}

        assert_raise ArgumentError,
                     "shape: the byte size of the elements (their number times the element size) overflows " <>
                       "64 bits in #{inspect(shape, limit: 50)}",
                     fn -> TensorBlob.from_blob(spec, owner: t) end
      end

      # No elements: 0 bytes, whatever the other dimensions; every accessor works.
      for {shape, strides} <- [{{1 <<< 62, 0}, [0, 1]}, {{0, 1 <<< 62}, [0, 0]}] do
        %{tensor: v} = TensorBlob.from_blob(%{ptr: blob.ptr, shape: shape, strides: strides, dtype: :float32}, owner: t)

        assert Tensor.shape(v) == shape
        assert Tensor.strides(v) == strides
        assert Tensor.dtype(v) == :float32
        assert Tensor.device(v) == :cpu
        assert Tensor.memory(v) == :pinned
        assert Tensor.to_binary(v) == ""
        assert Tensor.to_binary(v, copy: false) == ""
        assert Tensor.write!(v, "") == v
        assert TensorBlob.to_blob(v).byte_size == 0
        assert Tensor.shape(Tensor.transpose(v, 0, 1)) == {elem(shape, 1), elem(shape, 0)}
        assert Tensor.shape(Tensor.narrow(v, 0, 0, 0)) == {0, elem(shape, 1)}
        assert Tensor.shape(TensorBlob.DLPack.import(TensorBlob.DLPack.export(v))) == shape
        assert inspect(v) =~ "float32"
      end
    end

    # Printed whole, each took seconds (a million-deep list: 43 s) or forever
    # (a tree of shared subterms, 40 wide and 40 deep: small in memory, 40^40
    # terms in full). A hang fails here by the test's timeout.
    @tag timeout: 300_000
    test "a term of any depth or width is printed cut down, in bounded time" do
      nest = fn n, wrap, term -> Enum.reduce(1..n, term, fn _, acc -> wrap.(acc) end) end
      deep = nest.(1_000_000, &[&1], [])

      terms = [
        deep,
        nest.(100_000, &{&1}, {}),
        nest.(100_000, &%{k: &1}, %{}),
        nest.(40, &List.duplicate(&1, 40), 0)
      ]

      for term <- terms,
          call <- [
            fn -> TensorBlob.from_blob(term, owner: :none) end,
            fn -> Tensor.zeros(term, :float32) end,
            fn -> Tensor.zeros({1}, term) end,
            fn -> TensorBlob.IPC.open(term, :uint8, {1}) end,
            fn -> Tensor.shape(term) end
          ] do
        error = assert_raise ArgumentError, call
        assert byte_size(error.message) < 1500
        assert error.message =~ "..."
        refute error.message =~ "=>"
      end

      # Cut at a depth of 20, so that the shape of the term stays readable;
      # the Erlang API renders the same cut the Erlang way.
      cut = String.duplicate("[", 20) <> "..." <> String.duplicate("]", 20)

      assert_raise ArgumentError, "shape: expected a tuple of non-negative integers, got " <> cut, fn ->
        Tensor.zeros(deep, :float32)
      end

      assert_raise ArgumentError, "spec: expected a map with ptr, shape and dtype, got " <> cut, fn ->
        TensorBlob.from_blob(deep)
      end

      assert {:badarg, "shape: expected a tuple of non-negative integers, got " <> ^cut} =
               catch_error(:tensor_blob.zeros(deep, :float32))

      assert {:badarg,
              "tensor: expected a tensor, got #{String.duplicate("\#{k => ", 20)}...#{String.duplicate("}", 20)}"} ==
               catch_error(:tensor_blob.to_blob(nest.(100, &%{k: &1}, %{})))

      error = assert_raise ArgumentError, fn -> Tensor.shape(nest.(100, &%{k: &1}, %{})) end

      assert error.message ==
               "tensor: expected a tensor, got #{String.duplicate("%{k: ", 20)}...#{String.duplicate("}", 20)}"
    end

    test "a struct given where a tensor is expected says what to do with it", %{t: t} do
      nx = %{__struct__: Nx.Tensor, shape: {2}, type: {:f, 32}, names: [nil], data: nil}

      for call <- [
            fn -> TensorBlob.to_blob(nx) end,
            fn -> Tensor.shape(nx) end,
            fn -> Tensor.to_binary(nx, copy: false) end,
            fn -> TensorBlob.DLPack.export(nx) end,
            fn -> TensorBlob.IPC.export(nx) end
          ] do
        error = assert_raise ArgumentError, call

        assert error.message =~
                 ~r/^tensor: expected a tensor, got an Nx tensor: convert it with TensorBlob.Nx.from_nx\/2/

        refute error.message =~ "'Elixir."
      end

      # The Erlang API takes the bare tensor; the Elixir facade unwraps a view.
      view = TensorBlob.from_blob(TensorBlob.to_blob(t))
      assert {:error, {:badarg, message}} = catch_error(:tensor_blob.shape(view)) |> then(&{:error, &1})
      assert message =~ "maps:get(tensor, View)"
      assert_badarg(fn -> Tensor.shape(TensorBlob.to_blob(t)) end, "TensorBlob.from_blob/2")
      assert_badarg(fn -> Tensor.shape(TensorBlob.DLPack.export(t)) end, "TensorBlob.DLPack.import/2")
    end

    test "tensor arguments", %{t: t} do
      assert_badarg(fn -> Tensor.from_binary(<<1, 2, 3>>, :float32, {1}) end, ~r/binary.*3 bytes/)
      assert_badarg(fn -> Tensor.from_binary([1, 2], :uint8, {2}) end, "binary")
      assert_badarg(fn -> Tensor.zeros({-1}, :float32) end, "shape")
      assert_badarg(fn -> Tensor.zeros({2}, :nope) end, "dtype")
      assert_badarg(fn -> Tensor.narrow(t, 2, 0, 1) end, "dim")
      assert_badarg(fn -> Tensor.narrow(t, 1, 4, 1) end, "start")
      assert_badarg(fn -> Tensor.narrow(t, 1, 1, 3) end, "length")
      assert_badarg(fn -> Tensor.transpose(t, 0, 5) end, "dim1")
      assert_badarg(fn -> Tensor.narrow(Tensor.zeros({}, :int8), 0, 0, 1) end, ~r/dim.*no dimensions/)
      assert_badarg(fn -> Tensor.write!(t, <<0, 0>>) end, ~r/binary.*24 bytes/)
    end
  end
end
