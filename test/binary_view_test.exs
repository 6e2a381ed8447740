defmodule TensorBlob.BinaryViewTest do
  # Binaries and tensors sharing memory both ways, without a copy.
  use ExUnit.Case, async: false

  alias TensorBlob.Tensor
  alias TensorBlob.Test.Lifetime

  defp f32s(list), do: for(x <- list, into: <<>>, do: <<x::float-32-native>>)

  # Large enough to be a reference-counted binary, not a heap one.
  defp payload(n \\ 256), do: f32s(Enum.map(1..n, &(&1 * 0.5)))

  defp assert_badarg(fun, pattern) do
    error = assert_raise ArgumentError, fun
    assert error.message =~ pattern
  end

  defp ptr(t), do: TensorBlob.to_blob(t).ptr

  describe "from_binary(copy: false)" do
    test "views the binary's bytes: no copy, pinned (memory :binary), same values" do
      bin = payload()
      t = Tensor.from_binary(bin, :float32, {16, 16}, copy: false)
      assert Tensor.to_binary(t) == bin
      assert Tensor.memory(t) == :binary
      assert Tensor.shape(t) == {16, 16}
      # The binary view of t and the tensor view of that binary share one address.
      u = Tensor.from_binary(Tensor.to_binary(t, copy: false), :float32, {256}, copy: false)
      assert ptr(u) == ptr(t)
    end

    test "is read-only, and so are its slices, transposes and from_blob views" do
      t = Tensor.from_binary(payload(), :float32, {16, 16}, copy: false)
      assert_badarg(fn -> Tensor.write!(t, payload()) end, "tensor: read-only")
      assert_badarg(fn -> t |> Tensor.narrow(0, 1, 1) |> Tensor.write!(payload(16)) end, "read-only")
      assert_badarg(fn -> t |> Tensor.transpose(0, 1) |> Tensor.write!(payload()) end, "read-only")
      view = TensorBlob.from_blob(TensorBlob.to_blob(t)).tensor
      assert_badarg(fn -> Tensor.write!(view, payload()) end, "read-only")
      assert Tensor.to_binary(t) == payload()
    end

    test "the read-only error says to copy it first, and the copy it names can be written" do
      t = Tensor.from_binary(payload(), :float32, {16, 16}, copy: false)

      assert_badarg(
        fn -> Tensor.write!(t, payload()) end,
        "To change the values, copy it first (Tensor.copy(t)) and write the copy"
      )

      copy = Tensor.copy(t)
      zeros = f32s(List.duplicate(0.0, 256))
      assert Tensor.to_binary(Tensor.write!(copy, zeros)) == zeros
      assert Tensor.to_binary(t) == payload()
    end

    test "a from_blob view with a binary owner is read-only too" do
      bin = payload()
      t = Tensor.from_binary(bin, :float32, {256}, copy: false)
      view = TensorBlob.from_blob(%{TensorBlob.to_blob(t) | owner: bin}).tensor
      assert_badarg(fn -> Tensor.write!(view, payload()) end, "read-only")
    end

    test "only a slice kept: the binary lives until the slice is freed" do
      start = Lifetime.settled_stats()

      slice =
        Lifetime.in_process(fn ->
          t = Tensor.from_binary(payload(), :float32, {16, 16}, copy: false)
          Tensor.narrow(t, 0, 15, 1)
        end)

      Lifetime.churn()
      assert %{pins: pins} = Lifetime.settled_stats()
      assert pins == start.pins + 1
      assert Tensor.to_binary(slice) == binary_part(payload(), 15 * 64, 64)

      _ = slice
      slice = nil
      _ = slice
      assert Lifetime.await_stats(start) == start
    end

    test "a binary of 64 bytes or less is copied into the pin, and the view is read-only all the same" do
      small = f32s([1, 2, 3, 4])
      t = Tensor.from_binary(small, :float32, {2, 2}, copy: false)
      assert Tensor.to_binary(t) == small
      assert Tensor.memory(t) == :binary
      assert_badarg(fn -> Tensor.write!(t, small) end, "read-only")
      assert Tensor.to_binary(Tensor.from_binary(<<>>, :float32, {0}, copy: false)) == <<>>
    end

    test "bytes not aligned to the element size are refused; copy: true takes them" do
      big = :binary.copy(<<7>>, 1000)
      part = binary_part(big, 1, 400)
      assert_badarg(fn -> Tensor.from_binary(part, :float32, {100}, copy: false) end, "aligned to 1 bytes")
      # copy: :if_needed copies only what cannot be viewed. (Asked right
      # after the refusal: once compared, a part's bytes may be moved.)
      copied = Tensor.from_binary(part, :float32, {100}, copy: :if_needed)
      assert Tensor.memory(copied) == :owned
      assert Tensor.to_binary(Tensor.from_binary(part, :float32, {100}, copy: true)) == part
      assert Tensor.to_binary(copied) == part
      assert Tensor.memory(Tensor.from_binary(binary_part(big, 8, 400), :float32, {100}, copy: :if_needed)) == :binary
      # A part at an aligned offset is viewed in place.
      aligned = binary_part(big, 8, 400)
      assert Tensor.to_binary(Tensor.from_binary(aligned, :float32, {100}, copy: false)) == aligned
    end

    test "bad input raises ArgumentError naming the field" do
      assert_badarg(fn -> Tensor.from_binary(payload(), :float32, {3}, copy: false) end, "needs 12 bytes")
      assert_badarg(fn -> Tensor.from_binary(:nope, :float32, {3}, copy: false) end, "binary: expected a binary")
      assert_badarg(fn -> Tensor.from_binary(payload(), :nope, {256}, copy: false) end, "dtype")
      assert_badarg(fn -> Tensor.from_binary(payload(), :float32, {256}, copy: :maybe) end, "copy")
      assert_badarg(fn -> Tensor.from_binary(payload(), :float32, {256}, cpy: false) end, "cpy: unknown option")
    end
  end

  describe "to_binary(copy: false)" do
    test "shows the tensor's memory: same bytes, and its address is the tensor's" do
      t = Tensor.from_binary(payload(), :float32, {16, 16})
      bin = Tensor.to_binary(t, copy: false)
      assert bin == payload()
      assert ptr(Tensor.from_binary(bin, :float32, {256}, copy: false)) == ptr(t)
      # A contiguous slice is shown from its own first element.
      row = Tensor.narrow(t, 0, 3, 2)
      assert Tensor.to_binary(row, copy: false) == binary_part(payload(), 3 * 64, 128)
    end

    test "a view of a binary gives that binary back, or the part of it: nothing new is made" do
      start = Lifetime.settled_stats()
      bytes = payload()
      t = Tensor.from_binary(bytes, :float32, {16, 16}, copy: false)
      row = Tensor.narrow(t, 0, 3, 2)
      row_bin = Tensor.to_binary(row, copy: false)
      assert row_bin == binary_part(bytes, 3 * 64, 128)
      # A part of the very binary the tensor views, not a binary of its own.
      assert :binary.referenced_byte_size(row_bin) == byte_size(bytes)
      assert ptr(Tensor.from_binary(Tensor.to_binary(t, copy: false), :float32, {256}, copy: false)) == ptr(t)
      assert TensorBlob.stats().binaries == start.binaries

      # Only the part kept: the binary lives on in it.
      part =
        Lifetime.in_process(fn ->
          v = Tensor.from_binary(payload(), :float32, {256}, copy: false)
          Tensor.to_binary(Tensor.narrow(v, 0, 16, 128), copy: false)
        end)

      # The tensors are gone (t and row too: not used below). At most as
      # many as at the start: a leftover of an earlier test may go too.
      Lifetime.churn()
      assert Lifetime.settled_stats().tensors <= start.tensors
      assert part == binary_part(payload(), 64, 512)
    end

    test "only the binary kept (a part of it, even): it keeps the memory alive" do
      Lifetime.assert_last_user(
        fn ->
          t = Tensor.from_binary(payload(), :float32, {256})
          # Over 64 bytes: a smaller part would be copied into the message.
          binary_part(Tensor.to_binary(t, copy: false), 64, 512)
        end,
        fn part, start ->
          stats = Lifetime.settled_stats()
          assert stats.binaries == start.binaries + 1
          assert stats.tensors == start.tensors
          assert part == binary_part(payload(), 64, 512)
        end
      )
    end

    test "write! refuses any tensor overlapping a live binary view, until the binary is collected" do
      t = Tensor.from_binary(payload(), :float32, {16, 16})
      other_row = Tensor.narrow(t, 0, 0, 1)

      Lifetime.in_process(fn ->
        bin = Tensor.to_binary(Tensor.narrow(t, 0, 8, 8), copy: false)
        assert_badarg(fn -> Tensor.write!(t, payload()) end, "binaries are immutable")
        assert_badarg(fn -> t |> Tensor.narrow(0, 9, 1) |> Tensor.write!(payload(16)) end, "immutable")
        alias_view = TensorBlob.from_blob(TensorBlob.to_blob(t), owner: :none)
        assert_badarg(fn -> Tensor.write!(alias_view, payload()) end, "immutable")
        # Memory outside the binary may still be written.
        Tensor.write!(other_row, f32s(Enum.to_list(1..16)))
        assert bin == binary_part(payload(), 8 * 64, 8 * 64)
        :ok
      end)

      Lifetime.settled_stats()
      Tensor.write!(t, payload())
      assert Tensor.to_binary(t) == payload()
    end

    # A binary the library made on the caller's behalf refuses a write as
    # one the caller made does, and the refusal names who made it and how to
    # let go of it: to_binary's (copy: false or :if_needed), or the binary
    # of a term Nodes.pack/3 made. Dropping the term and collecting it lets
    # the write through.
    test "write! names what shares the memory, and how to release it or avoid it" do
      n = div(:tensor_blob_nodes.default_thresholds().region, 4)
      t = Tensor.from_binary(payload(n), :float32, {n})

      makers = [
        {fn -> Tensor.to_binary(t, copy: false) end, ["a binary made by to_binary(copy: false)", "copy: true"],
         "to_binary(T, \#{copy => false})"},
        {fn -> Tensor.to_binary(t, copy: :if_needed) end, ["to_binary(copy: false) (or copy: :if_needed)"],
         "(or \#{copy => if_needed})"},
        {fn -> TensorBlob.Nodes.pack(t, node(), via: :binary) end,
         ["the binary of a term TensorBlob.Nodes.pack/3 made", "Drop the packed term", "Tensor.copy(t)"],
         "tensor_blob:node_pack/3"}
      ]

      for {make, words, erlang_words} <- makers do
        Lifetime.in_process(fn ->
          made = make.()
          e = assert_raise ArgumentError, fn -> Tensor.write!(t, payload(n)) end
          for w <- words, do: assert(e.message =~ w, e.message)
          assert e.message =~ "immutable"
          assert e.message =~ "let it be collected"
          # The Erlang API names it the Erlang way.
          erlang =
            try do
              :tensor_blob.write(Tensor.ref(t), payload(n))
            catch
              :error, {:badarg, message} -> message
            end

          assert erlang =~ erlang_words
          # Used here, so that it lives until here.
          assert made != nil
          :ok
        end)

        Lifetime.settled_stats()
        assert Tensor.to_binary(Tensor.write!(t, payload(n))) == payload(n)
      end
    end

    test "non-contiguous tensors are refused; an empty tensor gives an empty binary" do
      t = Tensor.zeros({2, 3}, :float32)
      assert_badarg(fn -> Tensor.to_binary(Tensor.transpose(t, 0, 1), copy: false) end, "not contiguous")
      assert Tensor.to_binary(Tensor.zeros({0, 3}, :float32), copy: false) == <<>>
      assert_badarg(fn -> Tensor.to_binary(:nope, copy: false) end, "tensor: expected a tensor")
    end

    test "every dtype round-trips through binary views both ways" do
      for dtype <- TensorBlob.dtypes() do
        size = TensorBlob.to_blob(Tensor.zeros({1}, dtype)).element_size
        bytes = for i <- 1..(size * 24), into: <<>>, do: <<rem(i * 7, 2)>>
        t = Tensor.from_binary(bytes, dtype, {4, 6})
        bin = Tensor.to_binary(t, copy: false)
        back = Tensor.from_binary(bin, dtype, {4, 6}, copy: false)
        assert Tensor.dtype(back) == dtype
        assert Tensor.to_binary(back) == bytes
        assert ptr(back) == ptr(t)
      end
    end
  end

  describe "thousands of binaries at once" do
    # The guards of read-only memory (binaries viewed) and of frozen memory
    # (binaries showing tensors) are interval sets: each answers for its own
    # memory after any order of drops, and a dropped guard is gone (under
    # AddressSanitizer, a stale one would be read after its free).
    test "views and shown binaries dropped in any order: the live ones still guard their memory" do
      n = 2000
      :rand.seed(:exsss, {7, 11, 13})
      kept = MapSet.new(Enum.take_random(1..n, div(n, 2)))
      start = Lifetime.settled_stats()

      {views, shown} =
        Lifetime.in_process(fn ->
          views =
            for i <- 1..n do
              bytes = :binary.copy(<<i::float-32-native>>, 64)
              {i, Tensor.from_binary(bytes, :float32, {64}, copy: false)}
            end

          tensors = for i <- 1..n, do: {i, Tensor.from_binary(f32s([i, i, i, i]), :float32, {4})}
          shown = for {i, t} <- tensors, do: {i, t, Tensor.to_binary(t, copy: false)}
          keep = fn list -> Enum.filter(list, &MapSet.member?(kept, elem(&1, 0))) end
          # The dropped half's tensors stay alive; only their binaries go.
          {keep.(views), Enum.map(shown, fn {i, t, b} -> {i, t, if(MapSet.member?(kept, i), do: b)} end)}
        end)

      Lifetime.collect()

      for {i, v} <- views do
        # An unpinned view of a live view's bytes finds them read-only.
        unpinned = TensorBlob.from_blob(Map.delete(TensorBlob.to_blob(v), :owner), owner: :none)
        assert_badarg(fn -> Tensor.write!(unpinned, payload(64)) end, "read-only")
        assert Tensor.to_binary(v) == :binary.copy(<<i::float-32-native>>, 64)
      end

      for {i, t, bin} <- shown do
        if bin do
          assert_badarg(fn -> Tensor.write!(t, f32s([0, 0, 0, 0])) end, "immutable")
          assert bin == f32s([i, i, i, i])
        else
          Tensor.write!(t, f32s([0, 0, 0, 0]))
          assert Tensor.to_binary(t) == f32s([0, 0, 0, 0])
        end
      end

      {views, shown} = {nil, nil}
      _ = {views, shown}
      assert Lifetime.await_stats(start) == start
    end
  end

  describe "blob alignment" do
    test "reports the largest power of two dividing the pointer" do
      t = Tensor.zeros({4, 4}, :float32)
      blob = TensorBlob.to_blob(t)
      assert blob.alignment >= 64 and Bitwise.band(blob.ptr, blob.alignment - 1) == 0
      slice = TensorBlob.to_blob(Tensor.narrow(t, 1, 1, 2))
      assert slice.alignment == 4
      assert slice.ptr == blob.ptr + 4
    end
  end
end
