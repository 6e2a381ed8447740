defmodule TensorBlob.DLPackTest do
  use ExUnit.Case, async: false

  alias TensorBlob.{DLPack, Tensor}
  alias TensorBlob.Test.Lifetime

  # Managed tensors as bytes (native endianness, 64-bit pointers), to read
  # what an export holds and to forge variants of it. Forged structs live in
  # tensors' memory: libtorch's, 64-byte aligned, never moved, and alive
  # while the test holds the tensor.
  defmodule Managed do
    @moduledoc false

    def decode(
          <<major::32-native, minor::32-native, ctx::64-native, deleter::64-native, flags::64-native,
            tensor::binary-size(48)>>,
          :versioned
        ) do
      Map.merge(decode_tensor(tensor), %{major: major, minor: minor, ctx: ctx, deleter: deleter, flags: flags})
    end

    def decode(<<tensor::binary-size(48), ctx::64-native, deleter::64-native>>, :legacy) do
      Map.merge(decode_tensor(tensor), %{ctx: ctx, deleter: deleter})
    end

    defp decode_tensor(
           <<data::64-native, dev::32-signed-native, dev_id::32-signed-native, ndim::32-signed-native, code::8, bits::8,
             lanes::16-native, shape::64-native, strides::64-native, offset::64-native>>
         ) do
      %{
        data: data,
        device: dev,
        device_id: dev_id,
        ndim: ndim,
        code: code,
        bits: bits,
        lanes: lanes,
        shape: shape,
        strides: strides,
        byte_offset: offset
      }
    end

    def encode(f, :versioned) do
      <<f.major::32-native, f.minor::32-native, f.ctx::64-native, f.deleter::64-native, f.flags::64-native,
        encode_tensor(f)::binary>>
    end

    def encode(f, :legacy), do: <<encode_tensor(f)::binary, f.ctx::64-native, f.deleter::64-native>>

    defp encode_tensor(f) do
      <<f.data::64-native, f.device::32-signed-native, f.device_id::32-signed-native, f.ndim::32-signed-native,
        f.code::8, f.bits::8, f.lanes::16-native, f.shape::64-native, f.strides::64-native, f.byte_offset::64-native>>
    end

    def size(:versioned), do: 80
    def size(:legacy), do: 64

    @doc "Reads n bytes at an address that is known to be live."
    def read(address, n) do
      TensorBlob.from_blob(%{ptr: address, shape: {n}, dtype: :uint8}, owner: :none) |> Tensor.to_binary()
    end

    @doc """
    Writes a managed tensor into a new tensor's memory, with shape and strides
    arrays after it (nil for a NULL pointer). Returns {holder, address}: the
    holder must outlive every use of the address.
    """
    def forge(fields, kind, shape, strides) do
      holder = Tensor.zeros({1024}, :uint8)
      base = TensorBlob.to_blob(holder).ptr
      shape_at = base + 128
      strides_at = base + 128 + 8 * 70
      fields = %{fields | shape: if(shape, do: shape_at, else: 0), strides: if(strides, do: strides_at, else: 0)}
      struct = encode(fields, kind)
      dims = fn list -> for(x <- list || [], into: <<>>, do: <<x::64-signed-native>>) end
      shape_bin = dims.(shape)
      strides_bin = dims.(strides)

      bytes =
        struct <>
          :binary.copy(<<0>>, 128 - byte_size(struct)) <>
          shape_bin <>
          :binary.copy(<<0>>, 8 * 70 - byte_size(shape_bin)) <> strides_bin

      Tensor.write!(holder, bytes <> :binary.copy(<<0>>, 1024 - byte_size(bytes)))
      {holder, base}
    end
  end

  @f32 for x <- 1..24, into: <<>>, do: <<x * 1.0::float-32-native>>

  defp f32s(list), do: for(x <- list, into: <<>>, do: <<x * 1.0::float-32-native>>)
  defp ptr(t), do: TensorBlob.to_blob(t).ptr
  defp t46, do: Tensor.from_binary(@f32, :float32, {4, 6})

  defp bytes_for(dtype, n) do
    size = TensorBlob.to_blob(Tensor.zeros({1}, dtype)).element_size
    # 0/1 bytes are valid for every dtype, bool included
    for i <- 1..(n * size), into: <<>>, do: <<rem(i * 7, 2)>>
  end

  defp assert_badarg(fun, pattern) do
    error = assert_raise ArgumentError, fun
    assert error.message =~ pattern
    error
  end

  defp assert_error(fun, pattern) do
    error = assert_raise TensorBlob.Error, fun
    assert error.message =~ pattern
    error
  end

  # An exported, consumed managed tensor of t: its address and fields.
  defp exported(t, kind) do
    address = t |> DLPack.export(version: kind) |> DLPack.consume()
    {address, Managed.decode(Managed.read(address, Managed.size(kind)), kind)}
  end

  defp settled_stats, do: Lifetime.settled_stats()

  # Waits (up to ~2 s) for a condition on stats/0; returns the last stats.
  defp await(fun), do: Lifetime.await(fun)

  setup do
    # Settle after each test too, so the next test (of any module) does not
    # count this one's garbage as its starting point.
    test_pid = self()

    on_exit(fn ->
      ref = Process.monitor(test_pid)
      receive do: ({:DOWN, ^ref, :process, _, _} -> :ok)
      settled_stats()
    end)

    {:ok, before: settled_stats()}
  end

  describe "round trips" do
    test "every dtype, versioned and legacy: same bytes, same pointer, same layout" do
      for dtype <- TensorBlob.dtypes(), version <- [:versioned, :legacy] do
        bytes = bytes_for(dtype, 6)
        t = Tensor.from_binary(bytes, dtype, {2, 3})
        capsule = DLPack.export(t, version: version)
        assert %DLPack{version: ^version} = capsule

        u = DLPack.import(capsule)
        assert Tensor.to_binary(u) == bytes
        assert ptr(u) == ptr(t)
        assert Tensor.dtype(u) == dtype
        assert Tensor.shape(u) == {2, 3}
        assert Tensor.strides(u) == [3, 1]
        # Our own capsule: the import shares the exported tensor's storage.
        assert Tensor.memory(u) == Tensor.memory(t)

        # By address, the managed tensor is read as any producer's.
        address = DLPack.consume(DLPack.export(t, version: version))
        v = DLPack.import(address, version: version)
        assert Tensor.to_binary(v) == bytes
        assert ptr(v) == ptr(t)
        assert {Tensor.dtype(v), Tensor.shape(v), Tensor.strides(v)} == {dtype, {2, 3}, [3, 1]}
        assert Tensor.memory(v) == :dlpack
      end
    end

    test "complex32 (libtorch's ComplexHalf, ExTorch's :complex_half) is kDLComplex of 32 bits" do
      # Two float16 per element: 1+2i, -0.5+0i.
      bytes = <<1.0::float-16-native, 2.0::float-16-native, -0.5::float-16-native, 0.0::float-16-native>>
      t = Tensor.from_binary(bytes, :complex_half, {2})
      assert Tensor.dtype(t) == :complex32
      {address, f} = exported(t, :versioned)
      assert {f.code, f.bits, f.lanes} == {5, 32, 1}
      u = DLPack.import(address)
      assert Tensor.dtype(u) == :complex32
      assert Tensor.to_binary(u) == bytes
      assert inspect(u) =~ "[1.0+2.0i, -0.5+0.0i]"
    end

    test "the export describes the tensor: DLPack 1.3, codes, shape, strides" do
      t = t46()
      {address, f} = exported(t, :versioned)
      assert {f.major, f.minor} == {1, 3}
      assert f.flags == 0
      assert f.ctx == address
      assert f.data == ptr(t)
      assert {f.device, f.device_id, f.ndim} == {1, 0, 2}
      assert {f.code, f.bits, f.lanes} == {2, 32, 1}
      assert f.byte_offset == 0
      assert Managed.read(f.shape, 16) == <<4::64-native, 6::64-native>>
      assert Managed.read(f.strides, 16) == <<6::64-native, 1::64-native>>
      assert Tensor.to_binary(DLPack.import(address)) == @f32

      {address, f} = exported(t, :legacy)
      assert f.ctx == address
      assert {f.data, f.device, f.ndim, f.code, f.bits} == {ptr(t), 1, 2, 2, 32}
      assert Tensor.to_binary(DLPack.import(address, version: :legacy)) == @f32
    end

    test "transposed and narrowed tensors keep their strides and pointer" do
      t = t46()
      view = t |> Tensor.narrow(0, 1, 2) |> Tensor.narrow(1, 2, 3) |> Tensor.transpose(0, 1)

      for version <- [:versioned, :legacy] do
        u = view |> DLPack.export(version: version) |> DLPack.import()
        assert Tensor.shape(u) == {3, 2}
        assert Tensor.strides(u) == [1, 6]
        assert ptr(u) == ptr(t) + (6 + 2) * 4
        assert Tensor.to_binary(u) == Tensor.to_binary(view)
        assert Tensor.to_binary(u) == f32s([9, 15, 10, 16, 11, 17])
      end
    end

    test "empty and 0-d tensors" do
      empty = Tensor.zeros({0, 3}, :float32)
      {address, f} = exported(empty, :versioned)
      # The spec asks for NULL data when there are no elements.
      assert f.data == 0
      u = DLPack.import(address)
      assert Tensor.shape(u) == {0, 3}
      assert Tensor.to_binary(u) == ""

      scalar = Tensor.from_binary(<<42::64-signed-native>>, :int64, {})
      u = scalar |> DLPack.export() |> DLPack.import()
      assert Tensor.shape(u) == {}
      assert Tensor.to_binary(u) == <<42::64-signed-native>>
      assert ptr(u) == ptr(scalar)
    end

    test "export and import share memory both ways" do
      t = t46()
      u = t |> DLPack.export() |> DLPack.import()
      Tensor.write!(u, :binary.copy(<<0::float-32-native>>, 24))
      assert Tensor.to_binary(t) == :binary.copy(<<0::float-32-native>>, 24)
      Tensor.write!(t, @f32)
      assert Tensor.to_binary(u) == @f32
    end

    test "a capsule is a %DLPack{} or its bare ref; an Erlang caller gets the ref" do
      t = t46()
      capsule = DLPack.export(t)
      assert is_reference(capsule.ref)
      assert Tensor.to_binary(DLPack.import(capsule.ref)) == @f32
      assert :tensor_blob.dlpack_version(:tensor_blob.to_dlpack(Tensor.ref(t))) == :versioned
    end
  end

  describe "consuming" do
    test "consume returns an address once; a second consume raises" do
      capsule = DLPack.export(t46())
      address = DLPack.consume(capsule)
      assert is_integer(address) and address > 0 and rem(address, 8) == 0
      assert_badarg(fn -> DLPack.consume(capsule) end, "already consumed")
      assert_badarg(fn -> DLPack.import(capsule) end, "already consumed")
      assert Tensor.to_binary(DLPack.import(address)) == @f32
    end

    test "import consumes the capsule" do
      capsule = DLPack.export(t46())
      _ = DLPack.import(capsule)
      assert_badarg(fn -> DLPack.import(capsule) end, "capsule: already consumed")
      assert_badarg(fn -> DLPack.consume(capsule) end, "already consumed")
    end

    test "of many processes consuming one capsule, exactly one gets it", %{before: before} do
      t = t46()

      for _ <- 1..20 do
        capsule = DLPack.export(t)

        results =
          1..8
          |> Enum.map(fn _ ->
            Task.async(fn ->
              try do
                {:ok, Tensor.to_binary(DLPack.import(capsule))}
              rescue
                e in ArgumentError -> {:error, e.message}
              end
            end)
          end)
          |> Task.await_many()

        assert Enum.count(results, &match?({:ok, @f32}, &1)) == 1
        assert Enum.count(results, &match?({:error, "capsule: already consumed"}, &1)) == 7
      end

      t = nil
      _ = t
      assert Lifetime.await_stats(before) == before
    end
  end

  describe "lifetimes and exact-once deleters" do
    test "stats count live exports until their deleter runs", %{before: before} do
      t = t46()
      capsule = DLPack.export(t)
      assert TensorBlob.stats().capsules == before.capsules + 1
      u = DLPack.import(DLPack.consume(capsule))
      # The managed tensor lives until libtorch frees the imported storage.
      assert TensorBlob.stats().capsules == before.capsules + 1
      slice = Tensor.narrow(u, 0, 1, 1)
      u = nil
      _ = u
      Lifetime.churn()
      assert TensorBlob.stats().capsules == before.capsules + 1
      assert Tensor.to_binary(slice) == binary_part(@f32, 24, 24)
      slice = nil
      _ = {slice, capsule, t}
      assert Lifetime.await_stats(before) == before
    end

    test "our own capsule, imported as it is, gives the exported tensor back and releases the managed tensor at once",
         %{before: before} do
      slice =
        Lifetime.in_process(fn ->
          t = t46()
          assert DLPack.import(DLPack.export(t)) == t
          assert TensorBlob.stats().capsules == before.capsules
          # The capsule alone keeps its tensor: imported after that tensor
          # was dropped and collected, it still reads the bytes.
          capsule = Lifetime.in_process(fn -> DLPack.export(t46()) end)
          Lifetime.churn()
          Tensor.narrow(DLPack.import(capsule), 0, 1, 1)
        end)

      # The exporting tensor, its capsule and the import are gone: the
      # slice's storage keeps the bytes.
      Lifetime.churn()
      assert Tensor.to_binary(slice) == binary_part(@f32, 24, 24)
      assert Tensor.memory(slice) == :owned
      slice = nil
      _ = slice
      assert Lifetime.await_stats(before) == before
    end

    test "streams: a CPU tensor takes none; values are checked before anything is made", %{before: before} do
      t = t46()
      assert_badarg(fn -> DLPack.export(t, stream: 1) end, "stream: a CPU tensor has no stream")
      assert_badarg(fn -> DLPack.export(t, stream: -1) end, "stream: a CPU tensor has no stream")
      assert_badarg(fn -> DLPack.export(t, stream: :default) end, "stream: expected an integer")
      assert t |> DLPack.export(stream: nil) |> DLPack.import() |> Tensor.to_binary() == @f32
      # The import of a CPU capsule with a stream: refused before the capsule
      # is taken, so it stays armed and imports afterwards.
      for stream <- [0, 1, 2, -1, 7] do
        capsule = DLPack.export(t)

        error = assert_raise ArgumentError, fn -> DLPack.import(capsule, stream: stream) end

        assert error.message ==
                 "stream: a kDLCPU tensor has no stream (the array API takes none for CPU memory), " <>
                   "got #{stream}; the capsule is still armed"

        assert Tensor.to_binary(DLPack.import(capsule)) == @f32
      end

      # A stream that is no integer is refused before the capsule is taken.
      capsule = DLPack.export(t)
      assert_badarg(fn -> DLPack.import(capsule, stream: "s") end, "stream: expected an integer")
      assert Tensor.to_binary(DLPack.import(capsule)) == @f32
      _ = t
      assert Lifetime.await_stats(before) == before
    end

    test "a capsule collected unconsumed frees its managed tensor", %{before: before} do
      Lifetime.in_process(fn ->
        t = t46()
        # Kept until counted: a collection in between would free them early.
        capsules = for v <- [:versioned, :legacy], _ <- 1..50, do: DLPack.export(t, version: v)
        assert TensorBlob.stats().capsules >= before.capsules + 100
        assert length(capsules) == 100
        :ok
      end)

      assert Lifetime.await_stats(before) == before
    end

    test "export in a process that exits, import elsewhere, after GC and churn", %{before: before} do
      bytes = for i <- 0..4095, into: <<>>, do: <<i::32-native>>

      capsule =
        Lifetime.in_process(fn ->
          t = Tensor.from_binary(bytes, :int32, {64, 64})
          t |> Tensor.narrow(0, 8, 4) |> DLPack.export()
        end)

      address =
        Lifetime.in_process(fn ->
          t = Tensor.from_binary(bytes, :int32, {64, 64})
          t |> Tensor.transpose(0, 1) |> DLPack.export(version: :legacy) |> DLPack.consume()
        end)

      Lifetime.churn()
      # The unconsumed capsule keeps its tensor (an import of it gives that
      # tensor back); the consumed export keeps only the memory.
      assert await(&(&1.tensors == before.tensors + 1)) ==
               %{before | capsules: before.capsules + 2, tensors: before.tensors + 1}

      rows = Lifetime.in_process(fn -> DLPack.import(capsule) end)
      cols = Task.await(Task.async(fn -> DLPack.import(address, version: :legacy) end))
      Lifetime.churn()

      assert Tensor.to_binary(rows) == binary_part(bytes, 8 * 64 * 4, 4 * 64 * 4)
      assert Tensor.to_binary(cols) == for(c <- 0..63, r <- 0..63, into: <<>>, do: <<r * 64 + c::32-native>>)

      rows = nil
      cols = nil
      capsule = nil
      _ = {rows, cols, capsule}
      assert Lifetime.await_stats(before) == before
    end

    test "dropping either side first is safe", %{before: before} do
      for order <- [:original_first, :import_first] do
        {t, u} =
          Lifetime.in_process(fn ->
            t = t46()
            {t, t |> DLPack.export() |> DLPack.import()}
          end)

        keep = if order == :original_first, do: u, else: t
        t = nil
        u = nil
        _ = {t, u}
        Lifetime.churn()
        assert Tensor.to_binary(keep) == @f32
        keep = nil
        _ = keep
        assert Lifetime.await_stats(before) == before
      end
    end
  end

  describe "read-only" do
    test "a read_only export imports as a tensor that write! refuses, slices too" do
      t = t46()
      {address, f} = exported_read_only(t)
      assert f.flags == 1
      u = DLPack.import(address)
      assert Tensor.to_binary(u) == @f32
      assert_badarg(fn -> Tensor.write!(u, @f32) end, "tensor: read-only")
      assert_badarg(fn -> u |> Tensor.narrow(0, 1, 1) |> Tensor.write!(binary_part(@f32, 0, 24)) end, "read-only")
      assert_badarg(fn -> u |> Tensor.transpose(0, 1) |> Tensor.write!(@f32) end, "read-only")
      # The exporter's own tensor stays writable.
      assert Tensor.write!(t, @f32) == t
      assert Tensor.to_binary(u) == @f32
    end

    test "a read-only import is re-exported read-only, and never as legacy" do
      u = t46() |> DLPack.export(read_only: true) |> DLPack.import()
      again = u |> Tensor.narrow(0, 0, 2) |> DLPack.export() |> DLPack.import()
      assert_badarg(fn -> Tensor.write!(again, binary_part(@f32, 0, 48)) end, "read-only")
      assert_badarg(fn -> DLPack.export(u, version: :legacy) end, "version: the tensor is read-only")
      assert_badarg(fn -> DLPack.export(t46(), version: :legacy, read_only: true) end, "read_only: a legacy")
    end

    test "import with read_only: true makes the tensor read-only" do
      for version <- [:versioned, :legacy] do
        u = t46() |> DLPack.export(version: version) |> DLPack.import(read_only: true)
        assert_badarg(fn -> Tensor.write!(u, @f32) end, "read-only")
      end

      writable = t46() |> DLPack.export() |> DLPack.import(read_only: false)
      assert Tensor.write!(writable, @f32) == writable
    end

    defp exported_read_only(t) do
      address = t |> DLPack.export(read_only: true) |> DLPack.consume()
      {address, Managed.decode(Managed.read(address, 80), :versioned)}
    end
  end

  describe "max_version negotiation" do
    test "as Python's __dlpack__: 1.x versioned, 0.x or legacy legacy, above 1 raises" do
      t = t46()
      assert DLPack.export(t).version == :versioned
      assert DLPack.export(t, max_version: {1, 0}).version == :versioned
      assert DLPack.export(t, max_version: {1, 3}).version == :versioned
      assert DLPack.export(t, max_version: {1, 99}).version == :versioned
      assert DLPack.export(t, max_version: {0, 8}).version == :legacy
      assert DLPack.export(t, max_version: :legacy).version == :legacy
      assert DLPack.export(t, max_version: nil).version == :versioned
      assert DLPack.export(t, version: :legacy).version == :legacy
      assert DLPack.export(t, version: :versioned, max_version: {1, 1}).version == :versioned
      assert DLPack.export(t, version: :legacy, max_version: {0, 8}).version == :legacy

      assert_error(fn -> DLPack.export(t, max_version: {2, 0}) end, ~r/max_version: \{2, 0\}/)
      assert_error(fn -> DLPack.export(t, max_version: {3, 1}) end, "major version 3")
    end

    test "bad options raise ArgumentError naming the option" do
      t = t46()
      assert_badarg(fn -> DLPack.export(t, max_version: {-1, 0}) end, "max_version")
      assert_badarg(fn -> DLPack.export(t, max_version: "1.0") end, "max_version")
      assert_badarg(fn -> DLPack.export(t, max_version: {1}) end, "max_version")
      assert_badarg(fn -> DLPack.export(t, version: :v2) end, "version")
      assert_badarg(fn -> DLPack.export(t, version: :versioned, max_version: {0, 8}) end, "contradicts")
      assert_badarg(fn -> DLPack.export(t, read_only: :yes) end, "read_only")
      assert_badarg(fn -> DLPack.export(t, bogus: 1) end, "bogus")
      assert_badarg(fn -> DLPack.export(t, [:versioned]) end, "options")
      assert_badarg(fn -> DLPack.export(:nope) end, "tensor")
      assert_badarg(fn -> DLPack.import(DLPack.export(t), version: :v0) end, "version")
      assert_badarg(fn -> DLPack.import(DLPack.export(t), read_only: 1) end, "read_only")
      assert_badarg(fn -> DLPack.import(DLPack.export(t), version: :legacy) end, "the capsule holds a versioned")
    end
  end

  describe "raw addresses" do
    test "bad addresses that can be refused without reading" do
      assert_badarg(fn -> DLPack.import(0) end, "address: NULL")
      assert_badarg(fn -> DLPack.import(12) end, ~r/address: 12 is not aligned/)
      assert_badarg(fn -> DLPack.import(-8) end, "capsule")
      assert_badarg(fn -> DLPack.import(1.5) end, "capsule")
      assert_badarg(fn -> DLPack.import(:capsule) end, "capsule")
      assert_badarg(fn -> DLPack.import(Tensor.ref(t46())) end, "capsule")
      assert_badarg(fn -> DLPack.consume(Tensor.ref(t46())) end, "capsule")
      assert_badarg(fn -> DLPack.consume(123) end, "capsule")
    end

    test "an address this library handed out is imported once; a second import is refused", %{before: before} do
      t = t46()
      a = DLPack.consume(DLPack.export(t))
      u = DLPack.import(a)
      error = assert_badarg(fn -> DLPack.import(a) end, "not a managed tensor this library handed out")
      assert error.message =~ "nothing in it was called"
      assert error.message =~ "unsafe_address: true"
      # The same once the first import is freed (the address may be reused
      # by then): still refused, never read.
      assert Tensor.to_binary(u) == @f32
      u = nil
      _ = u
      :tensor_blob_test_util.gc_all()
      assert_badarg(fn -> DLPack.import(a) end, "not a managed tensor this library handed out")

      # Consumed and deleted by its consumer (the DLPack rule): gone from
      # the library's list too.
      b = DLPack.consume(DLPack.export(t, version: :legacy))
      {:ok, _} = {:ok, DLPack.import(b, version: :legacy)}
      assert_badarg(fn -> DLPack.import(b, version: :legacy) end, "not a managed tensor this library handed out")

      t = nil
      _ = t
      assert Lifetime.await_stats(before) == before
    end

    test "an address of another producer needs unsafe_address: true, and is left alone without it" do
      t = t46()
      {address, v} = exported(t, :versioned)
      {holder, forged} = Managed.forge(v, :versioned, [4, 6], [6, 1])
      error = assert_badarg(fn -> DLPack.import(forged) end, "not a managed tensor this library handed out")
      assert error.message =~ "nothing in it was called"
      # Nothing was called: the real export is still held, and imports once.
      assert Tensor.to_binary(DLPack.import(address)) == @f32
      assert Tensor.shape(holder) == {1024}
      assert_badarg(fn -> DLPack.import(forged, unsafe_address: :yes) end, "unsafe_address: expected a boolean")
    end

    test "an address this library handed out is read as what it holds; another version is refused untouched",
         %{before: before} do
      t = t46()

      for {held, other} <- [versioned: :legacy, legacy: :versioned] do
        address = t |> DLPack.export(version: held) |> DLPack.consume()
        held_out = TensorBlob.stats().capsules
        # The version recorded when the address was handed out decides:
        # the other one is refused before anything in it is read.
        error =
          assert_badarg(
            fn -> DLPack.import(address, version: other) end,
            "version: address #{address} holds a #{held} managed tensor"
          )

        assert error.message =~ "nothing in it was called"
        assert TensorBlob.stats().capsules == held_out
        # Still handed out: the right version takes it, once.
        assert Tensor.to_binary(DLPack.import(address, version: held)) == @f32

        # With no version, it is read as it was handed out.
        address = t |> DLPack.export(version: held) |> DLPack.consume()
        assert Tensor.to_binary(DLPack.import(address)) == @f32
      end

      t = nil
      _ = t
      assert Lifetime.await_stats(before) == before
    end

    test "a legacy export whose data pointer reads as a plausible version is not read as versioned",
         %{before: before} do
      # Read as versioned, a legacy DLManagedTensor's data pointer is the
      # version: 0x10_0000_0008 reads as DLPack 8.16 (a major the spec says
      # to hand back to its deleter), and the "deleter" is the DLTensor's
      # ndim and dtype: the VM died calling it. The memory is never read
      # here (nothing maps that address).
      ptr = 0x10_0000_0008
      t = TensorBlob.from_blob(%{ptr: ptr, shape: {2}, dtype: :float32}, owner: :none)
      address = t |> DLPack.export(version: :legacy) |> DLPack.consume()
      u = DLPack.import(address)
      assert {Tensor.dtype(u), Tensor.shape(u), TensorBlob.to_blob(u).ptr} == {:float32, {2}, ptr}

      address = t |> DLPack.export(version: :legacy) |> DLPack.consume()
      assert_badarg(fn -> DLPack.import(address, version: :versioned) end, "holds a legacy managed tensor")
      assert TensorBlob.to_blob(DLPack.import(address, version: :legacy)).ptr == ptr

      {t, u} = {nil, nil}
      _ = {t, u}
      assert Lifetime.await_stats(before) == before
    end
  end

  # Forged managed tensors: a real export's fields, with one changed. With the
  # real deleter, a refusal must release the real export exactly once (the
  # capsules count shows it); with a NULL deleter nothing is ever called.
  describe "forged managed tensors" do
    # Made in the test, not in a setup: ExUnit may hold a test's context
    # (and so its tensors) after the test ends.
    defp forged_setup(before) do
      t = t46()
      {v_address, v} = exported(t, :versioned)
      {l_address, l} = exported(t, :legacy)
      %{t: t, v: v, l: l, v_address: v_address, l_address: l_address, before: before}
    end

    # Imports a forged variant; returns the raised exception.
    defp forged_refusal(fields, kind, shape, strides, exception) do
      {holder, address} = Managed.forge(fields, kind, shape, strides)
      error = assert_raise exception, fn -> DLPack.import(address, version: kind, unsafe_address: true) end
      # The forged struct must outlive the import call.
      assert Tensor.shape(holder) == {1024}
      error
    end

    defp finish(ctx, released) do
      # What forged refusals did not release, a real import does.
      unless :versioned in released, do: DLPack.import(ctx.v_address)
      unless :legacy in released, do: DLPack.import(ctx.l_address, version: :legacy)
      # Only ctx.t is left.
      expected = %{ctx.before | tensors: ctx.before.tensors + 1}
      assert Lifetime.await_stats(expected) == expected
      assert Tensor.to_binary(ctx.t) == @f32
    end

    test "a kDLCUDA tensor: TensorBlob.Error, the deleter is called once", %{before: before} do
      ctx = forged_setup(before)

      # Host memory labelled kDLCUDA: a libtorch without CUDA refuses the
      # device; one with CUDA asks the runtime, which says it is host memory.
      cuda? = TensorBlob.CUDA.runtime().libtorch

      for {kind, f} <- [versioned: ctx.v, legacy: ctx.l] do
        if cuda? do
          error = forged_refusal(%{f | device: 2, device_id: 1}, kind, [4, 6], [6, 1], ArgumentError)

          assert error.message =~
                   ~r/no CUDA device owns .*, declared as memory of CUDA device 1|CUDA device 1 does not exist/

          assert error.message =~ "the producer's deleter was called"
        else
          error = forged_refusal(%{f | device: 2, device_id: 1}, kind, [4, 6], [6, 1], TensorBlob.Error)
          assert error.message =~ "kDLCUDA"
          assert error.message =~ "built without CUDA"
          assert error.message =~ "the producer's deleter was called"
        end
      end

      finish(ctx, [:versioned, :legacy])
    end

    test "other devices, known and unknown", %{before: before} do
      ctx = forged_setup(before)
      error = forged_refusal(%{ctx.v | device: 10}, :versioned, [4, 6], [6, 1], TensorBlob.Error)
      assert error.message =~ "kDLROCM"
      assert error.message =~ "only kDLCPU"
      assert TensorBlob.stats().capsules == ctx.before.capsules + 1

      # An unknown code in a legacy tensor: not recognized, nothing called.
      error = forged_refusal(%{ctx.l | device: 99}, :legacy, [4, 6], [6, 1], ArgumentError)
      assert error.message =~ "device: unknown DLPack device type 99"
      assert error.message =~ "nothing in it was called"
      assert TensorBlob.stats().capsules == ctx.before.capsules + 1
      finish(ctx, [:versioned])
    end

    test "kDLCUDAHost is host memory, a CPU tensor; kDLCUDAManaged needs CUDA and managed memory",
         %{before: before} do
      ctx = forged_setup(before)
      # Pinned host memory is read by the host: a CPU tensor. (Plain host
      # memory so labelled is host-readable too; where there is a GPU, the
      # runtime refuses device memory only.)
      {holder, address} = Managed.forge(%{ctx.v | device: 3, device_id: 0}, :versioned, [4, 6], [6, 1])
      t = DLPack.import(address, unsafe_address: true)
      assert {Tensor.device(t), Tensor.memory(t)} == {:cpu, :dlpack}
      assert Tensor.to_binary(t) == @f32
      # Re-exported as what libtorch sees.
      assert DLPack.info(DLPack.export(t)).device_type == :cpu
      t = nil
      _ = t
      # t's release, whenever the collector runs it, calls the deleter of the
      # forged struct, which lives in holder: holder must outlive it.
      assert await(&(&1.capsules == ctx.before.capsules + 1)).capsules == ctx.before.capsules + 1
      assert Tensor.shape(holder) == {1024}

      # Managed memory is a CUDA tensor of its device: a libtorch without
      # CUDA refuses it; one with CUDA asks the runtime, which says host.
      error =
        if TensorBlob.CUDA.runtime().libtorch do
          error = forged_refusal(%{ctx.l | device: 13, device_id: 0}, :legacy, [4, 6], [6, 1], ArgumentError)
          assert error.message =~ ~r/host memory, labelled kDLCUDAManaged|CUDA device 0 does not exist/
          error
        else
          error = forged_refusal(%{ctx.l | device: 13, device_id: 0}, :legacy, [4, 6], [6, 1], TensorBlob.Error)
          assert error.message =~ "a kDLCUDAManaged tensor (device 0): this libtorch was built without CUDA"
          error
        end

      assert error.message =~ "the producer's deleter was called"
      finish(ctx, [:versioned, :legacy])
    end

    @tag :cuda
    test "with a GPU: device memory labelled kDLCUDAHost or kDLCPU is refused, released once", %{before: before} do
      ctx = forged_setup(before)
      g = Tensor.to_device(t46(), {:cuda, 0})
      device_ptr = TensorBlob.to_blob(g).ptr
      error = forged_refusal(%{ctx.v | device: 3, data: device_ptr}, :versioned, [4, 6], [6, 1], ArgumentError)
      assert error.message =~ "memory of CUDA device 0, labelled kDLCUDAHost"
      assert error.message =~ "the producer's deleter was called"
      error = forged_refusal(%{ctx.l | device: 1, data: device_ptr}, :legacy, [4, 6], [6, 1], ArgumentError)
      assert error.message =~ "memory of CUDA device 0, declared as CPU memory"
      g = nil
      _ = g
      finish(ctx, [:versioned, :legacy])
    end

    test "streams: an import of host memory takes none, or checks it; the deleter runs once", %{before: before} do
      ctx = forged_setup(before)
      # A kDLCPU tensor has no stream.
      {holder, address} = Managed.forge(ctx.v, :versioned, [4, 6], [6, 1])
      error = assert_raise ArgumentError, fn -> DLPack.import(address, stream: 1, unsafe_address: true) end
      assert error.message =~ "stream: a kDLCPU tensor has no stream"
      assert error.message =~ "the producer's deleter was called"

      # 0 is ambiguous for CUDA streams: refused, released.
      {holder2, address} = Managed.forge(%{ctx.l | device: 3}, :legacy, [4, 6], [6, 1])

      error =
        assert_raise ArgumentError, fn -> DLPack.import(address, version: :legacy, stream: 0, unsafe_address: true) end

      assert error.message =~ "stream: 0 is ambiguous for CUDA"
      assert error.message =~ "the producer's deleter was called"

      # Page-locked memory waits on the calling thread for the producer's
      # stream (1, the legacy default stream), through the runtime the
      # device table names for kDLCUDAHost: CUDA's. A build without CUDA
      # runtime calls refuses the stream; one with them waits, or, with no
      # GPU to wait on, says so; the deleter runs once either way.
      # (The forged struct carries the deleter and context of an export of
      # its own, which that deleter releases.)
      {_, v3} = exported(ctx.t, :versioned)
      {holder3, address} = Managed.forge(%{v3 | device: 3}, :versioned, [4, 6], [6, 1])
      cuda = TensorBlob.CUDA.runtime()

      cond do
        not cuda.built ->
          error = assert_raise TensorBlob.Error, fn -> DLPack.import(address, stream: 1, unsafe_address: true) end
          assert error.message =~ "stream: this build has no CUDA runtime calls (TB_CUDA=0), so it cannot order work"
          assert error.message =~ "the producer's deleter was called"

        cuda.devices == 0 ->
          error = assert_raise TensorBlob.Error, fn -> DLPack.import(address, stream: 1, unsafe_address: true) end
          assert error.message =~ "stream: waiting for the producer's stream failed"
          assert error.message =~ "the producer's deleter was called"

        true ->
          assert address |> DLPack.import(stream: 1, unsafe_address: true) |> Tensor.to_binary() == @f32
      end

      assert {Tensor.shape(holder), Tensor.shape(holder2), Tensor.shape(holder3)} == {{1024}, {1024}, {1024}}
      finish(ctx, [:versioned, :legacy])
    end

    test "versions: a later major is released unread, an impossible one is left alone", %{before: before} do
      ctx = forged_setup(before)
      error = forged_refusal(%{ctx.v | major: 0, minor: 0}, :versioned, [4, 6], [6, 1], ArgumentError)
      assert error.message =~ "version: the address does not hold"
      assert error.message =~ "nothing in it was called"
      assert TensorBlob.stats().capsules == ctx.before.capsules + 2

      error = forged_refusal(%{ctx.v | major: 2, minor: 0, ndim: -1}, :versioned, nil, nil, TensorBlob.Error)
      assert error.message =~ "DLPack 2.0 is not supported"
      assert error.message =~ "the producer's deleter was called"
      assert TensorBlob.stats().capsules == ctx.before.capsules + 1

      # Any 1.x minor is read.
      {holder, address} = Managed.forge(%{ctx.v | minor: 7, deleter: 0}, :versioned, [4, 6], [6, 1])
      assert Tensor.to_binary(DLPack.import(address, unsafe_address: true)) == @f32
      assert Tensor.shape(holder) == {1024}
      finish(ctx, [:versioned])
    end

    test "dtypes: unknown codes, vector types, codes with no dtype here", %{before: before} do
      ctx = forged_setup(before)
      error = forged_refusal(%{ctx.v | code: 42}, :versioned, [4, 6], [6, 1], ArgumentError)
      assert error.message =~ "dtype: unknown DLPack type code 42"
      assert error.message =~ "the producer's deleter was called"

      error = forged_refusal(%{ctx.l | lanes: 4}, :legacy, [4, 6], [6, 1], TensorBlob.Error)
      assert error.message =~ "4 lanes"
      finish(ctx, [:versioned, :legacy])
    end

    test "dtypes the table or the linked libtorch lack", %{before: before} do
      ctx = forged_setup(before)
      error = forged_refusal(%{ctx.v | code: 3, bits: 64}, :versioned, [4, 6], [6, 1], TensorBlob.Error)
      assert error.message =~ "kDLOpaqueHandle"

      if :uint16 in TensorBlob.dtypes() do
        DLPack.import(ctx.l_address, version: :legacy)
      else
        error = forged_refusal(%{ctx.l | code: 1, bits: 16}, :legacy, [4, 6], [6, 1], TensorBlob.Error)
        assert error.message =~ "uint16 is not supported by the linked libtorch"
      end

      finish(ctx, [:versioned, :legacy])
    end

    test "shape, strides, ndim, data, flags", %{before: before} do
      ctx = forged_setup(before)
      error = forged_refusal(%{ctx.v | ndim: 65}, :versioned, [4, 6], [6, 1], ArgumentError)
      assert error.message =~ "ndim: 65 is out of range"
      assert TensorBlob.stats().capsules == ctx.before.capsules + 1

      v = exported(ctx.t, :versioned) |> elem(1)
      error = forged_refusal(v, :versioned, [4, -6], [6, 1], ArgumentError)
      assert error.message =~ ~r/shape: dimensions must be non-negative in \{4, ?-6\}/

      v = exported(ctx.t, :versioned) |> elem(1)
      error = forged_refusal(v, :versioned, [4, 6], [6, -1], ArgumentError)
      assert error.message =~ ~r/strides: strides must be non-negative/

      v = exported(ctx.t, :versioned) |> elem(1)
      error = forged_refusal(v, :versioned, [0x7FFFFFFFFFFFFFFF, 2], nil, ArgumentError)
      assert error.message =~ "shape: the number of elements overflows"

      v = exported(ctx.t, :versioned) |> elem(1)
      error = forged_refusal(%{v | data: v.data + 2}, :versioned, [4, 6], [6, 1], ArgumentError)
      assert error.message =~ "data: the pointer is not aligned"

      v = exported(ctx.t, :versioned) |> elem(1)
      error = forged_refusal(%{v | data: 0}, :versioned, [4, 6], [6, 1], ArgumentError)
      assert error.message =~ "data: a null pointer"

      v = exported(ctx.t, :versioned) |> elem(1)
      error = forged_refusal(v, :versioned, nil, [6, 1], ArgumentError)
      assert error.message =~ "shape: NULL with ndim 2"

      v = exported(ctx.t, :versioned) |> elem(1)
      error = forged_refusal(%{v | byte_offset: 0xFFFFFFFFFFFFFFF0}, :versioned, [4, 6], [6, 1], ArgumentError)
      assert error.message =~ "byte_offset"

      v = exported(ctx.t, :versioned) |> elem(1)
      error = forged_refusal(%{v | flags: 256}, :versioned, [4, 6], [6, 1], TensorBlob.Error)
      assert error.message =~ "flags: 0x100"

      # Every refusal above released its export exactly once.
      finish(ctx, [:versioned])
    end

    test "NULL strides, byte_offset, size-1 strides, empty tensors with NULL data", %{before: before} do
      ctx = forged_setup(before)
      v = ctx.v

      # NULL strides: row-major. Its deleter is the real one: released when
      # the imported tensor dies.
      {holder, address} = Managed.forge(v, :versioned, [4, 6], nil)
      u = DLPack.import(address, unsafe_address: true)
      assert Tensor.strides(u) == [6, 1]
      assert Tensor.to_binary(u) == @f32
      u = nil
      _ = u
      assert await(&(&1.capsules == ctx.before.capsules + 1)).capsules == ctx.before.capsules + 1

      # byte_offset: rows 2..3 of the legacy export, with a NULL deleter.
      l = %{ctx.l | deleter: 0}
      {holder2, address2} = Managed.forge(%{l | byte_offset: 2 * 6 * 4}, :legacy, [2, 6], [6, 1])
      u = DLPack.import(address2, version: :legacy, unsafe_address: true)
      assert Tensor.to_binary(u) == binary_part(@f32, 48, 48)
      assert ptr(u) == l.data + 48

      # Size-1 dimensions may have any stride, negative included.
      {holder3, address3} = Managed.forge(l, :legacy, [1, 6], [-7, 1])
      u = DLPack.import(address3, version: :legacy, unsafe_address: true)
      assert Tensor.to_binary(u) == binary_part(@f32, 0, 24)

      # No elements: data may be NULL.
      {holder4, address4} = Managed.forge(%{l | data: 0}, :legacy, [0, 6], [6, 1])
      u = DLPack.import(address4, version: :legacy, unsafe_address: true)
      assert Tensor.shape(u) == {0, 6}
      assert Tensor.to_binary(u) == ""

      # READ_ONLY in a forged struct.
      {holder5, address5} = Managed.forge(%{ctx.v | deleter: 0, flags: 1}, :versioned, [4, 6], [6, 1])

      u = DLPack.import(address5, unsafe_address: true)
      assert_badarg(fn -> Tensor.write!(u, @f32) end, "read-only")

      u = nil
      _ = u
      Lifetime.churn()
      # The holders outlive every tensor imported from them.
      for h <- [holder, holder2, holder3, holder4, holder5], do: assert(Tensor.shape(h) == {1024})
      finish(ctx, [:versioned])
    end
  end

  describe "defer_release" do
    test "the producer's deleter runs on the release thread, once, after the last tensor is gone" do
      Lifetime.assert_last_user(
        fn ->
          tensor = Tensor.from_binary(<<1, 2, 3, 4>>, :uint8, {4})
          address = tensor |> DLPack.export(version: :legacy) |> DLPack.consume()
          DLPack.import(address, defer_release: true)
        end,
        fn t, start ->
          assert Tensor.to_binary(t) == <<1, 2, 3, 4>>
          assert %{capsules: capsules, deferred: deferred} = TensorBlob.stats()
          assert {capsules, deferred} == {start.capsules + 1, start.deferred + 1}
        end
      )
    end

    test "a refused import releases on the release thread too; a bad value raises" do
      start = Lifetime.settled_stats()
      address = Tensor.zeros({2}, :float32) |> DLPack.export(version: :legacy) |> DLPack.consume()

      assert_raise ArgumentError, ~r/defer_release: expected a boolean/, fn ->
        DLPack.import(address, defer_release: :yes)
      end

      assert DLPack.import(address, defer_release: true) |> Tensor.shape() == {2}
      assert Lifetime.await_stats(start) == start
    end
  end

  # The slots a tensor crosses one Python evaluation in (TensorBlob.Python
  # names the slot in the code it evaluates; Python's side is tested in
  # python_in_vm_test.exs).
  describe "Python slots" do
    defp slot_error(fun) do
      assert {:badarg, message} = catch_error(fun.())
      message
    end

    test "python_bind binds only a libpython loaded in this process, by name; anything else is refused" do
      # The NIF library as this VM loaded it (TENSOR_BLOB_NIF may name
      # another build than priv's).
      [nif] =
        for line <- File.read!("/proc/self/maps") |> String.split("\n"),
            path = line |> String.split(" ", trim: true) |> Enum.at(5),
            path && String.ends_with?(path, "/tensor_blob_nif.so"),
            uniq: true,
            do: path

      # A library that exists and is not loaded (a copy of the NIF's file,
      # another inode): the dynamic linker answers RTLD_NOLOAD with
      # nothing, and no error text.
      unloaded = Path.join(System.tmp_dir!(), "tensor_blob_not_loaded_#{System.unique_integer([:positive])}.so")
      File.cp!(nif, unloaded)
      on_exit(fn -> File.rm(unloaded) end)

      for {library, message} <- [
            {unloaded, ~r/is not loaded in this OS process/},
            {%{"PyCapsule_New" => 4096}, ~r/^library: expected the path of the interpreter's libpython/},
            {140_000_000, ~r/^library: expected the path/},
            {"", ~r/^library: expected the path/},
            {"/nonexistent/libpython3.so", ~r/^library: \/nonexistent\/libpython3.so is not loaded in this OS process/},
            # Loaded, and no Python: the library's own file.
            {nif, ~r/has no PyCapsule_IsValid, so it is not a Python interpreter's C API/}
          ] do
        assert {:badarg, said} = catch_error(:tensor_blob_python.python_bind(library))
        assert said =~ message

        assert %{reason: :bad_value, argument: :library} =
                 (try do
                    :tensor_blob_python.python_bind(library)
                  catch
                    :error, _ -> :tensor_blob.error_reason(__STACKTRACE__)
                  end)
      end
    end

    test "from_dlpack's defer_release is a boolean, and nothing else" do
      for other <- [:python, :yes, 1] do
        assert %{reason: :bad_value, argument: :defer_release} =
                 slot_error(fn -> :tensor_blob_nif.from_dlpack(0, :undefined, false, :undefined, other) end)
      end
    end

    test "the lowest free slot is given, and given again once closed" do
      {k0, s0} = :tensor_blob_python.python_slot_receive()
      {k1, s1} = :tensor_blob_python.python_slot_receive()
      assert k1 > k0
      # Nothing was put in it: nothing to import.
      assert :tensor_blob_python.python_slot_close(s0) == :undefined
      assert {^k0, s2} = :tensor_blob_python.python_slot_receive()
      for s <- [s1, s2], do: :tensor_blob_python.python_slot_close(s)
      assert slot_error(fn -> :tensor_blob_python.python_slot_close(s1) end) =~ "slot: closed already"
      assert slot_error(fn -> :tensor_blob_python.python_slot_close(make_ref()) end) =~ "slot: expected a Python slot"
    end

    test "a slot closes with none or a module's name to wrap its tensors in, and nothing else" do
      {_k, slot} = :tensor_blob_python.python_slot_receive_many()

      for other <- ["TensorBlob.Tensor", {:struct, Tensor}, 1] do
        assert slot_error(fn -> :tensor_blob_python.python_slot_close(slot, other) end) =~
                 "module: expected none or a module's name, got "
      end

      # Refused before closing: the slot is still open, and Python put nothing.
      assert :tensor_blob_python.python_slot_close(slot, Tensor) == :undefined
    end

    test "a container is described for Python's tree builtin, its tensors exported in the description's order" do
      t = Tensor.from_binary(<<1, 2, 3, 4>>, :uint8, {4})
      u = Tensor.zeros({2}, :float32)
      start = Lifetime.settled_stats()

      # Map keys in the map's own order (term order for a small map:
      # numbers, atoms, binaries); tensors as %Tensor{} or bare.
      container = %{"w" => t, :b => [u, Tensor.ref(t)], -7 => %{}, 1 => []}
      {_k, slot, desc} = :tensor_blob_python.python_slot_export_tree(container, :versioned)
      assert desc == "d4:i-7:d0:i1:l0:a1:bl2:tts1:wt"
      assert TensorBlob.stats().capsules == start.capsules + 3
      assert :tensor_blob_python.python_slot_close(slot) == :ok
      assert Lifetime.await_stats(start) == start

      assert {_, slot, "l0:"} = :tensor_blob_python.python_slot_export_tree([], :writable)
      :tensor_blob_python.python_slot_close(slot)
      assert Tensor.to_binary(t) == <<1, 2, 3, 4>> and Tensor.to_binary(u) == <<0::64>>
    end

    test "a container the description does not take answers other, and nothing is exported" do
      t = Tensor.zeros({1}, :int8)
      start = Lifetime.settled_stats()
      deep = Enum.reduce(1..256, t, fn _, acc -> [acc] end)

      for other <- [
            %{"a" => t, "b" => 3},
            %{Integer.pow(2, 70) => t},
            %{1.5 => t},
            %{nil => t},
            %{true => t},
            %{:é => t},
            %{{:k} => t},
            [t | t],
            [t, %{__struct__: TensorBlob.BlobView, tensor: t}],
            [Map.put(t, :__struct__, URI)],
            deep
          ] do
        assert :tensor_blob_python.python_slot_export_tree(other, :versioned) == :other
      end

      assert {_, slot, _} = :tensor_blob_python.python_slot_export_tree(hd(deep), :versioned)
      :tensor_blob_python.python_slot_close(slot)
      assert Lifetime.await_stats(start) == start
      assert Tensor.to_binary(t) == <<0>>
    end

    test "a container's tensors are checked as each export's are; the first refusal raised, the others released" do
      t = Tensor.zeros({1}, :int8)
      start = Lifetime.settled_stats()

      assert slot_error(fn -> :tensor_blob_python.python_slot_export_tree([t, make_ref()], :versioned) end) =~
               "tensors: expected a tensor"

      for version <- [:v2, "versioned"], container <- [[t], []] do
        assert slot_error(fn -> :tensor_blob_python.python_slot_export_tree(container, version) end) =~
                 "version: expected versioned, legacy or writable"
      end

      # A container, not a lone tensor.
      for lone <- [t, Tensor.ref(t), :t, 3] do
        assert slot_error(fn -> :tensor_blob_python.python_slot_export_tree(lone, :versioned) end) =~
                 "tensors: expected a map or a list of tensors"
      end

      assert Lifetime.await_stats(start) == start
      assert Tensor.to_binary(t) == <<0>>
    end

    test "an export Python never took is released when its slot closes, or is collected unclosed" do
      t = Tensor.from_binary(<<1, 2, 3, 4>>, :uint8, {4})
      start = Lifetime.settled_stats()
      {_k, slot} = :tensor_blob_python.python_slot_export(Tensor.ref(t), :legacy)
      assert TensorBlob.stats().capsules == start.capsules + 1
      assert :tensor_blob_python.python_slot_close(slot) == :ok
      assert TensorBlob.stats().capsules == start.capsules

      # A process that dies holding an open slot: its export is released,
      # and the slot is free again.
      {k, slot} = :tensor_blob_python.python_slot_receive()
      :tensor_blob_python.python_slot_close(slot)
      Lifetime.in_process(fn -> :tensor_blob_python.python_slot_export(Tensor.ref(t), :versioned) end)
      assert Lifetime.await_stats(start) == start
      {^k, slot} = :tensor_blob_python.python_slot_receive()
      :tensor_blob_python.python_slot_close(slot)
      assert Tensor.to_binary(t) == <<1, 2, 3, 4>>
    end

    test "an export is checked as DLPack.export checks it" do
      read_only = t46() |> DLPack.export(read_only: true) |> DLPack.import()

      assert slot_error(fn -> :tensor_blob_python.python_slot_export(Tensor.ref(read_only), :legacy) end) =~
               "read-only"

      assert slot_error(fn -> :tensor_blob_python.python_slot_export(:nope, :legacy) end) =~ "tensor: expected"
      assert slot_error(fn -> :tensor_blob_python.python_slot_export(Tensor.ref(read_only), :new) end) =~ "version:"
    end

    test "a batch of exports in one slot: released when it closes untaken, or when its process dies" do
      ts = for i <- 1..100, do: Tensor.from_binary(<<i, i + 1>>, :uint8, {2})
      start = Lifetime.settled_stats()
      # 100: made on a dirty scheduler.
      {_k, slot} = :tensor_blob_python.python_slot_export_many(Enum.map(ts, &Tensor.ref/1), :writable)
      assert TensorBlob.stats().capsules == start.capsules + 100
      assert :tensor_blob_python.python_slot_close(slot) == :ok
      assert TensorBlob.stats().capsules == start.capsules

      Lifetime.in_process(fn ->
        :tensor_blob_python.python_slot_export_many(Enum.map(Enum.take(ts, 3), &Tensor.ref/1), :legacy)
      end)

      assert Lifetime.await_stats(start) == start

      # An empty batch, and an empty slot for one from Python: nothing put there.
      {_k, slot} = :tensor_blob_python.python_slot_export_many([], :versioned)
      assert :tensor_blob_python.python_slot_close(slot) == :ok
      {_k, slot} = :tensor_blob_python.python_slot_receive_many()
      assert :tensor_blob_python.python_slot_close(slot) == :undefined
      assert Enum.map(ts, &Tensor.to_binary/1) == for(i <- 1..100, do: <<i, i + 1>>)
    end

    test "a batch is checked as each export is: the first refusal raised, the exports before it released" do
      read_only = t46() |> DLPack.export(read_only: true) |> DLPack.import()
      good = Tensor.ref(Tensor.from_binary(<<1, 2>>, :uint8, {2}))
      start = Lifetime.settled_stats()

      for {list, version, reason, argument} <- [
            {[good, :nope], :versioned, :not_a_tensor, :tensor},
            {[good, good, Tensor.ref(read_only)], :writable, :unsupported, :version},
            {[good, Tensor.ref(read_only)], :legacy, :unsupported, :version},
            {[good], :new, :bad_value, :version},
            {:nope, :versioned, :bad_value, :tensors},
            {[good | good], :versioned, :bad_value, :tensors}
          ] do
        assert %{reason: ^reason, argument: ^argument} =
                 (try do
                    :tensor_blob_python.python_slot_export_many(list, version)
                  catch
                    :error, _ -> :tensor_blob.error_reason(__STACKTRACE__)
                  end)
      end

      # writable and versioned take a read-only tensor as the consumer can: versioned keeps the flag.
      {_k, slot} = :tensor_blob_python.python_slot_export_many([Tensor.ref(read_only)], :versioned)
      :tensor_blob_python.python_slot_close(slot)
      assert Lifetime.await_stats(start) == start
    end

    test "every slot at once, then a clear error, and slots again once closed" do
      open = fn ->
        try do
          :tensor_blob_python.python_slot_receive()
        catch
          :error, error -> error
        end
      end

      {slots, [error | _]} =
        Stream.repeatedly(open) |> Enum.take(5000) |> Enum.split_while(&match?({k, _} when is_integer(k), &1))

      assert length(slots) <= 4096 and length(slots) > 4000
      assert {:tensor_blob, message} = error
      assert message =~ "too many exchanges with Python at once: 4096"
      for {_k, s} <- slots, do: :tensor_blob_python.python_slot_close(s)
      {_k, s} = :tensor_blob_python.python_slot_receive()
      :tensor_blob_python.python_slot_close(s)
    end
  end
end
