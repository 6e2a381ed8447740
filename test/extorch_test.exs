# Runs when ExTorch is on the code path (built against the libtorch
# tensor_blob links): the ExTorch stage of make compat-test (Debian 13).
# Excluded without.
if Code.ensure_loaded?(ExTorch.Tensor.Blob) do
  defmodule TensorBlob.ExTorchTest do
    use ExUnit.Case, async: false
    @moduletag :extorch

    alias TensorBlob.Tensor
    alias TensorBlob.ExTorch, as: TEx
    alias TensorBlob.Test.{Lifetime, Shm}

    setup_all do
      # ExTorch's defaults (device, dtype) live in its application's registries.
      {:ok, _} = Application.ensure_all_started(:extorch)
      :ok
    end

    defp ptr(%ExTorch.Tensor{} = x), do: ExTorch.Tensor.Blob.to_blob(x).ptr
    defp ptr(%ExTorch.Tensor.BlobView{tensor: x}), do: ptr(x)
    defp ptr(t), do: TensorBlob.to_blob(t).ptr

    defp info(dtype), do: Enum.find(TensorBlob.tables().dtypes, &(&1.name == dtype))

    # Bytes that are a valid value of every dtype: each element's bytes are
    # small integers (0 or 1 for bool).
    defp bytes_for(dtype, n) do
      size = info(dtype).element_size
      mod = if dtype == :bool, do: 2, else: 3
      for i <- 1..(n * size), into: <<>>, do: <<if(rem(i - 1, size) == 0, do: rem(div(i, size), mod), else: 0)>>
    end

    # An ExTorch tensor of these bytes: ExTorch's memory, ExTorch's tensor.
    defp extorch_of(bytes, dtype, shape), do: TEx.to_extorch(Tensor.from_binary(bytes, dtype, shape))

    # An ExTorch tensor's bytes in row-major order (ExTorch's contiguous
    # copy, viewed). Not through ExTorch's own from_blob: given its own
    # blob of an int8 or bfloat16 tensor (dtype :""), it makes a float32
    # tensor over the memory, twice or four times too long.
    defp extorch_bytes(x), do: Tensor.to_binary(TEx.from_extorch(ExTorch.contiguous(x)))

    # [:tensor_blob, :copy, :stop] and [:tensor_blob, :transfer, :stop]
    # events of fun, in order.
    defp events(fun) do
      me = self()
      id = {__MODULE__, make_ref()}

      :ok =
        :telemetry.attach_many(
          id,
          [[:tensor_blob, :copy, :stop], [:tensor_blob, :transfer, :stop]],
          &__MODULE__.handle/4,
          me
        )

      try do
        result = fun.()
        {result, collect_events([])}
      after
        :telemetry.detach(id)
      end
    end

    def handle([:tensor_blob, kind, :stop], m, meta, pid), do: send(pid, {:tb_event, kind, m, meta})

    defp collect_events(acc) do
      receive do
        {:tb_event, kind, m, meta} -> collect_events([{kind, m, meta} | acc])
      after
        0 -> Enum.reverse(acc)
      end
    end

    # The copies an exchange made (making the test's input is not one).
    defp copies(evs),
      do:
        for(
          {:copy, m, meta} <- evs,
          meta.function != {Tensor, :from_binary, 3},
          do: {meta.function, meta.reason, m.bytes}
        )

    test "ExTorch, Torchx and tensor_blob map one libtorch_cpu" do
      _ = ExTorch.zeros({2})

      if Code.ensure_loaded?(Torchx.Backend) do
        {:ok, _} = Application.ensure_all_started(:torchx)
        _ = Nx.iota({2}, backend: Torchx.Backend)
      end

      _ = TensorBlob.Tensor.zeros({2}, :float32)
      maps = File.read!("/proc/self/maps") |> String.split("\n")
      libs = fn name -> maps |> Enum.filter(&(&1 =~ name)) |> Enum.map(&List.last(String.split(&1))) |> Enum.uniq() end
      assert [_] = libs.("/extorch.so")
      assert [_] = libs.("tensor_blob_nif.so")
      if Code.ensure_loaded?(Torchx.Backend), do: assert([_] = libs.("/torchx.so"))
      assert [_] = libs.("libtorch_cpu.so")
    end

    test "ExTorch's dtype names are the dtype table's: the name ExTorch gives a tensor means its dtype" do
      shared = TEx.shared_dtypes()
      # What ExTorch 0.4 and libtorch 2.6 hold in common at least.
      for d <- [:bool, :uint8, :int8, :int16, :int32, :int64, :float16, :bfloat16, :float32, :float64, :complex64],
          do: assert(d in shared, "#{d} missing from #{inspect(shared)}")

      for dtype <- shared do
        x = ExTorch.zeros({3}, dtype: dtype)
        blob = ExTorch.Tensor.Blob.to_blob(x)
        assert blob.element_size == info(dtype).element_size, "#{dtype}"

        if blob.dtype == :"" do
          # ExTorch 0.4 has no name for these: from_blob of its blob goes
          # through from_extorch/1, which names the dtype from the owner.
          assert dtype in [:int8, :bfloat16]
          assert Tensor.dtype(TensorBlob.from_blob(blob)) == dtype
        else
          # ExTorch's name (:float, :long, :complex_float, ...) is a name of
          # the table for the same dtype.
          assert blob.dtype == dtype or blob.dtype in info(dtype).aliases, "#{dtype}: #{inspect(blob.dtype)}"
          assert Tensor.dtype(TensorBlob.from_blob(blob)) == dtype
        end

        assert Tensor.dtype(TEx.from_extorch(x)) == dtype
        assert Tensor.dtype(TEx.from_extorch(blob)) == dtype
      end
    end

    test "ExTorch -> tensor_blob for every dtype both hold: zero-copy, and the data outlives every ExTorch reference" do
      start = Lifetime.settled_stats()

      for dtype <- TEx.shared_dtypes() do
        bytes = bytes_for(dtype, 96)

        # Every ExTorch reference lives in a process that exits: only the
        # views are left.
        {views, expected} =
          Lifetime.in_process(fn ->
            x = extorch_of(bytes, dtype, {12, 8})
            assert extorch_bytes(x) == bytes, "#{dtype}"
            # ExTorch's blob as it is (from_extorch/1 names int8 and
            # bfloat16, which ExTorch 0.4 calls :"").
            blob = ExTorch.Tensor.Blob.to_blob(x)
            by_struct = if blob.dtype == :"", do: TEx.from_extorch(blob), else: TensorBlob.from_blob(blob)
            by_adapter = TEx.from_extorch(x)
            assert ptr(by_adapter) == ptr(x) and ptr(by_struct) == ptr(x)
            assert by_adapter.owner == x
            xt = ExTorch.transpose(x, 0, 1)
            xn = ExTorch.narrow(xt, 0, 2, 5)
            strided = TEx.from_extorch(xn)
            assert Tensor.strides(strided) == ExTorch.Tensor.Blob.to_blob(xn).strides
            assert Tensor.strides(strided) == [1, 8]
            ours = Tensor.from_binary(bytes, dtype, {12, 8}) |> Tensor.transpose(0, 1) |> Tensor.narrow(0, 2, 5)
            # Only the tensors: the views' owners go with their structs.
            {[by_struct.tensor, by_adapter.tensor, strided.tensor], Tensor.to_binary(ours)}
          end)

        # Freed memory of the same size would be taken by these (all ones),
        # held while the views are read.
        Lifetime.churn()
        fillers = for _ <- 1..200, do: ExTorch.ones({byte_size(bytes)}, dtype: :uint8)
        Lifetime.collect()
        [a, b, s] = views
        assert Tensor.to_binary(a) == bytes, "#{dtype}"
        assert Tensor.to_binary(b) == bytes, "#{dtype}"
        assert Tensor.to_binary(s) == expected, "#{dtype} (strided)"
        assert Tensor.memory(s) == :pinned
        _ = fillers
      end

      assert Lifetime.await_stats(start) == start
    end

    test "an ExTorch BlobView is pinned whole: its owner and tensor outlive the struct" do
      bytes = bytes_for(:float32, 64)

      t =
        Lifetime.in_process(fn ->
          x = extorch_of(bytes, :float32, {64})
          view = ExTorch.Tensor.Blob.from_blob(ExTorch.Tensor.Blob.to_blob(x), owner: x)
          TEx.from_extorch(view).tensor
        end)

      Lifetime.churn()
      assert Tensor.to_binary(t) == bytes
    end

    test "tensor_blob -> ExTorch by default: an ExTorch tensor of its own, one copy, that outlives ours" do
      bytes = bytes_for(:float32, 1024)
      expected = Tensor.to_binary(Tensor.from_binary(bytes, :float32, {32, 32}) |> Tensor.transpose(0, 1))

      # Ours lives in a process that exits: only the ExTorch tensor is left.
      {x, evs} =
        events(fn ->
          Lifetime.in_process(fn ->
            ours = Tensor.from_binary(bytes, :float32, {32, 32}) |> Tensor.transpose(0, 1)
            x = TEx.to_extorch(ours)
            assert ptr(x) != ptr(ours)
            x
          end)
        end)

      assert %ExTorch.Tensor{size: {32, 32}} = x
      Lifetime.churn()
      assert extorch_bytes(x) == expected
      assert copies(evs) == [{{TEx, :to_extorch, 2}, :backend, 4096}]

      assert [{:transfer, %{copied: 4096}, %{zero_copy: false, backend: ExTorch}}] =
               for(e = {:transfer, _, _} <- evs, do: e)
    end

    test "a safetensors file's tensors: ExTorch's own copies, or a view that pins the mapping" do
      dir = Path.join(System.tmp_dir!(), "tb_extorch_st_#{System.unique_integer([:positive])}")
      File.mkdir_p!(dir)
      on_exit(fn -> File.rm_rf!(dir) end)
      path = Path.join(dir, "weights.safetensors")
      w = Shm.floats(Enum.map(0..255, &(&1 * 0.5)))
      b = bytes_for(:int32, 16)
      :ok = TensorBlob.SafeTensors.write(path, %{"w" => {w, :float32, {16, 16}}, "b" => {b, :int32, {16}}})
      expected_t = Tensor.to_binary(Tensor.transpose(Tensor.from_binary(w, :float32, {16, 16}), 0, 1))
      start = Lifetime.settled_stats()

      # The file's handle and tensors live in a process that exits: only
      # what ExTorch holds is left.
      {xw, xb, xt, view} =
        Lifetime.in_process(fn ->
          %{tensors: %{"w" => ours_w, "b" => ours_b}} = TensorBlob.SafeTensors.open(path)
          assert Tensor.memory(ours_w) == :file
          xw = TEx.to_extorch(ours_w)
          assert ptr(xw) != ptr(ours_w)
          view = TEx.to_extorch(ours_w, unsafe_view: true)
          assert ptr(view) == ptr(ours_w)
          {xw, TEx.to_extorch(ours_b), TEx.to_extorch(Tensor.transpose(ours_w, 0, 1)), view}
        end)

      File.rm_rf!(dir)
      Lifetime.churn()
      assert extorch_bytes(xw) == w
      assert extorch_bytes(xb) == b
      assert extorch_bytes(xt) == expected_t
      # The view's owner is the file's tensor: the mapping lives while the
      # BlobView does.
      assert %ExTorch.Tensor.BlobView{owner: owner} = view
      assert Tensor.memory(owner) == :file
      assert ExTorch.Tensor.to_list(view.tensor) |> List.flatten() == Enum.map(0..255, &(&1 * 0.5))
      _ = view
      view = nil
      _ = view
      assert Lifetime.await_stats(start) == start
    end

    test "unsafe_view: true gives ExTorch's BlobView over our memory: zero-copy, writes seen" do
      ours = Tensor.from_binary(bytes_for(:float32, 16), :float32, {4, 4})
      {view, evs} = events(fn -> TEx.to_extorch(ours, unsafe_view: true) end)
      assert %ExTorch.Tensor.BlobView{tensor: %ExTorch.Tensor{}, owner: ^ours} = view
      assert ptr(view) == ptr(ours)
      assert copies(evs) == []
      Tensor.write!(ours, Shm.floats(Enum.map(1..16, &(&1 * 1.0))))
      assert ExTorch.Tensor.to_list(view.tensor) == Enum.chunk_every(Enum.map(1..16, &(&1 * 1.0)), 4)
      # The caller keeps our tensor while ExTorch reads the view (the rule
      # of unsafe_view): a use after the read keeps it from the collector.
      assert Tensor.shape(ours) == {4, 4}
    end

    test "a tensor ExTorch allocated is zero-copy both ways, for every dtype both hold" do
      for dtype <- TEx.shared_dtypes(), do: zero_copy_both_ways(ExTorch.zeros({2, 2}, dtype: dtype))
      zero_copy_both_ways(ExTorch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    end

    defp zero_copy_both_ways(x) do
      {{back, back_unsafe}, evs} =
        events(fn ->
          view = TEx.from_extorch(x)
          {TEx.to_extorch(view), TEx.to_extorch(view, unsafe_view: true)}
        end)

      assert back == x, inspect(x.dtype)
      assert %ExTorch.Tensor.BlobView{tensor: ^x} = back_unsafe
      assert copies(evs) == []
      assert Enum.all?(for {:transfer, m, _} <- evs, do: m.copied == 0)
    end

    import TensorBlob.Test.Raised, only: [raised: 1]

    describe "memory that must not change" do
      # A binary of more than 64 bytes: its bytes are shared, not copied with the term.
      defp threes, do: :binary.copy(<<3>>, 256)

      # Each: a tensor over memory no one may write, and the binary that shows it.
      defp unwritable do
        shown_bin = threes()
        view = Tensor.from_binary(shown_bin, :uint8, {256}, copy: false)
        import_bin = threes()

        imported =
          TensorBlob.DLPack.import(TensorBlob.DLPack.export(Tensor.from_binary(import_bin, :uint8, {256})),
            read_only: true
          )

        owned = Tensor.from_binary(threes(), :uint8, {256})
        # A binary that shows our own memory (to_binary(copy: false)).
        shown = Tensor.to_binary(owned, copy: false)
        x = extorch_of(threes(), :uint8, {256})
        of_extorch = TEx.from_extorch(x)
        # ... and one that shows ExTorch's memory, viewed.
        shown_x = Tensor.to_binary(of_extorch, copy: false)

        [
          {"a view of a binary", view, shown_bin},
          {"a narrowed view of a binary", Tensor.narrow(view, 0, 8, 16), shown_bin},
          {"a read-only DLPack import", imported, nil},
          {"memory a binary shows", owned, shown},
          {"ExTorch's memory a binary shows", of_extorch, shown_x}
        ]
      end

      test "unsafe_view: true refuses it with reason read_only; ExTorch never writes it" do
        for {what, t, bin} <- unwritable() do
          {e, data} = raised(fn -> TEx.to_extorch(t, unsafe_view: true) end)
          assert %ArgumentError{} = e, what
          assert data == %{reason: :read_only, argument: :tensor}, what
          assert e.message =~ "unsafe_view", what
          if bin, do: assert(bin == threes(), what)
        end
      end

      test "by default ExTorch gets a copy of its own: its writes leave the binary as it was" do
        for {what, t, bin} <- unwritable() do
          {x, evs} = events(fn -> TEx.to_extorch(t) end)
          assert %ExTorch.Tensor{} = x, what
          assert ptr(x) != ptr(t), what
          assert [{{TEx, :to_extorch, 2}, :backend, _}] = copies(evs), what
          # ExTorch's in-place write.
          x = ExTorch.index_put(x, 0, 9)
          assert binary_part(extorch_bytes(x), 0, 2) == <<9, 3>>, what
          if bin, do: assert(bin == threes(), what)
          assert binary_part(Tensor.to_binary(t), 0, 1) == <<3>>, what
        end
      end

      test "writable memory still goes zero-copy with unsafe_view: true, and back as the ExTorch tensor" do
        ours = Tensor.from_binary(threes(), :uint8, {256})
        assert %ExTorch.Tensor.BlobView{} = view = TEx.to_extorch(ours, unsafe_view: true)
        assert ptr(view) == ptr(ours)
        x = extorch_of(threes(), :uint8, {256})
        assert TEx.to_extorch(TEx.from_extorch(x)) == x
      end
    end

    describe "from_extorch checks a blob against what ExTorch says of its owner" do
      test "a pointer, shape, strides, dtype or device the owner does not hold is refused, naming the field" do
        x = extorch_of(bytes_for(:float32, 16), :float32, {4, 4})
        other = extorch_of(bytes_for(:float32, 4), :float32, {4})
        blob = ExTorch.Tensor.Blob.to_blob(x)

        for {forged, field, reason} <- [
              {%{blob | ptr: 0x1000}, :ptr, :out_of_extent},
              {%{blob | ptr: ptr(other)}, :ptr, :out_of_extent},
              {%{blob | shape: {4, 1_000_000}}, :shape, :out_of_extent},
              {%{blob | shape: {8, 4}}, :shape, :out_of_extent},
              {%{blob | ptr: blob.ptr + 4}, :shape, :out_of_extent},
              {%{blob | strides: [8, 1]}, :strides, :out_of_extent},
              {%{blob | shape: {4_000_000}, strides: [1]}, :strides, :out_of_extent},
              {%{blob | dtype: :float64}, :dtype, :bad_dtype},
              {%{blob | dtype: :double}, :dtype, :bad_dtype},
              {%{blob | device: {:cuda, 0}}, :device, :wrong_device},
              {%{blob | owner: :not_a_tensor}, :owner, :bad_value}
            ] do
          {e, data} = raised(fn -> TEx.from_extorch(forged) end)
          assert %ArgumentError{} = e, inspect(forged)
          assert data == %{reason: reason, argument: field}, inspect({forged, e.message})

          # TensorBlob.from_blob/2 takes ExTorch's blob with the same checks
          # (an owner that is no ExTorch tensor is an owner term like any).
          if field != :owner do
            {e, data} = raised(fn -> TensorBlob.from_blob(forged) end)
            assert %ArgumentError{} = e, inspect(forged)
            assert data == %{reason: reason, argument: field}, inspect({forged, e.message})
          end
        end

        # With an owner given, the caller answers for the fields, as for any spec.
        assert %TensorBlob.BlobView{} = TensorBlob.from_blob(%{blob | shape: {2, 4}}, owner: x)

        # What lies within the owner's memory is taken: a part, by any name of its dtype.
        half = TEx.from_extorch(%{blob | shape: {2, 4}, dtype: :float})
        assert Tensor.to_binary(half) == binary_part(bytes_for(:float32, 16), 0, 32)
        column = TEx.from_extorch(%{blob | ptr: blob.ptr + 4, shape: {4}, strides: [4]})

        assert Tensor.to_binary(column) ==
                 for(i <- 0..3, into: <<>>, do: binary_part(bytes_for(:float32, 16), i * 16 + 4, 4))

        assert TEx.from_extorch(blob).owner == x
      end
    end

    describe "a region another program shrinks" do
      test "to_extorch's copy raises as Tensor.to_binary does, and the VM lives on" do
        region = TensorBlob.IPC.zeros({256, 256}, :uint8)
        %{handle: name} = TensorBlob.IPC.export(region)
        {_, 0} = System.cmd("truncate", ["-s", "0", "/dev/shm" <> name])

        assert_raise TensorBlob.Error, ~r/vanished under the copy/, fn -> Tensor.to_binary(region) end

        for t <- [region, Tensor.transpose(region, 0, 1), Tensor.narrow(region, 0, 255, 1)] do
          assert_raise TensorBlob.Error, ~r/vanished under the copy/, fn -> TEx.to_extorch(t) end
        end
      end
    end

    test "options and inputs are checked" do
      ours = Tensor.zeros({2}, :float32)
      assert_raise ArgumentError, ~r/unsafe_view: expected a boolean/, fn -> TEx.to_extorch(ours, unsafe_view: 1) end
      assert_raise ArgumentError, ~r/copy: unknown option/, fn -> TEx.to_extorch(ours, copy: true) end

      assert_raise ArgumentError, ~r/to_extorch: expected a tensor_blob tensor/, fn ->
        TEx.to_extorch(ExTorch.zeros({2}))
      end

      assert_raise ArgumentError, ~r/from_extorch: expected an ExTorch tensor/, fn -> TEx.from_extorch(ours) end

      for dtype <- TensorBlob.dtypes() -- TEx.shared_dtypes() do
        assert_raise ArgumentError, ~r/has no ExTorch counterpart/, fn -> TEx.to_extorch(Tensor.zeros({2}, dtype)) end
      end
    end

    if Code.ensure_loaded?(Torchx.Backend) do
      @tag :torchx
      test "the triangle: ExTorch -> tensor_blob -> Torchx -> tensor_blob -> ExTorch, copies counted" do
        {:ok, _} = Application.ensure_all_started(:torchx)
        alias TensorBlob.Nx, as: TNx
        x = ExTorch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])

        {back, evs} =
          events(fn ->
            view = TEx.from_extorch(x)
            tx = TNx.to_nx(view, Torchx.Backend)
            t2 = TNx.from_nx(tx)
            {view, tx, t2, TEx.to_extorch(t2)}
          end)

        {view, tx, t2, back} = back
        assert ExTorch.Tensor.to_list(back) == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
        # Shared memory: the ExTorch tensor and our view of it; Torchx's
        # tensor and our view of it. Copies: Torchx's and ExTorch's own.
        Tensor.write!(view, Shm.floats([1.0, 2.0, 3.0, 4.0, 5.0, 7.0]))
        assert ExTorch.Tensor.to_list(x) == [[1.0, 2.0, 3.0], [4.0, 5.0, 7.0]]
        # ExTorch's in-place write, seen through our view.
        _ = ExTorch.index_put(x, [0, 0], 8.0, true)
        assert Tensor.to_binary(view) == Shm.floats([8.0, 2.0, 3.0, 4.0, 5.0, 7.0])
        Tensor.write!(t2, Shm.floats([9.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
        assert Nx.to_flat_list(tx) == [9.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        assert ExTorch.Tensor.to_list(back) == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]

        transfers = for {:transfer, m, meta} <- evs, do: {meta.function, m.copied}

        assert transfers == [
                 {{TEx, :from_extorch, 1}, 0},
                 {{TNx, :to_nx, 2}, 24},
                 {{TNx, :from_nx, 2}, 0},
                 {{TEx, :to_extorch, 2}, 24}
               ]

        # Two copies, where a side cannot hold an owner: Torchx, and ExTorch.
        assert copies(evs) == [{{TNx, :to_nx, 2}, :backend, 24}, {{TEx, :to_extorch, 2}, :backend, 24}]
      end

      @tag :torchx
      test "the triangle the other way: Torchx -> tensor_blob -> ExTorch -> tensor_blob -> Nx" do
        {:ok, _} = Application.ensure_all_started(:torchx)
        alias TensorBlob.Nx, as: TNx
        tx = Nx.iota({4, 4}, type: {:f, 32}, backend: Torchx.Backend)

        {nx, evs} =
          events(fn ->
            t = TNx.from_nx(tx)
            x = TEx.to_extorch(t)
            t2 = TEx.from_extorch(x)
            TNx.to_nx(t2, Nx.BinaryBackend)
          end)

        assert Nx.to_binary(nx) == Nx.to_binary(tx)
        # One copy, into ExTorch; the binary backend views ExTorch's memory.
        assert copies(evs) == [{{TEx, :to_extorch, 2}, :backend, 64}]
      end
    end
  end
end
