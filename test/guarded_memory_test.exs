defmodule TensorBlob.GuardedMemoryTest do
  # The promises of guarded memory, against owners that hide a binary, second
  # mappings reached by other doors, and many processes racing on every
  # scheduler: a binary never changes, and a write that was allowed is kept.
  use ExUnit.Case, async: false

  alias TensorBlob.{DLPack, IPC, Tensor}
  alias TensorBlob.Test.Lifetime

  # An unpinned from_blob answers a tensor; a pinned one a BlobView.
  defp tensor_of(%{tensor: t}), do: t
  defp tensor_of(t), do: t

  defp refused(fun) do
    error = assert_raise ArgumentError, fun
    error.message
  end

  # A reference-counted binary (off the heap), its address, and no tensor
  # left over it: the view that gave the address is collected.
  defp lone_binary do
    bin = :binary.copy(<<1, 2, 3, 4>>, 256)

    ptr =
      Lifetime.in_process(fn ->
        TensorBlob.to_blob(Tensor.from_binary(bin, :uint8, {1024}, copy: false)).ptr
      end)

    Lifetime.collect()
    {bin, ptr}
  end

  describe "a binary nested in an owner term" do
    for {label, wrap} <- [
          {"a tuple", quote(do: fn b -> {b} end)},
          {"a list", quote(do: fn b -> [b] end)},
          {"a map", quote(do: fn b -> %{k: b} end)},
          {"a tuple with metadata", quote(do: fn b -> {:meta, [1, 2], b} end)},
          {"deep inside", quote(do: fn b -> [%{a: {1, [b | :tail]}}] end)}
        ] do
      test "in #{label}: the view is read-only, and guards the bytes from every other tensor" do
        {bin, ptr} = lone_binary()
        owner = unquote(wrap).(bin)
        %{tensor: v} = TensorBlob.from_blob(%{ptr: ptr, shape: {4}, dtype: :uint8}, owner: owner)
        assert refused(fn -> Tensor.write!(v, <<9, 9, 9, 9>>) end) =~ "read-only"

        # Another door to the same bytes, while the view lives.
        bare = TensorBlob.from_blob(%{ptr: ptr, shape: {4}, dtype: :uint8}, owner: :none)
        assert refused(fn -> Tensor.write!(tensor_of(bare), <<7, 7, 7, 7>>) end) =~ "read-only"
        assert binary_part(bin, 0, 4) == <<1, 2, 3, 4>>
        assert Tensor.to_binary(v) == <<1, 2, 3, 4>>
      end
    end

    test "an owner term holding no binary over the memory leaves the view writable" do
      t = Tensor.zeros({4}, :uint8)
      other = :binary.copy(<<0>>, 1024)
      %{tensor: v} = TensorBlob.from_blob(TensorBlob.to_blob(t), owner: {other, t})
      Tensor.write!(v, <<5, 6, 7, 8>>)
      assert Tensor.to_binary(t) == <<5, 6, 7, 8>>
    end

    test "the last user kept: the view alone keeps the binary, and reads it back after collections" do
      Lifetime.assert_last_user(
        fn ->
          {bin, ptr} = lone_binary()
          %{tensor: v} = TensorBlob.from_blob(%{ptr: ptr, shape: {1024}, dtype: :uint8}, owner: [bin])
          {v, bin}
        end,
        fn {v, expected}, _start -> assert Tensor.to_binary(v) == expected end
      )
    end
  end

  defp through_dlpack(t), do: DLPack.import(DLPack.consume(DLPack.export(t)))
  defp through_term_owner(t), do: tensor_of(TensorBlob.from_blob(TensorBlob.to_blob(t), owner: {t}))
  defp through_unpinned(t), do: tensor_of(TensorBlob.from_blob(TensorBlob.to_blob(t), owner: :none))

  for {label, zeros, export} <- [
        {"a region", :zeros, :export},
        {"a PyTorch-format region", :torch_zeros, :export_torch}
      ] do
    describe "a second mapping of #{label}, reached by any door" do
      setup do
        t1 = apply(IPC, unquote(zeros), [{64}, :uint8])
        h = apply(IPC, unquote(export), [t1])
        t2 = IPC.open(h.handle, :uint8, {64})
        %{t1: t1, t2: t2}
      end

      for door <- [:through_dlpack, :through_term_owner, :through_unpinned] do
        test "a binary of one mapping refuses a write #{door} of the other", %{t1: t1, t2: t2} do
          bin = Tensor.to_binary(t2, copy: false, unsafe_shared_memory: true)
          u = unquote(door)(t1)
          assert refused(fn -> Tensor.write!(u, :binary.copy(<<1>>, 64)) end) =~ "binary"
          assert bin == :binary.copy(<<0>>, 64)
        end

        test "a binary #{door} of one mapping refuses a write through the other", %{t1: t1, t2: t2} do
          bin = Tensor.to_binary(unquote(door)(t1), copy: false, unsafe_shared_memory: true)
          assert refused(fn -> Tensor.write!(t2, :binary.copy(<<2>>, 64)) end) =~ "binary"
          assert bin == :binary.copy(<<0>>, 64)
        end
      end

      test "once the binary is collected, the write goes through", %{t1: t1, t2: t2} do
        Lifetime.in_process(fn ->
          byte_size(Tensor.to_binary(through_dlpack(t1), copy: false, unsafe_shared_memory: true))
        end)

        # Its destructor runs a little after the collection that frees it.
        Lifetime.settled_stats()
        Tensor.write!(t2, :binary.copy(<<3>>, 64))
        assert Tensor.to_binary(t1) == :binary.copy(<<3>>, 64)
      end
    end
  end

  # A binary view, or :writing when refused for a write in progress.
  defp binary_view(t) do
    {:ok, Tensor.to_binary(t, copy: false)}
  rescue
    e in ArgumentError ->
      assert e.message =~ "writing its memory right now"
      :writing
  end

  describe "many processes on every scheduler" do
    # Each writer fills its tensor with one byte value after another; each
    # reader takes binary views of the same tensor (and tensor views of
    # those binaries). A binary, once taken, must never change; every write
    # is either refused with a reason or fully done.
    test "write! racing binary views both ways: no shown binary changes, no allowed write is lost" do
      start = Lifetime.settled_stats()
      parent = self()
      n = 64

      run = fn ->
        t = Tensor.zeros({n}, :uint8)
        deadline = System.monotonic_time(:millisecond) + 400

        reader =
          Task.async(fn ->
            Stream.repeatedly(fn -> :ok end)
            |> Enum.reduce_while(0, fn _, seen ->
              if System.monotonic_time(:millisecond) > deadline do
                {:halt, seen}
              else
                case binary_view(t) do
                  {:ok, bin} ->
                    copy = :binary.copy(bin)
                    view = Tensor.from_binary(bin, :uint8, {n}, copy: false)
                    # Uniform: never a write caught half way.
                    <<b, _::binary>> = copy
                    assert copy == :binary.copy(<<b>>, n)
                    :erlang.yield()
                    assert bin == copy and Tensor.to_binary(view) == copy

                  :writing ->
                    :ok
                end

                # Dropped and collected: the writer gets its turn.
                :erlang.garbage_collect()
                Process.sleep(1)
                {:cont, seen + 1}
              end
            end)
          end)

        writes =
          Enum.reduce_while(Stream.cycle(1..255), {0, 0}, fn v, {ok, refused} ->
            if System.monotonic_time(:millisecond) > deadline do
              {:halt, {ok, refused}}
            else
              try do
                Tensor.write!(t, :binary.copy(<<v>>, n))
                # Allowed: it is there (this process is its only writer).
                assert Tensor.to_binary(t) == :binary.copy(<<v>>, n)
                {:cont, {ok + 1, refused}}
              rescue
                e in ArgumentError ->
                  assert e.message =~ "binary"
                  {:cont, {ok, refused + 1}}
              end
            end
          end)

        seen = Task.await(reader, 5000)
        {ok, _} = writes
        # The last allowed write is what the tensor holds.
        last = Tensor.to_binary(t)
        <<b, _::binary>> = last
        assert last == :binary.copy(<<b>>, n)
        send(parent, {:done, ok, seen})
      end

      workers = 4 * System.schedulers_online()
      for _ <- 1..workers, do: spawn_link(run)

      totals =
        for _ <- 1..workers do
          assert_receive {:done, ok, seen}, 10_000
          {ok, seen}
        end

      assert Enum.sum(Enum.map(totals, &elem(&1, 0))) > 0
      assert Enum.sum(Enum.map(totals, &elem(&1, 1))) > 0
      assert Lifetime.await_stats(start) == start
    end

    test "mixed exchanges from 1,000 processes with collections meanwhile: stats return to the start" do
      start = Lifetime.settled_stats()
      parent = self()

      for i <- 1..1000 do
        spawn_link(fn ->
          t = Tensor.from_binary(:binary.copy(<<i::32-native>>, 16), :int32, {16})
          bin = Tensor.to_binary(t)

          for _ <- 1..20 do
            %{tensor: v} = TensorBlob.from_blob(%{TensorBlob.to_blob(t) | dtype: :float32})
            shown = Tensor.to_binary(v, copy: false)
            back = Tensor.from_binary(bin, :int32, {16}, copy: false)
            round = DLPack.import(DLPack.export(back))
            assert shown == bin and Tensor.to_binary(round) == bin
            if rem(i, 50) == 0, do: :erlang.garbage_collect()
          end

          send(parent, :done)
        end)
      end

      for _ <- 1..1000, do: assert_receive(:done, 30_000)
      assert Lifetime.await_stats(start) == start
    end
  end
end
