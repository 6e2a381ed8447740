# Runs when Torchx is on the code path (built against the libtorch tensor_blob
# links): make torchx-test, or make compat-test (Debian 13). Excluded without.
if Code.ensure_loaded?(Torchx.Backend) do
  defmodule TensorBlob.TorchxTest do
    use ExUnit.Case, async: false
    @moduletag :torchx

    alias TensorBlob.{IPC, Tensor}
    alias TensorBlob.Nx, as: TNx
    alias TensorBlob.Test.Lifetime

    setup_all do
      {:ok, _} = Application.ensure_all_started(:torchx)
      :ok
    end

    defp ptr(t), do: TensorBlob.to_blob(t).ptr
    defp address(nx), do: Nx.to_pointer(nx, mode: :local).address

    # Bytes that are a valid value of every type: small integers' patterns.
    defp bytes_for(dtype, n) do
      {_, bits} = TNx.nx_type!(dtype)
      for i <- 1..div(n * bits, 8), into: <<>>, do: <<rem(i, 3)>>
    end

    defp torchx(bytes, type, shape), do: Nx.from_binary(bytes, type, backend: Torchx.Backend) |> Nx.reshape(shape)

    # The types both hold, from tensor_blob's own table: every dtype with an
    # Nx type that Torchx can make a tensor of.
    defp shared_dtypes do
      for dtype <- TensorBlob.dtypes(),
          :tensor_blob.nx_type(dtype) != nil,
          type = TNx.nx_type!(dtype),
          torchx_holds?(type),
          do: {dtype, type}
    end

    defp torchx_holds?(type) do
      Nx.to_binary(Nx.from_binary(<<0::size(elem(type, 1) * 4)>>, type, backend: Torchx.Backend)) ==
        <<0::size(elem(type, 1) * 4)>>
    rescue
      _ -> false
    end

    # Torchx keeps these in wider integers (int32, int64).
    @widened [{:u, 16}, {:u, 32}]

    test "Torchx and tensor_blob link one libtorch" do
      maps = File.read!("/proc/self/maps") |> String.split("\n") |> Enum.filter(&(&1 =~ "libtorch_cpu.so"))
      assert maps |> Enum.map(&List.last(String.split(&1))) |> Enum.uniq() |> length() == 1
    end

    test "round trips for every type both hold: views of Torchx memory, Torchx tensors of ours" do
      pairs = shared_dtypes()
      # What Debian 13's Torchx and libtorch 2.6 hold in common at least.
      for d <- [
            :uint8,
            :int8,
            :int16,
            :int32,
            :int64,
            :uint16,
            :uint32,
            :uint64,
            :float16,
            :bfloat16,
            :float32,
            :float64,
            :complex64,
            :complex128
          ],
          do: assert(List.keymember?(pairs, d, 0), "#{d} missing from #{inspect(pairs)}")

      for {dtype, type} <- pairs do
        bytes = bytes_for(dtype, 96)
        tx = torchx(bytes, type, {12, 8})
        t = TNx.from_nx(tx)
        assert Tensor.dtype(t) == dtype
        assert Tensor.shape(t) == {12, 8}
        assert Tensor.to_binary(t) == bytes, "#{dtype}"

        if type in @widened do
          assert Tensor.memory(t) == :owned
        else
          # Zero-copy: the address Torchx reports.
          assert Tensor.memory(t) == :pinned
          assert ptr(t) == address(tx), "#{dtype}"
        end

        ours = Tensor.from_binary(bytes, dtype, {12, 8})

        for arg <- [Torchx.Backend, [backend: Torchx.Backend]] do
          back = TNx.to_nx(ours, arg)
          assert %Torchx.Backend{} = back.data
          assert back.type == type
          assert back.shape == {12, 8}
          assert Nx.to_binary(back) == bytes, "#{dtype}"
          # A copy by default: Torchx's memory is its own.
          assert address(back) != ptr(ours)
        end

        unless type in @widened do
          view = TNx.to_nx(ours, backend: Torchx.Backend, unsafe_view: true)
          assert address(view) == ptr(ours)
          assert Nx.to_binary(view) == bytes
          # Kept while Torchx reads the view, as unsafe_view asks.
          assert Tensor.shape(ours) != nil
        end
      end
    end

    describe "lifetime" do
      test "a view of Torchx memory outlives the Torchx tensor's term" do
        start = Lifetime.settled_stats()
        expected = Nx.to_binary(Nx.iota({256, 64}, type: {:f, 32}))
        t = Lifetime.in_process(fn -> TNx.from_nx(Nx.iota({256, 64}, type: {:f, 32}, backend: Torchx.Backend)) end)
        Lifetime.churn()
        for _ <- 1..20, do: Nx.iota({256, 64}, type: {:f, 32}, backend: Torchx.Backend) |> Nx.multiply(7)
        Lifetime.collect()
        assert Tensor.to_binary(t) == expected
        _ = t
        t = nil
        _ = t
        assert Lifetime.await_stats(start) == start
      end

      test "to_nx by default: the Torchx tensor outlives ours, dropped and collected (64 MiB)" do
        start = Lifetime.settled_stats()
        shape = {4096, 4096}

        tx =
          Lifetime.in_process(fn ->
            ours =
              Tensor.from_binary(Nx.to_binary(Nx.iota(shape, type: {:f, 32}, backend: Torchx.Backend)), :float32, shape)

            tx = TNx.to_nx(ours, Torchx.Backend)
            refute address(tx) == ptr(ours)
            tx
          end)

        assert Lifetime.await_stats(start) == start
        Lifetime.churn()
        # Freed memory reused: 64 MiB of other values where ours was.
        _ =
          for _ <- 1..4,
              do: Tensor.zeros(shape, :float32) |> Tensor.write!(:binary.copy(<<-1.0::float-32-native>>, 4096 * 4096))

        assert Nx.to_number(Nx.sum(Nx.slice(tx, [0, 0], [1, 4096]))) == Enum.sum(0..4095) * 1.0
        assert Nx.to_number(tx[4095][4095]) == 4096.0 * 4096 - 1
      end

      test "a safetensors file's tensors: Torchx's own copies, which outlive every term of the file" do
        dir = Path.join(System.tmp_dir!(), "tb_torchx_st_#{System.unique_integer([:positive])}")
        File.mkdir_p!(dir)
        on_exit(fn -> File.rm_rf!(dir) end)
        path = Path.join(dir, "weights.safetensors")
        w = Nx.iota({64, 64}, type: {:f, 32}, backend: Nx.BinaryBackend)
        b = Nx.iota({16}, type: {:s, 64}, backend: Nx.BinaryBackend)

        :ok =
          TensorBlob.SafeTensors.write(path, %{
            "w" => {Nx.to_binary(w), :float32, {64, 64}},
            "b" => {Nx.to_binary(b), :int64, {16}}
          })

        start = Lifetime.settled_stats()

        # The file's handle and tensors live in a process that exits: only
        # the Torchx tensors are left.
        {tw, tb, tt} =
          Lifetime.in_process(fn ->
            %{tensors: %{"w" => ours_w, "b" => ours_b}} = TensorBlob.SafeTensors.open(path)
            assert Tensor.memory(ours_w) == :file

            {TNx.to_nx(ours_w, Torchx.Backend), TNx.to_nx(ours_b, backend: Torchx.Backend),
             TNx.to_nx(Tensor.transpose(ours_w, 0, 1), Torchx.Backend)}
          end)

        assert Lifetime.await_stats(start) == start
        File.rm_rf!(dir)
        Lifetime.churn()
        assert %Torchx.Backend{} = tw.data
        assert Nx.to_binary(tw) == Nx.to_binary(w)
        assert Nx.to_binary(tb) == Nx.to_binary(b)
        assert Nx.to_binary(tt) == Nx.to_binary(Nx.transpose(w))
        assert Nx.to_number(Nx.sum(tw)) == Enum.sum(0..4095) * 1.0
      end

      test "a region handed to Torchx: zero-copy, writes both ways, and Torchx's mapping outlives ours" do
        start = Lifetime.settled_stats()

        tx =
          Lifetime.in_process(fn ->
            region = IPC.zeros({1024}, :int32)
            tx = TNx.to_nx(region, backend: Torchx.Backend)
            # Another mapping of the same pages.
            Tensor.write!(region, Nx.to_binary(Nx.iota({1024}, type: {:s, 32})))
            assert Nx.to_number(Nx.sum(tx)) == Enum.sum(0..1023)
            tx
          end)

        assert Lifetime.await_stats(start) == start
        Lifetime.churn()
        assert Nx.to_flat_list(tx) == Enum.to_list(0..1023)
      end
    end

    describe "writes" do
      test "through a view of Torchx memory, Torchx reads them" do
        tx = Nx.iota({64}, type: {:f, 64}, backend: Torchx.Backend)
        view = TNx.from_nx(tx)
        Tensor.write!(view, Nx.to_binary(Nx.multiply(Nx.iota({64}, type: {:f, 64}), -1)))
        assert Nx.to_flat_list(tx) == Enum.map(0..63, &(-&1 * 1.0))
      end

      test "into our memory, a Torchx view reads them (unsafe_view: true)" do
        ours = Tensor.zeros({32}, :int64)
        tx = TNx.to_nx(ours, backend: Torchx.Backend, unsafe_view: true)
        Tensor.write!(ours, Nx.to_binary(Nx.iota({32}, type: {:s, 64})))
        assert Nx.to_flat_list(tx) == Enum.to_list(0..31)
        assert Nx.to_number(Nx.sum(tx)) == Enum.sum(0..31)
      end
    end

    describe "IPC" do
      test "a Torchx IPC handle opens here: the same pages, writes both ways" do
        tx = Nx.iota({256}, type: {:f, 32}, backend: Torchx.Backend)
        pointer = Nx.to_pointer(tx, mode: :ipc, permissions: 0o600)
        assert pointer.handle =~ ~r/^torchx:ipc:\d+:\d+$/
        t = IPC.open(pointer, :float32, {256})
        assert Tensor.to_binary(t) == Nx.to_binary(Nx.iota({256}, type: {:f, 32}))
        Tensor.write!(t, Nx.to_binary(Nx.broadcast(Nx.tensor(2.5, type: {:f, 32}), {256})))
        assert Nx.to_flat_list(tx) == List.duplicate(2.5, 256)
      end

      test "our IPC handle opens in Torchx" do
        t = Tensor.from_binary(Nx.to_binary(Nx.iota({16}, type: {:s, 16})), :int16, {16})
        handle = IPC.export(t)
        pointer = %Nx.Pointer{kind: :ipc, handle: handle.handle, data_size: handle.data_size}
        tx = Nx.from_pointer(Torchx.Backend, pointer, {:s, 16}, {16})
        assert Nx.to_flat_list(tx) == Enum.to_list(0..15)
        Tensor.write!(handle.tensor, Nx.to_binary(Nx.iota({16}, type: {:s, 16}) |> Nx.negate()))
        assert Nx.to_flat_list(tx) == Enum.map(0..15, &(-&1))
      end
    end

    describe "Torchx frees its own memory" do
      test "a tensor deallocated before from_nx is refused" do
        tx = Nx.iota({8}, type: {:f, 32}, backend: Torchx.Backend)
        Nx.backend_deallocate(tx)
        assert_raise ArgumentError, ~r/deallocated/, fn -> TNx.from_nx(tx) end
      end

      test "ipc: true: our mapping survives Nx.backend_deallocate, and writes cross until then" do
        start = Lifetime.settled_stats()
        tx = Nx.iota({4096}, type: {:s, 64}, backend: Torchx.Backend)
        t = TNx.from_nx(tx, ipc: true)
        assert Tensor.to_binary(t) == Nx.to_binary(Nx.iota({4096}, type: {:s, 64}))
        Tensor.write!(t, Nx.to_binary(Nx.iota({4096}, type: {:s, 64}) |> Nx.add(1)))
        assert Nx.to_number(tx[0]) == 1
        Nx.backend_deallocate(tx)
        Lifetime.churn()
        _ = for _ <- 1..8, do: Nx.iota({4096}, type: {:s, 64}, backend: Torchx.Backend) |> Nx.multiply(-3)
        assert Tensor.to_binary(t) == Nx.to_binary(Nx.iota({4096}, type: {:s, 64}) |> Nx.add(1))
        _ = t
        t = nil
        _ = t
        assert Lifetime.await_stats(start) == start
      end

      test "ipc: true after Torchx's own to_pointer(mode: :ipc): the tensor's current memory" do
        tx = Nx.iota({64}, type: {:f, 32}, backend: Torchx.Backend)
        _ = Nx.to_pointer(tx, mode: :ipc, permissions: 0o600)
        t = TNx.from_nx(tx, ipc: true)
        assert Tensor.to_binary(t) == Nx.to_binary(Nx.iota({64}, type: {:f, 32}))
        Tensor.write!(t, Nx.to_binary(Nx.iota({64}, type: {:f, 32}) |> Nx.negate()))
        assert Nx.to_number(tx[63]) == -63.0
      end
    end

    import TensorBlob.Test.Raised, only: [raised: 1]

    describe "a Torchx struct that does not describe its data" do
      # Also in the ExTorch stage (Torchx loaded there too), which runs them under ASan.
      @describetag :extorch

      test "a shape or type whose size is not Torchx's is refused, naming the shape and both sizes" do
        tx = Nx.iota({4}, type: {:f, 32}, backend: Torchx.Backend)

        for {shape, type} <- [
              {{4, 4}, {:f, 32}},
              {{1_000_000}, {:f, 32}},
              {{-4}, {:f, 32}},
              {{4}, {:f, 64}},
              {{2}, {:u, 16}}
            ],
            opts <- [[], [copy: :never], [copy: :always]] do
          forged = %{tx | shape: shape, type: type, names: List.duplicate(nil, tuple_size(shape))}
          {e, _data} = raised(fn -> TNx.from_nx(forged, opts) end)
          assert %ArgumentError{} = e, inspect({shape, type, opts})

          if opts != [copy: :always] do
            assert e.message =~ inspect(shape), e.message
            assert e.message =~ "holds 16 bytes", e.message
            assert e.message =~ "(#{div(elem(type, 1), 8) * Tuple.product(shape)} bytes)", e.message
          end
        end

        # The struct as Torchx made it is viewed.
        assert Tensor.to_binary(TNx.from_nx(tx)) == Nx.to_binary(Nx.iota({4}, type: {:f, 32}))
      end

      test "deallocated or forged data is refused with ArgumentError, copy: :always too" do
        tx = Nx.iota({8}, type: {:f, 32}, backend: Torchx.Backend)
        Nx.backend_deallocate(tx)

        for opts <- [[], [copy: :always], [copy: :never]] do
          {e, data} = raised(fn -> TNx.from_nx(tx, opts) end)
          assert %ArgumentError{} = e, inspect(opts)
          assert e.message =~ "deallocated"
          assert data.reason == :gone
        end

        forged = %{Nx.iota({8}, backend: Torchx.Backend) | data: %Torchx.Backend{ref: nil}}

        for opts <- [[], [copy: :always]] do
          assert {%ArgumentError{}, %{reason: :bad_value}} = raised(fn -> TNx.from_nx(forged, opts) end)
        end
      end

      test "to_nx takes Torchx.Backend and no module that is not a backend" do
        t = Tensor.from_binary(<<1, 2, 3, 4>>, :uint8, {4})
        assert Nx.to_flat_list(TNx.to_nx(t, Torchx.Backend)) == [1, 2, 3, 4]

        for {arg, reason, argument} <- [
              {Nx, :bad_value, :backend},
              {[backend: Tensor, unsafe_view: true], :bad_value, :backend},
              {[{:backend, Torchx.Backend} | :tail], :bad_option, :options}
            ] do
          assert {%ArgumentError{}, %{reason: ^reason, argument: ^argument}} = raised(fn -> TNx.to_nx(t, arg) end)
        end
      end
    end

    describe "region memory and Torchx's own mappings of it" do
      # Also in the ExTorch stage (Torchx loaded there too), which runs them under ASan.
      @describetag :extorch

      test "a region another program shrank is not handed to Torchx: the same error as Tensor.to_binary" do
        region = IPC.zeros({1024}, :float32)
        %{handle: name} = IPC.export(region)
        {_, 0} = System.cmd("truncate", ["-s", "0", "/dev/shm" <> name])
        assert_raise TensorBlob.Error, ~r/vanished/, fn -> Tensor.to_binary(region) end
        e = assert_raise TensorBlob.Error, ~r/vanished/, fn -> TNx.to_nx(region, backend: Torchx.Backend) end
        assert e.message =~ name
        assert_raise TensorBlob.Error, ~r/vanished/, fn -> TNx.to_nx(region, Nx.BinaryBackend) end
      end

      test "a view of Torchx's mapping of a region keeps the region's protection" do
        region = IPC.zeros({1024}, :int32)
        Tensor.write!(region, Nx.to_binary(Nx.iota({1024}, type: {:s, 32})))
        tx = TNx.to_nx(region, backend: Torchx.Backend)
        # Torchx's own region (to_pointer(mode: :ipc) moves its tensor into one).
        ty = Nx.iota({1024}, type: {:s, 32}, backend: Torchx.Backend)
        _ = Nx.to_pointer(ty, mode: :ipc, permissions: 0o600)

        for {what, nx} <- [{"our region, Torchx's mapping", tx}, {"Torchx's region", ty}] do
          v = TNx.from_nx(nx)
          assert Tensor.memory(v) == :pinned, what
          assert address(nx) == ptr(v), what
          # No binary shows it: another program can shrink the file.
          {e, data} = raised(fn -> Tensor.to_binary(v, copy: false) end)
          assert e.message =~ "shared-memory region", what
          assert data == %{reason: :unsafe, argument: :tensor}, what
          # The binary backend gets a copy: writes to the region leave it as it was.
          bnx = TNx.to_nx(v, Nx.BinaryBackend)
          before = Nx.to_binary(bnx)
          assert Tensor.to_binary(v) == before, what
          Tensor.write!(v, Nx.to_binary(Nx.iota({1024}, type: {:s, 32}) |> Nx.negate()))
          assert Nx.to_binary(bnx) == before, what
        end

        # The view and our mapping are the same file's bytes.
        assert Tensor.overlaps?(TNx.from_nx(tx), region)
        assert Tensor.to_binary(region) == Nx.to_binary(Nx.iota({1024}, type: {:s, 32}) |> Nx.negate())
      end
    end

    describe "uint16 and uint32 (Torchx keeps them in int32 and int64)" do
      test "from_nx copies them, or refuses with copy: :never saying why; to_nx copies them" do
        for {type, dtype} <- [{{:u, 16}, :uint16}, {{:u, 32}, :uint32}], dtype in TensorBlob.dtypes() do
          values = [0, 1, 2, 65_535, div(elem(type, 1), 8) * 1000]
          tx = Nx.tensor(values, type: type, backend: Torchx.Backend)
          t = TNx.from_nx(tx)
          assert Tensor.memory(t) == :owned
          assert Tensor.dtype(t) == dtype
          assert Tensor.to_binary(t) == Nx.to_binary(Nx.tensor(values, type: type))

          assert_raise ArgumentError,
                       ~r/stores #{Regex.escape(inspect(type))} in #{2 * elem(type, 1)}-bit elements/,
                       fn -> TNx.from_nx(tx, copy: :never) end

          back = TNx.to_nx(t, Torchx.Backend)
          assert back.type == type
          assert Nx.to_flat_list(back) == values

          assert_raise ArgumentError, ~r/unsafe_view/, fn ->
            TNx.to_nx(t, backend: Torchx.Backend, unsafe_view: true)
          end

          # A region of uint16 is copied too: Torchx cannot map it as int32.
          region = IPC.zeros({5}, dtype)
          Tensor.write!(region, Nx.to_binary(Nx.tensor(values, type: type)))
          assert Nx.to_flat_list(TNx.to_nx(region, Torchx.Backend)) == values
        end
      end
    end

    test "Nx's functions and defn take our tensors with Torchx the default backend: a copy of its own" do
      t = Tensor.from_binary(Nx.to_binary(Nx.iota({2, 3}, type: {:f, 32})), :float32, {2, 3})
      view = TensorBlob.from_blob(TensorBlob.to_blob(t), owner: :none)
      scale_add = Nx.Defn.jit(fn x, y -> Nx.add(Nx.multiply(x, 2), y) end)
      previous = Nx.default_backend(Torchx.Backend)

      try do
        for x <- [t, view] do
          sum = Nx.Defn.jit(&Nx.add(&1, 1)).(x)
          assert %Torchx.Backend{} = sum.data
          assert Nx.to_flat_list(sum) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
          assert Nx.to_number(Nx.sum(x)) == 15.0
          assert Nx.to_flat_list(scale_add.(x, t)) == [0.0, 3.0, 6.0, 9.0, 12.0, 15.0]
          assert_raise ArgumentError, ~r/Pass TensorBlob.Nx.to_nx\(t\) instead/, fn -> Nx.add(x, 1) end
          # Torchx cannot keep our memory alive: it gets a copy of its own.
          tx = Nx.to_tensor(x)
          assert %Torchx.Backend{} = tx.data
          refute address(tx) == ptr(t)
        end

        # A whole region: Nx's own functions get a copy; to_nx/2 hands it
        # over zero-copy (Torchx maps it, and sees our writes).
        region = IPC.zeros({4}, :int32)
        copied = Nx.to_tensor(region)
        shared = TNx.to_nx(region)
        Tensor.write!(region, <<1::32-native, 2::32-native, 3::32-native, 4::32-native>>)
        assert Nx.to_flat_list(copied) == [0, 0, 0, 0]
        assert Nx.to_flat_list(shared) == [1, 2, 3, 4]
        assert Nx.to_number(Nx.sum(region)) == 10
      after
        Nx.default_backend(previous)
      end
    end

    test "to_nx/1 follows Nx.default_backend(Torchx.Backend)" do
      t = Tensor.from_binary(Nx.to_binary(Nx.iota({3}, type: {:f, 32})), :float32, {3})
      previous = Nx.default_backend(Torchx.Backend)

      try do
        nx = TNx.to_nx(t)
        assert %Torchx.Backend{} = nx.data
        assert Nx.to_flat_list(nx) == [0.0, 1.0, 2.0]
      after
        Nx.default_backend(previous)
      end
    end
  end
else
  defmodule TensorBlob.TorchxTest do
    use ExUnit.Case
    @moduletag :torchx

    test "needs Torchx on the code path (NX_PATH with a Torchx build); excluded without it" do
      flunk("Torchx is not loaded")
    end
  end
end
