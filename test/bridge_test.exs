defmodule TensorBlob.BridgeTest do
  # A foreign NIF library (test/support/foreign_tensor_nif.c: its own
  # allocator and deleters, no libtorch) exchanging tensors with us through
  # DLPack and priv/include/tensor_blob.h.
  use ExUnit.Case, async: false

  alias TensorBlob.{DLPack, Tensor}
  alias TensorBlob.Test.Lifetime

  @foreign :foreign_tensor_nif

  defp f32s(list), do: for(x <- list, into: <<>>, do: <<x::float-32-native>>)
  defp payload, do: f32s(Enum.map(1..64, &(&1 * 1.5)))

  defp freed, do: elem(@foreign.counters(), 1)

  defp assert_freed(expected) do
    probe = fn ->
      Lifetime.collect()
      {freed() == expected, freed()}
    end

    case :tensor_blob_test_util.poll(probe, 200, 10) do
      {:ok, _} -> :ok
      {:timeout, calls} -> flunk("foreign deleter calls: #{calls}, expected #{expected}")
    end
  end

  describe "the foreign library produces, we import" do
    for kind <- [:versioned, :legacy] do
      test "#{kind}: same bytes, and its deleter runs once, after the last slice is freed" do
        freed0 = freed()

        slice =
          Lifetime.in_process(fn ->
            t = DLPack.import(@foreign.produce(payload(), unquote(kind)), version: unquote(kind), unsafe_address: true)
            assert Tensor.to_binary(t) == payload()
            assert Tensor.memory(t) == :dlpack
            Tensor.narrow(t, 0, 60, 4)
          end)

        Lifetime.churn()
        Lifetime.settled_stats()
        assert freed() == freed0
        assert Tensor.to_binary(slice) == binary_part(payload(), 240, 16)

        _ = slice
        slice = nil
        _ = slice
        assert_freed(freed0 + 1)
        Lifetime.churn()
        assert freed() == freed0 + 1
      end
    end

    test "a READ_ONLY tensor from it refuses write!" do
      t = DLPack.import(@foreign.produce(payload(), :read_only), unsafe_address: true)
      assert_raise ArgumentError, ~r/read-only/, fn -> Tensor.write!(t, payload()) end
      assert Tensor.to_binary(t) == payload()
    end
  end

  describe "we export, the foreign library consumes" do
    test "it reads the same bytes; our side dropped first is safe" do
      start = Lifetime.settled_stats()

      address =
        Lifetime.in_process(fn ->
          t = Tensor.from_binary(payload(), :float32, {8, 8})
          t |> Tensor.transpose(0, 1) |> DLPack.export() |> DLPack.consume()
        end)

      Lifetime.churn()
      assert Lifetime.settled_stats().capsules == start.capsules + 1
      t = Tensor.from_binary(payload(), :float32, {8, 8})
      expected = t |> Tensor.transpose(0, 1) |> Tensor.to_binary()
      assert @foreign.read(address) == {expected, [8, 8], false}
      assert @foreign.release(address) == :ok
      _ = t
      t = nil
      _ = t
      assert Lifetime.await_stats(start) == start
    end

    test "the foreign side released first: our tensor is untouched" do
      t = Tensor.from_binary(payload(), :float32, {64})
      address = t |> DLPack.export(read_only: true) |> DLPack.consume()
      assert {_, [64], true} = @foreign.read(address)
      @foreign.release(address)
      Lifetime.churn()
      assert Tensor.to_binary(t) == payload()
    end
  end

  describe "the bridge header (enif_dynamic_resource_call)" do
    test "takes a %Tensor{}, its resource or a %BlobView{}: same bytes, same address, read-only when asked" do
      t = Tensor.from_binary(payload(), :float32, {4, 16})
      blob = TensorBlob.to_blob(t)

      views = [
        TensorBlob.from_blob(blob),
        TensorBlob.from_blob(blob, owner: {:keep, t}),
        TensorBlob.from_blob(blob, owner: :none)
      ]

      for term <- [t, t.ref | views] do
        assert {:ok, address} = @foreign.take(term, false)
        assert @foreign.read(address) == {payload(), [4, 16], false}
        # The address points at our memory: importing it back shares it.
        back = DLPack.import(address)
        assert TensorBlob.to_blob(back).ptr == TensorBlob.to_blob(t).ptr
      end

      assert {:ok, address} = @foreign.take(t, true)
      assert {_, _, true} = @foreign.read(address)
      @foreign.release(address)
    end

    test "every export describes its own tensor: again and again, and its views after it" do
      # The first export of a tensor keeps its description for the next.
      t = Tensor.from_binary(payload(), :float32, {4, 16})
      views = [{Tensor.transpose(t, 0, 1), [16, 4]}, {Tensor.narrow(t, 1, 4, 8), [4, 8]}]

      for {tensor, shape} <- [{t, [4, 16]} | views] ++ [{t, [4, 16]} | views] do
        assert {:ok, address} = @foreign.take(tensor, false)
        assert {bytes, ^shape, false} = @foreign.read(address)
        assert bytes == Tensor.to_binary(tensor)
        @foreign.release(address)
      end

      assert {:ok, address} = @foreign.take(Tensor.transpose(t, 0, 1), false)
      refute elem(@foreign.read(address), 0) == payload()
      @foreign.release(address)
    end

    test "a read-only tensor is exported read-only, whatever the caller asks" do
      view = Tensor.from_binary(payload(), :float32, {64}, copy: false)
      assert {:ok, address} = @foreign.take(view, false)
      assert {bytes, [64], true} = @foreign.read(address)
      assert bytes == payload()
      @foreign.release(address)
    end

    test "the export outlives the term: tensor dropped and collected, then read and released" do
      start = Lifetime.settled_stats()

      address =
        Lifetime.in_process(fn ->
          t = Tensor.from_binary(payload(), :float32, {64})
          {:ok, address} = @foreign.take(Tensor.narrow(t, 0, 32, 32), false)
          address
        end)

      Lifetime.churn()
      stats = Lifetime.settled_stats()
      assert stats.capsules == start.capsules + 1
      assert stats.tensors == start.tensors
      assert @foreign.read(address) == {binary_part(payload(), 128, 128), [32], false}
      @foreign.release(address)
      assert Lifetime.await_stats(start) == start
    end

    test "the deleter called from a thread the VM never saw frees the export once; the tensor lives on" do
      start = Lifetime.settled_stats()

      {address, expected} =
        Lifetime.in_process(fn ->
          t = Tensor.from_binary(payload(), :float32, {8, 8})
          {:ok, address} = @foreign.take(Tensor.transpose(t, 0, 1), false)
          {address, t |> Tensor.transpose(0, 1) |> Tensor.to_binary()}
        end)

      Lifetime.churn()
      assert Lifetime.settled_stats().capsules == start.capsules + 1
      assert @foreign.read(address) == {expected, [8, 8], false}
      assert @foreign.release_on_thread(address) == :ok
      assert Lifetime.await_stats(start) == start

      t = Tensor.from_binary(payload(), :float32, {64})
      {:ok, address} = @foreign.take(t, false)
      @foreign.release_on_thread(address)
      Lifetime.churn()
      assert Tensor.to_binary(t) == payload()
    end

    test "exports one after another, as a consumer's loop makes them: each its own, each freed" do
      start = Lifetime.settled_stats()
      t = Tensor.from_binary(payload(), :float32, {64})

      addresses =
        for _ <- 1..100 do
          {:ok, address} = @foreign.take(t, false)
          address
        end

      assert length(Enum.uniq(addresses)) == 100
      assert Lifetime.settled_stats().capsules == start.capsules + 100
      for a <- addresses, do: assert(@foreign.read(a) == {payload(), [64], false})
      Enum.each(addresses, &@foreign.release/1)
      assert Lifetime.settled_stats().capsules == start.capsules
    end

    test "a consumer built against the first header (version 1) works as before" do
      v1 = :foreign_tensor_nif_v1
      start = Lifetime.settled_stats()

      address =
        Lifetime.in_process(fn ->
          t = Tensor.from_binary(payload(), :float32, {4, 16})
          {:ok, address} = v1.take(TensorBlob.from_blob(TensorBlob.to_blob(t)), false)
          address
        end)

      Lifetime.churn()
      assert v1.read(address) == {payload(), [4, 16], false}
      assert v1.release(address) == :ok
      assert Lifetime.await_stats(start) == start

      t = Tensor.from_binary(payload(), :float32, {64}, copy: false)
      assert {:ok, address} = v1.take(t, false)
      assert {_, [64], true} = v1.read(address)
      v1.release(address)
      assert v1.take(:nope, false) == {:error, 1}
    end

    test "the table a lookup answers with serves without one: tensors of every kind, refusals as such" do
      t = Tensor.from_binary(payload(), :float32, {4, 16})
      assert @foreign.table_find(t) == :ok

      for term <- [t, t.ref, TensorBlob.from_blob(TensorBlob.to_blob(t), owner: {:keep, t})] do
        assert {:ok, address} = @foreign.table_take(term)
        assert @foreign.read(address) == {payload(), [4, 16], false}
        @foreign.release(address)
      end

      assert @foreign.table_take(:nope) == {:error, 1}
      assert @foreign.table_take(%{__struct__: TensorBlob.Tensor, ref: make_ref()}) == {:error, 1}
    end

    test "not a tensor, or another layout of the call: an error status and nothing to free" do
      start = Lifetime.settled_stats()
      assert @foreign.take(:nope, false) == {:error, 1}
      assert @foreign.take(%{__struct__: Other, ref: make_ref()}, false) == {:error, 1}
      assert @foreign.take(DLPack.export(Tensor.zeros({1}, :float32)), false) == {:error, 1}
      t = Tensor.zeros({2}, :float32)
      assert @foreign.take_with_version(t.ref, 99) == {2, :none}
      assert @foreign.take_with_version(:nope, 1) == :not_a_tensor
      assert Lifetime.await_stats(%{start | tensors: start.tensors + 1}).capsules == start.capsules
    end
  end

  describe "DLPack 1.3's exchange API over terms (tensor_blob.h)" do
    test "the table a tensor's build answers with: 1.3, no older one; none for a term that is no tensor" do
      assert @foreign.exchange_api(Tensor.zeros({2}, :float32)) == {1, 3, true}
      assert @foreign.exchange_api(make_ref()) == :none
      assert @foreign.exchange_api(:not_a_tensor) == :none
    end

    test "from a term and back: the same memory, which outlives every other user" do
      stats0 = Lifetime.settled_stats()

      Lifetime.in_process(fn ->
        back =
          Lifetime.in_process(fn ->
            t = Tensor.from_binary(payload(), :float32, {8, 8})
            assert {:ok, back} = @foreign.exchange_round(t)
            assert TensorBlob.to_blob(back).ptr == TensorBlob.to_blob(t).ptr
            back
          end)

        Lifetime.churn()
        assert Tensor.to_binary(back) == payload()
        assert Tensor.shape(back) == {8, 8}
      end)

      # Then the last user gone: nothing of it is left.
      assert Lifetime.await_stats(stats0) == stats0
    end

    test "every dtype this build holds: the view's dtype is the table's DLPack type, and the round trip keeps it" do
      for %{name: name, available: true, dlpack: dlpack, element_size: size} <- TensorBlob.tables().dtypes do
        t = Tensor.from_binary(:binary.copy(<<0>>, 6 * size), name, {2, 3})
        {address, [2, 3], [3, 1], ^dlpack, {1, 0}} = @foreign.exchange_view(t)
        assert address == TensorBlob.to_blob(t).ptr
        assert {:ok, back} = @foreign.exchange_round(t)
        assert {Tensor.dtype(back), Tensor.shape(back)} == {name, {2, 3}}
      end
    end

    test "0-dim, empty and strided tensors are described as they are" do
      scalar = Tensor.from_binary(f32s([2.5]), :float32, {})
      assert {_, [], [], {2, 32, 1}, _} = @foreign.exchange_view(scalar)
      assert {0, [0, 4], _, _, _} = @foreign.exchange_view(Tensor.zeros({0, 4}, :float32))
      t = Tensor.transpose(Tensor.from_binary(payload(), :float32, {4, 16}), 0, 1)
      assert {_, [16, 4], [1, 16], _, _} = @foreign.exchange_view(t)
      assert {:ok, back} = @foreign.exchange_round(t)
      assert Tensor.strides(back) == [1, 16]
      assert Tensor.to_binary(back) == Tensor.to_binary(t)
    end

    test "read-only memory: no bare view of it, and the managed tensor keeps it read-only" do
      view = Tensor.from_binary(:binary.copy(payload()), :float32, {64}, copy: false)
      assert @foreign.exchange_view(view) == {:error, 5}
      assert {:ok, back} = @foreign.exchange_round(view)
      assert_raise ArgumentError, ~r/read-only/, fn -> Tensor.write!(back, payload()) end
    end

    test "the allocator: zeros of the prototype, owned by the caller; bad prototypes are reported" do
      any = Tensor.zeros({1}, :float32)
      assert {:ok, t} = @foreign.exchange_alloc(any, [3, 5], {2, 32, 1}, 1)
      assert {Tensor.shape(t), Tensor.dtype(t), Tensor.memory(t)} == {{3, 5}, :float32, :dlpack}
      assert Tensor.to_binary(t) == :binary.copy(<<0>>, 60)
      Tensor.write!(t, :binary.copy(<<1>>, 60))
      assert Tensor.to_binary(t) == :binary.copy(<<1>>, 60)
      assert {:error, :bad_dtype, _} = @foreign.exchange_alloc(any, [3], {2, 31, 1}, 1)
      assert {:error, :bad_shape, _} = @foreign.exchange_alloc(any, [-1], {2, 32, 1}, 1)
      assert {:error, :no_device, _} = @foreign.exchange_alloc(any, [3], {2, 32, 1}, 99)
    end

    test "the current work stream: none of tensor_blob's own, on every device" do
      any = Tensor.zeros({1}, :float32)
      assert @foreign.exchange_stream(any, 1) == {0, :null}
      assert @foreign.exchange_stream(any, 2) == {0, :null}
    end
  end
end
