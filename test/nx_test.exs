# Runs when Nx is on the code path: NX_PATH=<dirs of an Nx build> make nx-test
# (see guides/nx.md). Without Nx, the :nx tests are excluded.
if Code.ensure_loaded?(Nx) do
  defmodule TensorBlob.Test.OnlyFromBinary do
    @moduledoc false
    # A module with a from_binary/3 and nothing else of Nx.Backend.
    def from_binary(_template, _bytes, _opts), do: :not_a_tensor
  end

  defmodule TensorBlob.Test.PointerBackend do
    @moduledoc false
    # Just enough of an Nx backend to stand in for Torchx or EXLA: its data
    # is one of our tensors, and it implements to_pointer/from_pointer the
    # Nx 0.9 way ({:ok, _}) or the later way (bare values), as style says.
    defstruct [:tensor, :style]

    alias TensorBlob.Tensor

    def init(opts), do: opts

    def wrap(%Tensor{} = t, style) do
      type = TensorBlob.Nx.nx_type!(Tensor.dtype(t))
      shape = Tensor.shape(t)

      %Nx.Tensor{
        data: %__MODULE__{tensor: t, style: style},
        type: type,
        shape: shape,
        names: Enum.map(Tuple.to_list(shape), fn _ -> nil end)
      }
    end

    # Validates its options as EXLA 0.9 does: mode: only (kind: is refused).
    def to_pointer(%Nx.Tensor{data: %__MODULE__{style: :raises}}, _opts), do: raise(RuntimeError, "device lost")

    def to_pointer(%Nx.Tensor{data: %__MODULE__{tensor: t, style: style}}, opts) do
      :local = Keyword.validate!(opts, mode: :local)[:mode]
      blob = TensorBlob.to_blob(t)
      reply(%Nx.Pointer{kind: :local, address: blob.ptr, data_size: blob.byte_size}, style)
    end

    def from_pointer(%Nx.Pointer{kind: :local, address: address}, type, shape, backend_opts, _opts) do
      %TensorBlob.BlobView{tensor: t} = TensorBlob.from_blob(%{ptr: address, shape: shape, dtype: type}, owner: :none)
      reply(wrap(t, backend_opts[:style]), backend_opts[:style])
    end

    # As Torchx: the backend maps the region itself.
    def from_pointer(%Nx.Pointer{kind: :ipc, handle: name}, type, shape, backend_opts, _opts) do
      reply(wrap(TensorBlob.IPC.open(name, type, shape), backend_opts[:style]), backend_opts[:style])
    end

    def from_binary(%Nx.Tensor{type: type, shape: shape}, binary, backend_opts),
      do: wrap(Tensor.from_binary(binary, type, shape), backend_opts[:style])

    def to_binary(%Nx.Tensor{data: %__MODULE__{tensor: t}, type: {_, bits}}, limit),
      do: binary_part(Tensor.to_binary(t), 0, div(limit * bits, 8))

    defp reply(value, :ok_tuple), do: {:ok, value}
    defp reply(value, style) when style in [:bare, nil], do: value
  end

  defmodule TensorBlob.Test.Defns do
    @moduledoc false
    import Nx.Defn

    defn(scale_add(x, y), do: x * 2 + y)
    defn(total(x), do: Nx.sum(x))
  end

  defmodule TensorBlob.NxTest do
    use ExUnit.Case, async: false
    @moduletag :nx

    alias TensorBlob.{Tensor, Test.PointerBackend}
    alias TensorBlob.Nx, as: TNx
    alias TensorBlob.Test.Lifetime

    # Every dtype with an Nx type in the library's table, that this Nx has.
    defp pairs do
      for %{name: dtype, nx: type} <- TensorBlob.tables().dtypes, type != nil, nx_has?(type), do: {type, dtype}
    end

    defp nx_has?(type) do
      Nx.Type.normalize!(type)
      true
    rescue
      ArgumentError -> false
    end

    setup_all do
      {:ok, _} = Application.ensure_all_started(:nx)
      :ok
    end

    defp ptr(t), do: TensorBlob.to_blob(t).ptr

    # Bytes that are a valid value of every type: small integers' patterns.
    defp bytes_for({_, bits}, n), do: for(i <- 1..div(n * bits, 8), into: <<>>, do: <<rem(i, 3)>>)

    defp nx_of(type, shape) do
      n = shape |> Tuple.to_list() |> Enum.product()
      Nx.from_binary(bytes_for(type, n), type) |> Nx.reshape(shape)
    end

    describe "from_nx" do
      test "every mapped type: the BinaryBackend's binary is viewed in place, read-only" do
        for {type, dtype} <- pairs() do
          # Over 64 bytes, so the binary is shared, not on a process heap.
          nx = nx_of(type, {16, 8})

          cond do
            dtype not in TensorBlob.dtypes() ->
              # A type the linked libtorch lacks: a clear error, no substitute.
              assert_raise TensorBlob.Error, ~r/#{dtype}/, fn -> TNx.from_nx(nx) end

            dtype == :complex128 and Tensor.memory(TNx.from_nx(nx)) == :owned ->
              # The BEAM aligns a binary's bytes to 8 or 16 by chance; 16 is
              # needed here, and when it is missing the data is copied.
              assert_raise ArgumentError, ~r/aligned to 8 bytes/, fn -> TNx.from_nx(nx, copy: :never) end
              assert Tensor.to_binary(TNx.from_nx(nx)) == Nx.to_binary(nx)

            true ->
              t = TNx.from_nx(nx)
              assert Tensor.dtype(t) == dtype
              assert Tensor.shape(t) == {16, 8}
              assert Tensor.memory(t) == :binary
              assert Tensor.to_binary(t) == Nx.to_binary(nx)
              # The same bytes: a view of the backend's binary has its address.
              same = Tensor.from_binary(nx.data.state, type, {16, 8}, copy: false)
              assert ptr(t) == ptr(same)
              assert_raise ArgumentError, ~r/read-only/, fn -> Tensor.write!(t, Nx.to_binary(nx)) end
          end
        end
      end

      test "only our tensor kept: the Nx binary lives until it is freed" do
        start = Lifetime.settled_stats()

        t =
          Lifetime.in_process(fn ->
            TNx.from_nx(Nx.iota({64, 4}, type: {:f, 32}))
          end)

        Lifetime.churn()
        assert Lifetime.settled_stats().pins == start.pins + 1
        assert Tensor.to_binary(t) == Nx.to_binary(Nx.iota({64, 4}, type: {:f, 32}))
        _ = t
        t = nil
        _ = t
        assert Lifetime.await_stats(start) == start
      end

      test "sub-byte types are refused" do
        for type <- [{:u, 2}, {:u, 4}, {:s, 2}, {:s, 4}] do
          nx = Nx.tensor([1, 0, 1, 1], type: type)
          assert_raise ArgumentError, ~r/sub-byte/, fn -> TNx.from_nx(nx) end
        end
      end

      test "misaligned bytes are copied, or refused with copy: :never; copy: :always copies" do
        big = :binary.copy(<<0, 0, 128, 63>>, 200)
        nx = Nx.from_binary(binary_part(big, 1, 400), {:f, 32})
        copied = TNx.from_nx(nx)
        assert Tensor.memory(copied) == :owned
        assert Tensor.to_binary(copied) == Nx.to_binary(nx)
        assert_raise ArgumentError, ~r/copy: :never/, fn -> TNx.from_nx(nx, copy: :never) end
        assert Tensor.memory(TNx.from_nx(Nx.iota({4}), copy: :always)) == :owned

        assert_raise ArgumentError, ~r/copy: expected one of :auto, :never, :always/, fn ->
          TNx.from_nx(nx, copy: :sometimes)
        end
      end

      test "axis names do not cross" do
        nx = Nx.iota({2, 3}, names: [:rows, :cols], type: {:s, 32})
        t = TNx.from_nx(nx)
        assert Tensor.shape(t) == {2, 3}
        assert TNx.to_nx(t).names == [nil, nil]
      end

      test "to_nx of a zero-size tensor is refused: Nx has no dimensions of size 0" do
        error = assert_raise ArgumentError, fn -> TNx.to_nx(Tensor.zeros({0, 3}, :float32)) end
        assert error.message =~ "size 0"
        assert_raise ArgumentError, fn -> Nx.iota({0}) end
      end

      test "a vectorized tensor is refused with a message that says to devectorize" do
        v = Nx.vectorize(Nx.iota({2, 3}), :rows)
        error = assert_raise ArgumentError, fn -> TNx.from_nx(v) end
        assert error.message =~ "Nx.devectorize"
        assert Tensor.shape(TNx.from_nx(Nx.devectorize(v))) == {2, 3}
      end

      test "a backend whose to_pointer raises: copy: :never reports the backend's own error" do
        nx = PointerBackend.wrap(Tensor.zeros({4}, :float32), :raises)
        error = assert_raise ArgumentError, fn -> TNx.from_nx(nx, device: :cpu, copy: :never) end
        assert error.message =~ "device lost"
      end

      for style <- [:ok_tuple, :bare] do
        test "a pointer backend (#{style}): a pinned view of its memory with device: :cpu, a copy without" do
          ours = Tensor.from_binary(Nx.to_binary(Nx.iota({8}, type: {:f, 32})), :float32, {8})
          nx = PointerBackend.wrap(ours, unquote(style))

          view = TNx.from_nx(nx, device: :cpu)
          assert ptr(view) == ptr(ours)
          assert Tensor.memory(view) == :pinned

          copy = TNx.from_nx(nx)
          assert Tensor.memory(copy) == :owned
          assert Tensor.to_binary(copy) == Tensor.to_binary(ours)
          assert_raise ArgumentError, ~r/no host pointer/, fn -> TNx.from_nx(nx, copy: :never) end
        end
      end

      test "a pointer backend's struct whose size is not the backend's data is refused, copy: :always too" do
        ours = Tensor.from_binary(Nx.to_binary(Nx.iota({4}, type: {:f, 32})), :float32, {4})

        for style <- [:ok_tuple, :bare],
            {shape, type} <- [{{4, 4}, {:f, 32}}, {{1_000_000}, {:f, 32}}, {{4}, {:f, 64}}],
            opts <- [[device: :cpu], [device: :cpu, copy: :never], [copy: :always], []] do
          nx = %{
            PointerBackend.wrap(ours, style)
            | shape: shape,
              type: type,
              names: List.duplicate(nil, tuple_size(shape))
          }

          error = assert_raise ArgumentError, fn -> TNx.from_nx(nx, opts) end
          expected = div(elem(type, 1), 8) * Tuple.product(shape)
          assert error.message =~ "shape #{inspect(shape)} of #{inspect(type)} (#{expected} bytes)", error.message
          assert error.message =~ "holds 16 bytes", error.message
        end
      end

      test "a pointer view pins the Nx tensor (and so the backend's memory)" do
        start = Lifetime.settled_stats()

        view =
          Lifetime.in_process(fn ->
            ours = Tensor.from_binary(Nx.to_binary(Nx.iota({256}, type: {:f, 32})), :float32, {256})
            TNx.from_nx(PointerBackend.wrap(ours, :bare), device: :cpu)
          end)

        Lifetime.churn()
        assert Tensor.to_binary(view) == Nx.to_binary(Nx.iota({256}, type: {:f, 32}))
        _ = view
        view = nil
        _ = view
        assert Lifetime.await_stats(start) == start
      end
    end

    describe "to_nx" do
      test "every dtype with an Nx type: a BinaryBackend tensor over our memory, zero-copy" do
        for dtype <- TensorBlob.dtypes(), dtype == :bool or :tensor_blob.nx_type(dtype) != nil do
          type = TNx.nx_type!(dtype)
          # A bool tensor's bytes are 0 and 1.
          bytes = if dtype == :bool, do: for(i <- 1..12, into: <<>>, do: <<rem(i, 2)>>), else: bytes_for(type, 12)
          t = Tensor.from_binary(bytes, dtype, {3, 4})
          nx = TNx.to_nx(t)
          assert nx.type == type
          assert nx.shape == {3, 4}
          assert Nx.to_binary(nx) == Tensor.to_binary(t)
          # And back: the same address.
          assert ptr(TNx.from_nx(nx)) == ptr(t)
        end
      end

      test "a dtype Nx has no type for (complex32) is refused, saying so" do
        no_nx = for dtype <- TensorBlob.dtypes(), dtype != :bool, :tensor_blob.nx_type(dtype) == nil, do: dtype
        assert :complex32 in no_nx

        message =
          "dtype: :complex32 has no Nx type (Nx's complex types are {:c, 64} and {:c, 128}); " <>
            "convert the tensor to :complex64 in libtorch first"

        t = Tensor.zeros({2}, :complex32)
        assert_raise ArgumentError, message, fn -> TNx.to_nx(t) end
        assert_raise ArgumentError, message, fn -> TNx.to_nx(t, Nx.BinaryBackend) end
        assert_raise ArgumentError, message, fn -> TNx.nx_type!(:complex32) end
      end

      test "Nx computes on it; our tensor may be dropped; write! waits for the binary" do
        start = Lifetime.settled_stats()

        nx =
          Lifetime.in_process(fn ->
            TNx.to_nx(Tensor.from_binary(Nx.to_binary(Nx.iota({100}, type: {:f, 32})), :float32, {100}))
          end)

        Lifetime.churn()
        assert Nx.to_number(Nx.sum(nx)) == 4950.0

        t = Tensor.zeros({4}, :float32)
        nx2 = TNx.to_nx(t)

        # The refusal names the Nx tensor to_nx made, and how to let go of it.
        e =
          assert_raise ArgumentError, ~r/immutable/, fn ->
            Tensor.write!(t, Nx.to_binary(Nx.iota({4}, type: {:f, 32})))
          end

        assert e.message =~ "the binary of an Nx tensor TensorBlob.Nx.to_nx/2 made"
        assert e.message =~ "let them be collected"

        _ = {nx, nx2}
        nx = nil
        nx2 = nil
        _ = {nx, nx2}
        Lifetime.settled_stats()
        Tensor.write!(t, Nx.to_binary(Nx.iota({4}, type: {:f, 32})))
        t = nil
        _ = t
        assert Lifetime.await_stats(start) == start
      end

      test "a non-contiguous tensor is copied in row-major order; a blob is viewed with its owner" do
        t = Tensor.from_binary(Nx.to_binary(Nx.iota({2, 3}, type: {:s, 32})), :int32, {2, 3})
        nx = TNx.to_nx(Tensor.transpose(t, 0, 1))
        assert Nx.to_flat_list(nx) == [0, 3, 1, 4, 2, 5]
        assert Nx.to_flat_list(TNx.to_nx(TensorBlob.to_blob(t))) == [0, 1, 2, 3, 4, 5]
      end

      for style <- [:ok_tuple, :bare] do
        test "a pointer backend (#{style}): a copy by default; unsafe_view: true gives it our memory" do
          t = Tensor.from_binary(Nx.to_binary(Nx.iota({6}, type: {:f, 64})), :float64, {6})

          for arg <- [{PointerBackend, style: unquote(style)}, [backend: {PointerBackend, style: unquote(style)}]] do
            nx = TNx.to_nx(t, arg)
            assert %PointerBackend{tensor: theirs} = nx.data
            assert ptr(theirs) != ptr(t)
            assert Tensor.memory(theirs) == :owned
            assert Nx.to_binary(nx) == Tensor.to_binary(t)
          end

          nx = TNx.to_nx(t, backend: {PointerBackend, style: unquote(style)}, unsafe_view: true)
          assert %PointerBackend{tensor: theirs} = nx.data
          assert ptr(theirs) == ptr(t)
          assert Nx.to_binary(nx) == Tensor.to_binary(t)
        end
      end

      test "a region is handed to the backend as an IPC pointer: zero-copy, its own mapping" do
        start = Lifetime.settled_stats()

        {nx, creator_ptr} =
          Lifetime.in_process(fn ->
            t = TensorBlob.IPC.zeros({4}, :float32)
            Tensor.write!(t, Nx.to_binary(Nx.tensor([1.0, 2.0, 3.0, 4.0], type: {:f, 32})))
            nx = TNx.to_nx(t, PointerBackend)
            %PointerBackend{tensor: theirs} = nx.data
            # Another mapping of the same pages: a write through ours shows there.
            assert ptr(theirs) != ptr(t)
            Tensor.write!(t, Nx.to_binary(Nx.tensor([5.0, 6.0, 7.0, 8.0], type: {:f, 32})))
            {nx, ptr(t)}
          end)

        assert is_integer(creator_ptr)
        # Our tensor is gone and collected; the backend's mapping is its own.
        Lifetime.churn()
        assert Nx.to_flat_list(nx) == [5.0, 6.0, 7.0, 8.0]
        _ = nx
        nx = nil
        _ = nx
        assert Lifetime.await_stats(start) == start
      end

      test "to_nx/1 follows Nx.default_backend/0; the keyword form takes backend:" do
        t = Tensor.from_binary(Nx.to_binary(Nx.iota({3}, type: {:s, 32})), :int32, {3})
        previous = Nx.default_backend({PointerBackend, style: :bare})

        try do
          assert %PointerBackend{} = TNx.to_nx(t).data
          assert %Nx.BinaryBackend{} = TNx.to_nx(t, backend: Nx.BinaryBackend).data
          assert %Nx.BinaryBackend{} = TNx.to_nx(t, Nx.BinaryBackend).data
        after
          Nx.default_backend(previous)
        end

        assert %Nx.BinaryBackend{} = TNx.to_nx(t).data

        assert_raise ArgumentError, ~r/view: unknown option/, fn ->
          TNx.to_nx(t, backend: PointerBackend, view: true)
        end

        for arg <- [Foo, {Foo, []}, [backend: Foo], [backend: {Foo, []}]] do
          assert_raise ArgumentError, ~r/^backend: Foo is not an Nx backend/, fn -> TNx.to_nx(t, arg) end
        end

        assert_raise ArgumentError, ~r/unsafe_view: expected a boolean/, fn -> TNx.to_nx(t, unsafe_view: :yes) end
      end
    end

    describe "Nx's own functions and defn take tensor_blob tensors, or refuse them" do
      # The calls that take them as they are (Nx.LazyContainer, Nx.Container):
      # each gives what it gives for to_nx(t).
      defp takes do
        [
          {"Nx.to_tensor/1", &Nx.to_tensor/1},
          {"Nx.backend_copy/2", &Nx.backend_copy/1},
          {"Nx.backend_transfer/2", &Nx.backend_transfer(&1, Nx.BinaryBackend)},
          {"Nx.serialize/2 and Nx.deserialize/2", &Nx.deserialize(Nx.serialize(&1))},
          {"Nx.sum/2 with axes", &Nx.sum(&1, axes: [-1])}
        ] ++
          unary(
            sum: 2,
            mean: 2,
            product: 2,
            reduce_max: 2,
            reduce_min: 2,
            all: 2,
            any: 2,
            type: 1,
            to_binary: 2,
            to_flat_list: 2,
            to_number: 1
          ) ++
          [
            {"Nx.reshape/3", &Nx.reshape(&1, {1, :auto})},
            {"Nx.flatten/2", &Nx.flatten/1},
            {"a defn", &TensorBlob.Test.Defns.scale_add(&1, &1)},
            {"a defn reducing", &TensorBlob.Test.Defns.total/1},
            {"Nx.Defn.jit of Nx.multiply/2 by 3", Nx.Defn.jit(&Nx.multiply(&1, 3))},
            {"Nx.Defn.jit of Nx.add/2", &Nx.Defn.jit(fn x, y -> Nx.add(x, y) end).(&1, &1)},
            {"Nx.Defn.jit of Nx.divide/2 by 2", Nx.Defn.jit(&Nx.divide(&1, 2))},
            {"Nx.Defn.jit of Nx.negate/1", Nx.Defn.jit(&Nx.negate/1)},
            {"Nx.Defn.jit of Nx.abs/1", Nx.Defn.jit(&Nx.abs/1)},
            {"Nx.Defn.jit of Nx.exp/1", Nx.Defn.jit(&Nx.exp/1)}
          ]
      end

      # Nx's functions that work out the result type from their arguments
      # before converting them: they would compute in f32, and refuse.
      defp refused do
        [
          {"Nx.add/2 with a number", &Nx.add(&1, 1)},
          {"Nx.add/2 of a number", &Nx.add(1, &1)},
          {"Nx.add/2 with a tensor", &Nx.add(&1, Nx.to_tensor(&1))},
          {"Nx.add/2 of two", &Nx.add(&1, &1)},
          {"Nx.subtract/2", &Nx.subtract(&1, 2)},
          {"Nx.subtract/2 from a tensor", &Nx.subtract(Nx.to_tensor(&1), &1)},
          {"Nx.multiply/2", &Nx.multiply(&1, 3)},
          {"Nx.multiply/2 of a number", &Nx.multiply(3, &1)},
          {"Nx.divide/2", &Nx.divide(&1, 2)},
          {"Nx.divide/2 of a tensor", &Nx.divide(Nx.to_tensor(&1), &1)},
          {"Nx.equal/2", &Nx.equal(&1, 0)},
          {"Nx.select/3", &Nx.select(1, &1, 0)}
        ]
      end

      # Nx's own guards refuse anything but numbers and %Nx.Tensor{} before
      # any code of ours runs.
      defp refused_by_nx do
        unary(negate: 1, abs: 1, exp: 1, shape: 1, rank: 1, size: 1, tensor: 2) ++ [{"Nx.fill/3", &Nx.fill(&1, 1)}]
      end

      # Nx's functions called with one argument (their defaults taken),
      # named as guides/nx.md names them: function: arity.
      defp unary(functions), do: for({f, arity} <- functions, do: {"Nx.#{f}/#{arity}", Function.capture(Nx, f, 1)})

      # What a call gives, as data: a tensor's type, shape and bytes, any
      # other value, or the exception it raised.
      defp outcome(fun) do
        case fun.() do
          %Nx.Tensor{} = r -> {:tensor, r.type, r.shape, Nx.to_binary(r)}
          other -> {:value, other}
        end
      rescue
        e -> {:raised, e.__struct__, Exception.message(e)}
      end

      # A tensor of every dtype shared with Nx (and the linked libtorch), of
      # shape {2, 3} and {}.
      defp samples do
        for {type, dtype} <- pairs(), dtype in TensorBlob.dtypes(), shape <- [{2, 3}, {}] do
          nx = nx_of(type, shape)
          {dtype, shape, Nx.to_binary(nx)}
        end
      end

      defp tensor_of({dtype, shape, bytes}), do: Tensor.from_binary(bytes, dtype, shape)

      test "every call that takes them gives what it gives for to_nx(t), for every dtype Nx shares" do
        for sample <- samples(), {name, call} <- takes() do
          t = tensor_of(sample)
          expected = outcome(fn -> call.(TNx.to_nx(t)) end)
          assert outcome(fn -> call.(t) end) == expected, "#{name} of #{inspect(sample)}"
          view = TensorBlob.from_blob(TensorBlob.to_blob(t))
          assert outcome(fn -> call.(view) end) == expected, "#{name} of a BlobView of #{inspect(sample)}"
        end
      end

      test "an int64 above 2^24 keeps its value: Nx.multiply/2 refuses, a defn computes in s64" do
        t = Tensor.from_binary(<<16_777_217::64-signed-native, 2::64-signed-native>>, :int64, {2})
        assert Nx.to_flat_list(Nx.multiply(TNx.to_nx(t), 3)) == [50_331_651, 6]
        assert Nx.to_flat_list(Nx.Defn.jit(&Nx.multiply(&1, 3)).(t)) == [50_331_651, 6]
        assert Nx.type(Nx.Defn.jit(&Nx.add(&1, 1)).(t)) == {:s, 64}
        error = assert_raise ArgumentError, fn -> Nx.multiply(t, 3) end
        assert error.message =~ "tensor_blob tensor (int64 {2}) reached Nx.to_tensor/1 from Nx."
        assert error.message =~ "would take this tensor for f32. Pass TensorBlob.Nx.to_nx(t) instead"
      end

      test "the functions that type their arguments first refuse them, saying to call to_nx/2" do
        for sample <- samples(), {name, call} <- refused() do
          t = tensor_of(sample)
          # With to_nx/2 they work.
          assert {kind, _, _, _} = outcome(fn -> call.(TNx.to_nx(t)) end)
          assert kind == :tensor, "#{name} of to_nx of #{inspect(sample)}"
          error = assert_raise ArgumentError, fn -> call.(t) end
          assert error.message =~ "Pass TensorBlob.Nx.to_nx(t) instead", "#{name} of #{inspect(sample)}"
        end
      end

      test "the functions whose guards take only Nx tensors raise Nx's own error; to_nx/2 works" do
        t = tensor_of(hd(samples()))

        for {name, call} <- refused_by_nx() do
          refute match?({:raised, _, _}, outcome(fn -> call.(TNx.to_nx(t)) end)), name
          assert {:raised, struct, _} = outcome(fn -> call.(t) end)
          assert struct in [FunctionClauseError, ArgumentError, KeyError], name
        end
      end

      test "the guide names every Nx function that takes them" do
        guide = File.read!(Path.join(File.cwd!(), "guides/nx.md"))
        for name <- TensorBlob.Nx.Lazy.takes(), do: assert(guide =~ "`Nx.#{name}/", "Nx.#{name} in guides/nx.md")
        for {name, _} <- refused_by_nx(), do: assert(guide =~ "`#{name}`", "#{name} in guides/nx.md")
      end

      test "a tensor is writable the moment an Nx call returns (no garbage collection), and the result is Nx's own" do
        for sample <- samples(), {name, call} <- takes() ++ refused() do
          t = tensor_of(sample)

          result =
            try do
              {:ok, call.(t)}
            rescue
              e -> {:raised, e}
            end

          before = snapshot(result)
          Tensor.write!(t, :binary.copy(<<0>>, byte_size(elem(sample, 2))))
          assert snapshot(result) == before, "#{name} of #{inspect(sample)}"
        end
      end

      defp snapshot({:ok, %Nx.Tensor{} = r}), do: {r.type, r.shape, Nx.to_binary(r)}
      defp snapshot(other), do: other

      test "a result that Nx keeps does not change when the tensor is written" do
        t = Tensor.from_binary(Nx.to_binary(Nx.iota({2, 3}, type: {:s, 32})), :int32, {2, 3})
        reshaped = Nx.reshape(t, {6})
        converted = Nx.to_tensor(t)
        Tensor.write!(t, :binary.copy(<<0>>, 24))
        assert Nx.to_flat_list(reshaped) == [0, 1, 2, 3, 4, 5]
        assert Nx.to_flat_list(converted) == [0, 1, 2, 3, 4, 5]
        assert Nx.to_flat_list(Nx.sum(t, axes: [1])) == [0, 0]
      end

      test "a region: Nx's functions get a copy; to_nx/2 copies it for the binary backend, unsafe_view: true views it" do
        region = TensorBlob.IPC.zeros({4}, :float32)
        Tensor.write!(region, Nx.to_binary(Nx.tensor([1.0, 2.0, 3.0, 4.0], type: {:f, 32})))
        assert Nx.to_number(Nx.sum(region)) == 10.0
        assert Nx.to_flat_list(Nx.Defn.jit(&Nx.add(&1, 1)).(region)) == [2.0, 3.0, 4.0, 5.0]

        copied = TNx.to_nx(region, Nx.BinaryBackend)
        refute ptr(TNx.from_nx(copied)) == ptr(region)
        viewed = TNx.to_nx(region, backend: Nx.BinaryBackend, unsafe_view: true)
        assert ptr(TNx.from_nx(viewed)) == ptr(region)
      end

      test "what Nx cannot take is refused before any data is asked for, saying why" do
        assert_raise ArgumentError, ~r/complex32 has no Nx type/, fn -> Nx.sum(Tensor.zeros({2}, :complex32)) end
        assert_raise ArgumentError, ~r/complex32 has no Nx type/, fn -> Nx.add(Tensor.zeros({2}, :complex32), 1) end
        assert_raise ArgumentError, ~r/size 0/, fn -> Nx.sum(Tensor.zeros({0, 2}, :float32)) end
        # What defn sees before it asks for the data: the shape and type.
        assert %Nx.Tensor{shape: {2, 3}, type: {:f, 32}, data: %Nx.TemplateBackend{}} =
                 TNx.template!(Tensor.zeros({2, 3}, :float32))
      end
    end

    describe "wrong arguments to TensorBlob.Nx say what to pass" do
      test "to_nx of an Nx tensor or of anything else" do
        nx = Nx.iota({3})
        error = assert_raise ArgumentError, fn -> TNx.to_nx(nx) end
        assert error.message =~ "to_nx: expected a tensor_blob tensor (%TensorBlob.Tensor{}"
        assert error.message =~ "got an Nx tensor: it needs no conversion"
        error = assert_raise ArgumentError, fn -> TNx.to_nx(:nope, Nx.BinaryBackend) end
        assert error.message =~ "to_nx: expected a tensor_blob tensor"
        assert error.message =~ "got :nope"
      end

      test "from_nx of a tensor_blob tensor, view or blob, or of anything else" do
        t = Tensor.zeros({2}, :float32)
        view = TensorBlob.from_blob(TensorBlob.to_blob(t))

        for {arg, kind} <- [{t, "tensor"}, {view, "view"}, {TensorBlob.to_blob(t), "blob"}] do
          error = assert_raise ArgumentError, fn -> TNx.from_nx(arg) end
          assert error.message =~ "from_nx: expected an Nx tensor (%Nx.Tensor{}), got a tensor_blob #{kind}"
          assert error.message =~ "needs no conversion"
        end

        error = assert_raise ArgumentError, fn -> TNx.from_nx([1, 2], copy: :always) end
        assert error.message =~ "from_nx: expected an Nx tensor (%Nx.Tensor{}), got [1, 2]; make one first"
      end
    end

    describe "wrong options to TensorBlob.Nx raise ArgumentError naming them" do
      import TensorBlob.Test.Raised, only: [raised: 1]

      test "to_nx: options that are no keyword list, and modules that are no Nx backend" do
        t = Tensor.from_binary(<<1, 2, 3, 4>>, :uint8, {4})

        for bad <- [[{:backend, Nx.BinaryBackend} | :tail], [:backend], [{"backend", Nx.BinaryBackend}]] do
          {e, data} = raised(fn -> TNx.to_nx(t, bad) end)
          assert %ArgumentError{} = e, inspect(bad)
          assert e.message =~ "expected a keyword list"
          assert data == %{reason: :bad_option, argument: :options}
        end

        # Nx itself has a from_binary/3, as has TensorBlob.Tensor: neither is a backend.
        for module <- [Nx, TensorBlob.Tensor, TensorBlob.Test.OnlyFromBinary, :no_such_module] do
          for arg <- [module, {module, []}, [backend: module], [backend: module, unsafe_view: true]] do
            {e, data} = raised(fn -> TNx.to_nx(t, arg) end)
            assert %ArgumentError{} = e, inspect(arg)
            assert e.message =~ "is not an Nx backend"
            assert data == %{reason: :bad_value, argument: :backend}
          end
        end

        # What is a backend still is one.
        assert Nx.to_binary(TNx.to_nx(t, backend: Nx.BinaryBackend)) == <<1, 2, 3, 4>>
        assert Nx.to_binary(TNx.to_nx(t, PointerBackend)) == <<1, 2, 3, 4>>
      end

      test "from_nx: options that are no keyword list" do
        nx = Nx.iota({4}, type: {:u, 8})

        for bad <- [%{copy: :always}, :always, "copy", nil, {:copy, :always}, [{:copy, :always} | :tail], [:copy]] do
          {e, data} = raised(fn -> TNx.from_nx(nx, bad) end)
          assert %ArgumentError{} = e, inspect(bad)
          assert e.message =~ "expected a keyword list"
          assert data == %{reason: :bad_option, argument: :options}
        end

        assert Tensor.to_binary(TNx.from_nx(nx, copy: :always)) == <<0, 1, 2, 3>>
      end
    end

    describe "cost" do
      test "from_nx asks Nx's version once, not on every call" do
        nx = PointerBackend.wrap(Tensor.zeros({4}, :float32), :bare)
        _ = TNx.from_nx(nx, device: :cpu)
        patterns = [{Application, :spec, :_}, {Version, :match?, :_}]
        tracer = spawn_link(fn -> collect_traces([]) end)
        Enum.each(patterns, &:erlang.trace_pattern(&1, true, [:global]))
        :erlang.trace(self(), true, [:call, {:tracer, tracer}])

        try do
          for _ <- 1..3, do: assert(Tensor.memory(TNx.from_nx(nx, device: :cpu)) == :pinned)
        after
          :erlang.trace(self(), false, [:call])
          Enum.each(patterns, &:erlang.trace_pattern(&1, false, [:global]))
        end

        send(tracer, {:done, self()})
        assert_receive {:traced, calls}
        assert calls == []
      end
    end

    test "a safetensors file's tensors: a params map to jit as it is, and to_nx's views of the mapping" do
      dir = Path.join(System.tmp_dir!(), "tb_nx_st_#{System.unique_integer([:positive])}")
      File.mkdir_p!(dir)
      path = Path.join(dir, "params.safetensors")
      w = Tensor.from_binary(<<1.0::float-32-little, 2.0::float-32-little, 3.0::float-32-little>>, :float32, {3})
      :ok = TensorBlob.SafeTensors.write(path, %{"w" => w, "b" => {<<0.5::float-32-little>>, :float32, {1}}})
      %{tensors: params} = TensorBlob.SafeTensors.open(path)
      File.rm_rf!(dir)
      # the map of tensors, as Nx.LazyContainer takes it
      sum = Nx.Defn.jit(fn p -> Nx.add(Nx.sum(p["w"]), p["b"]) end).(params)
      assert Nx.to_flat_list(sum) == [6.5]
      # the binary backend over the mapping, no copy, when asked
      view = TNx.to_nx(params["w"], unsafe_view: true)
      assert Nx.to_flat_list(view) == [1.0, 2.0, 3.0]
      # while the binary shows the memory, no write! changes it under Nx
      assert_raise ArgumentError, fn -> Tensor.write!(params["w"], :binary.copy(<<0>>, 12)) end
      # by default a copy (another program may shrink the file)
      assert Nx.to_flat_list(TNx.to_nx(params["b"])) == [0.5]
    end

    defp collect_traces(calls) do
      receive do
        {:trace, _, :call, mfa} -> collect_traces([mfa | calls])
        {:done, from} -> send(from, {:traced, Enum.reverse(calls)})
      end
    end
  end
else
  defmodule TensorBlob.NxTest do
    use ExUnit.Case
    @moduletag :nx

    test "needs Nx on the code path (NX_PATH); excluded without it" do
      flunk("Nx is not loaded")
    end
  end
end
