defmodule TensorBlob.IPCTest do
  # CPU shared memory between OS processes, and what the CUDA paths answer
  # on a machine without a GPU (the :cuda tests run only where one answers).
  use ExUnit.Case, async: false

  alias TensorBlob.{CUDA, DLPack, IPC, Tensor}
  alias TensorBlob.Test.Lifetime

  defp f32s(list), do: for(x <- list, into: <<>>, do: <<x::float-32-native>>)
  defp shm_path(%IPC.Handle{handle: name}), do: "/dev/shm" <> name

  # Runs Erlang code in a second OS process (a fresh BEAM) and returns its output.
  defp in_os_process(code) do
    ebin = Path.dirname(:code.which(:tensor_blob))
    {out, 0} = System.cmd("erl", ["-noshell", "-pa", ebin, "-eval", code <> ", halt()."], stderr_to_stdout: true)
    out
  end

  # Opens a handle in a second OS process (test/support/tensor_blob_ipc_peer.erl)
  # and returns its report: what it read, what a view of the first `view`
  # rows read after the opened tensor was collected and `write` was written
  # through it, and what was left once the view was dropped too.
  defp peer(handle, dtype, shape, view, write, extra \\ %{}) do
    handle = handle |> Map.take([:kind, :handle, :address, :data_size])
    args = Map.merge(%{handle: handle, dtype: dtype, shape: shape, view: view, write: write}, extra)
    encoded = args |> :erlang.term_to_binary() |> Base.encode64()
    ebin = Path.dirname(:code.which(:tensor_blob_ipc_peer))
    call = "tensor_blob_ipc_peer:main(\"#{encoded}\")"
    {out, _} = System.cmd("erl", ["-noshell", "-pa", ebin, "-eval", call], stderr_to_stdout: true)

    case Regex.run(~r/RESULT:(\S+)/, out) do
      [_, result] -> result |> Base.decode64!() |> :erlang.binary_to_term() |> checked_report(out)
      nil -> flunk("the peer printed no result:\n" <> out)
    end
  end

  defp checked_report(%{failed: failure}, out), do: flunk("the peer failed: #{inspect(failure)}\n" <> out)
  defp checked_report(report, _out), do: report

  describe "IPC (CPU shared memory)" do
    test "another OS process maps the same memory: it reads our bytes, we read its writes" do
      t = IPC.zeros({64}, :float32)
      Tensor.write!(t, f32s(Enum.to_list(1..64)))
      handle = IPC.export(t)
      assert handle.tensor == t
      assert handle.data_size == 256

      out =
        in_os_process("""
        T = tensor_blob_ipc:open(<<"#{handle.handle}">>, float32, {64}),
        io:format("~s", [binary:encode_hex(tensor_blob:to_binary(T))]),
        _ = tensor_blob:write(tensor_blob:narrow(T, 0, 0, 2), <<-1.0:32/float-native, -2.0:32/float-native>>)
        """)

      assert Base.decode16!(String.trim(out)) == f32s(Enum.to_list(1..64))
      assert binary_part(Tensor.to_binary(t), 0, 8) == f32s([-1, -2])
    end

    test "a CPU tensor not in shared memory is copied once; the opened tensor is writable and shared" do
      t = Tensor.from_binary(f32s(Enum.to_list(1..16)), :float32, {4, 4})
      handle = IPC.export(t)
      assert handle.tensor != t
      u = IPC.open(handle, :float32, {4, 4})
      assert Tensor.to_binary(u) == Tensor.to_binary(t)
      Tensor.write!(u, f32s(List.duplicate(0, 16)))
      assert Tensor.to_binary(handle.tensor) == f32s(List.duplicate(0, 16))
      # Re-exporting an opened region shares it, under the same name.
      assert IPC.export(u).handle == handle.handle
      # A transposed view is copied in row-major order.
      v = IPC.open(IPC.export(Tensor.transpose(t, 0, 1)), :float32, {4, 4})
      assert Tensor.to_binary(v) == t |> Tensor.transpose(0, 1) |> Tensor.to_binary()
    end

    test "regions are owner-only, and the name goes with the exporter's tensor" do
      start = Lifetime.settled_stats()

      path =
        Lifetime.in_process(fn ->
          handle = IPC.export(IPC.zeros({1024}, :uint8))
          {:ok, stat} = File.stat(shm_path(handle))
          assert Bitwise.band(stat.mode, 0o777) == 0o600
          shm_path(handle)
        end)

      assert Lifetime.await_stats(start) == start
      refute File.exists?(path)

      assert_raise ArgumentError, ~r/no shared memory named/, fn ->
        IPC.open(String.trim_leading(path, "/dev/shm"), :uint8, {1024})
      end
    end

    test "an opened mapping outlives the exporter's name" do
      handle = IPC.export(Tensor.from_binary(f32s([1, 2, 3, 4]), :float32, {4}))
      u = IPC.open(handle, :float32, {4})
      handle = nil
      _ = handle
      Lifetime.churn()
      Lifetime.settled_stats()
      assert Tensor.to_binary(u) == f32s([1, 2, 3, 4])
    end

    test "Nx-style pointers: kind :ipc with the name as handle; CUDA ones need CUDA" do
      handle = IPC.export(IPC.zeros({8}, :int32))
      pointer = %{kind: :ipc, handle: handle.handle, address: nil, data_size: 32}
      assert Tensor.shape(IPC.open(pointer, :int32, {8})) == {8}
      # The exporter's tensor keeps the name until the open above.
      assert Tensor.memory(handle.tensor) == :ipc
      cuda = %{pointer | address: 0}

      if CUDA.available?() do
        # A region's name is no CUDA IPC handle, and is never read as one.
        assert_raise ArgumentError, ~r/expected a CUDA IPC handle \(64 bytes/, fn -> IPC.open(cuda, :int32, {8}) end
      else
        error = assert_raise TensorBlob.Error, fn -> IPC.open(cuda, :int32, {8}) end
        assert error.message =~ "handle: a CUDA IPC handle (device 0): CUDA IPC is not"

        assert error.message =~
                 ~r/not supported by this build \(built without CUDA headers, TB_CUDA=0\)|this libtorch was built without CUDA|no CUDA runtime|no CUDA device/
      end
    end

    test "the peer OS process: it opens a region, writes through a view that outlives what it opened" do
      t = IPC.zeros({16, 4}, :float32)
      Tensor.write!(t, f32s(Enum.to_list(1..64)))
      handle = IPC.export(t)
      report = peer(handle, :float32, {16, 4}, 1, f32s([-1, -2, -3, -4]), %{probe_shape: {17, 4}})
      assert report.bytes == f32s(Enum.to_list(1..64))
      assert report.device == :cpu
      assert report.memory == :ipc
      assert {:badarg, message} = report.probe
      assert message =~ "needs 272 bytes"
      # The opened tensor was collected while its view lived; then the view too.
      assert report.tensors_with_view == 1
      assert report.view_after_drop == f32s([-1, -2, -3, -4])
      assert report.tensors_left == 0
      assert binary_part(Tensor.to_binary(t), 0, 16) == f32s([-1, -2, -3, -4])
    end

    test "bad handles and sizes: clear errors, nothing leaked" do
      handle = IPC.export(IPC.zeros({16}, :float32))
      start = Lifetime.settled_stats()
      assert_raise ArgumentError, ~r/needs 128 bytes/, fn -> IPC.open(handle, :float32, {32}) end
      assert_raise ArgumentError, ~r/needs 128 bytes/, fn -> IPC.open(handle, :float64, {16}) end

      for bad <- ["", "/", "/a/b", "a/b", "//a", "/" <> String.duplicate("x", 254), "/nul\0byte"] do
        assert_raise ArgumentError, ~r/is no shared-memory name/, fn -> IPC.open(bad, :float32, {16}) end
      end

      assert_raise ArgumentError, ~r/handle/, fn -> IPC.open(:nope, :float32, {16}) end
      assert_raise ArgumentError, ~r/handle/, fn -> IPC.open(%{kind: :local}, :float32, {16}) end
      assert_raise ArgumentError, ~r/no shared memory/, fn -> IPC.open("/tensor_blob.never", :float32, {16}) end
      assert Lifetime.await_stats(start) == start
      assert Tensor.shape(IPC.open(handle, :float32, {4, 4})) == {4, 4}
    end
  end

  describe "names" do
    # shm_open(3) on Linux takes a name with or without its leading slash
    # (Torchx's, "torchx:ipc:<pid>:<address>", have none); its regions are
    # files in /dev/shm.
    test "what shm_open takes: with or without the leading slash, up to 253 bytes" do
      for name <- ["tensor_blob:test:#{System.unique_integer([:positive])}", String.duplicate("y", 253)] do
        path = Path.join("/dev/shm", name)
        File.write!(path, <<1.5::float-32-native, 2.5::float-32-native>>)

        try do
          for handle <- [name, "/" <> name] do
            t = IPC.open(handle, :float32, {2})
            assert Tensor.to_binary(t) == <<1.5::float-32-native, 2.5::float-32-native>>
          end

          Tensor.write!(IPC.open(name, :float32, {2}), <<3.5::float-32-native, 4.5::float-32-native>>)
          assert File.read!(path) == <<3.5::float-32-native, 4.5::float-32-native>>
        after
          File.rm!(path)
        end
      end
    end
  end

  describe "CUDA without a GPU" do
    test "the library answers: runtime facts, no devices, clear errors" do
      info = CUDA.runtime()
      assert Map.keys(info) |> Enum.sort() == [:built, :devices, :ipc_mappings, :libtorch, :runtime, :runtime_path]
      assert info.ipc_mappings == 0
      # Which runtime: a file when one was found, nil otherwise.
      assert info.runtime == is_binary(info.runtime_path)
      assert CUDA.device_count() == info.devices
      assert CUDA.available?() == (info.devices > 0 and info.libtorch)

      if info.devices == 0 do
        assert_raise TensorBlob.Error, ~r/no CUDA device/, fn -> CUDA.synchronize(0) end
      end

      assert_raise ArgumentError, ~r/device/, fn -> CUDA.synchronize(-1) end
    end

    test "a CUDA blob is never viewed as CPU memory; its metadata is read without touching it" do
      blob = %{TensorBlob.to_blob(Tensor.zeros({2, 3}, :float32)) | device: {:cuda, 0}, ptr: 0xDEAD_0000}

      unless CUDA.runtime().libtorch do
        error = assert_raise TensorBlob.Error, fn -> TensorBlob.from_blob(blob) end
        assert error.message =~ "built without CUDA"
      end

      info = CUDA.info(blob)

      assert Map.delete(info, :memory) == %{
               device: {:cuda, 0},
               ptr: 0xDEAD_0000,
               shape: {2, 3},
               strides: [3, 1],
               dtype: :float32
             }

      # No GPU: the runtime cannot tell; with one, it is no memory it knows.
      assert info.memory in [:unknown, :cpu]
      assert CUDA.memory(TensorBlob.to_blob(Tensor.zeros({4}, :uint8)).ptr) in [:unknown, :cpu]
      assert_raise ArgumentError, ~r/ptr/, fn -> CUDA.memory(-1) end
    end

    test "info/1 of a capsule: its metadata, and the capsule is still there to import" do
      t = Tensor.from_binary(f32s(Enum.to_list(1..6)), :float32, {2, 3})
      capsule = DLPack.export(Tensor.transpose(t, 0, 1), read_only: true)
      info = CUDA.info(capsule)

      assert Map.delete(info, :memory) == %{
               device: :cpu,
               device_type: :cpu,
               ptr: TensorBlob.to_blob(t).ptr,
               shape: {3, 2},
               strides: [1, 3],
               dtype: :float32,
               read_only: true
             }

      assert info.memory in [:unknown, :cpu]

      assert Tensor.shape(DLPack.import(capsule)) == {3, 2}
      assert_raise ArgumentError, ~r/already consumed/, fn -> CUDA.info(capsule) end
    end

    test "to_device/2 is the explicit copy; a CUDA device without CUDA is a TensorBlob.Error" do
      t = Tensor.from_binary(f32s([1, 2, 3, 4]), :float32, {2, 2})
      c = Tensor.to_device(Tensor.transpose(t, 0, 1), :cpu)
      assert Tensor.to_binary(c) == f32s([1, 3, 2, 4])
      refute TensorBlob.to_blob(c).ptr == TensorBlob.to_blob(t).ptr
      assert Tensor.memory(c) == :owned
      assert_raise ArgumentError, ~r/device/, fn -> Tensor.to_device(t, :gpu) end

      unless CUDA.runtime().libtorch do
        error = assert_raise TensorBlob.Error, fn -> Tensor.to_device(t, {:cuda, 0}) end

        assert error.message ==
                 "device {:cuda, 0}: this libtorch was built without CUDA, so to_device cannot copy to or " <>
                   "from a GPU; link a libtorch with CUDA (LIBTORCH_DIR)"
      end
    end

    @tag :cuda
    test "with a GPU: to_binary, write! and to_device copy across, and never crash" do
      t = Tensor.from_binary(f32s(Enum.to_list(1..64)), :float32, {8, 8})
      g = Tensor.to_device(t, {:cuda, 0})
      assert Tensor.device(g) == {:cuda, 0}
      assert Tensor.to_binary(g) == Tensor.to_binary(t)
      assert Tensor.to_binary(Tensor.transpose(g, 0, 1)) == Tensor.to_binary(Tensor.transpose(t, 0, 1))
      Tensor.write!(g, f32s(List.duplicate(7, 64)))
      assert Tensor.to_binary(Tensor.to_device(g, :cpu)) == f32s(List.duplicate(7, 64))
      # A binary never shows device memory.
      assert_raise ArgumentError, ~r/CPU memory/, fn -> Tensor.to_binary(g, copy: false) end
      # The blob of a CUDA tensor round-trips as device memory, pinned.
      %TensorBlob.BlobView{tensor: v} = TensorBlob.from_blob(TensorBlob.to_blob(g))
      assert Tensor.device(v) == {:cuda, 0}
      assert Tensor.to_binary(v) == f32s(List.duplicate(7, 64))
    end

    @tag :cuda
    test "with a GPU: every dtype's bytes cross the bus both ways, dense or strided" do
      for dtype <- TensorBlob.dtypes() do
        size = TensorBlob.to_blob(Tensor.zeros({1}, dtype)).element_size
        # Bytes 0 and 1 only: a valid bool, and bits every copy keeps.
        bytes = for i <- 1..(size * 24), into: <<>>, do: <<rem(i * 7, 3) |> min(1)>>
        t = Tensor.from_binary(bytes, dtype, {4, 6})
        g = Tensor.to_device(t, {:cuda, 0})
        assert Tensor.to_binary(g) == bytes, "#{dtype}: to_binary of a CUDA tensor"

        # A transposed view is made dense on its device first; a dtype
        # libtorch cannot copy there is a clear error, never wrong bytes.
        try do
          assert Tensor.to_binary(Tensor.transpose(g, 0, 1)) == Tensor.to_binary(Tensor.transpose(t, 0, 1)),
                 "#{dtype}: to_binary of a transposed CUDA tensor"
        rescue
          e in TensorBlob.Error -> assert e.message =~ ~r/not implemented|not supported/i, "#{dtype}: #{e.message}"
        end

        flipped = for <<b <- bytes>>, into: <<>>, do: <<1 - b>>
        Tensor.write!(g, flipped)
        assert Tensor.to_binary(Tensor.to_device(g, :cpu)) == flipped, "#{dtype}: write! into a CUDA tensor"

        try do
          gt = Tensor.transpose(g, 0, 1)
          Tensor.write!(gt, bytes)
          assert Tensor.to_binary(Tensor.to_device(gt, :cpu)) == bytes, "#{dtype}: write! into a transposed view"
        rescue
          e in TensorBlob.Error -> assert e.message =~ ~r/not implemented|not supported/i, "#{dtype}: #{e.message}"
        end
      end
    end

    @tag :cuda
    test "with a GPU: a freed device pointer and a wrong device index are refused, saying why" do
      {_, freed} = :foreign_tensor_nif.counters()
      data = f32s(Enum.to_list(1..8))
      t = DLPack.import(:foreign_tensor_nif.cuda_produce(data, :cuda), unsafe_address: true)
      spec = %{ptr: TensorBlob.to_blob(t).ptr, shape: {8}, dtype: :float32, device: {:cuda, 0}}
      # Live device memory: an unpinned view reads it; device 1 is refused.
      assert Tensor.to_binary(TensorBlob.from_blob(spec, owner: :none)) == data
      count = CUDA.device_count()

      error = assert_raise ArgumentError, fn -> TensorBlob.from_blob(%{spec | device: {:cuda, count}}, owner: :none) end
      assert error.message =~ "CUDA device #{count} does not exist (#{count} found)"

      # The producer's deleter frees it (cudaFree); then the runtime no
      # longer knows the pointer, and the message says what it answered.
      t = nil
      _ = t
      assert counters_reach(freed + 1)
      error = assert_raise ArgumentError, fn -> TensorBlob.from_blob(spec, owner: :none) end
      assert error.message =~ ~r/no CUDA device owns|the CUDA runtime does not know it/
      refute error.message =~ ~r/^ptr: host memory/
    end

    @tag :cuda
    test "with a GPU: devices answer and synchronize returns" do
      assert CUDA.available?()
      assert CUDA.device_count() > 0
      assert CUDA.synchronize(0) == :ok
    end
  end

  # Needs a GPU: mix test --include cuda.
  describe "CUDA IPC and streams, with a GPU" do
    defp counters_reach(freed) do
      probe = fn ->
        Lifetime.collect()
        {_, now} = :foreign_tensor_nif.counters()
        {now == freed, now}
      end

      case :tensor_blob_test_util.poll(probe, 200, 10) do
        {:ok, _} -> true
        {:timeout, other} -> flunk("the foreign deleters ran #{other} times in all, expected #{freed}")
      end
    end

    @tag :cuda
    test "a CUDA tensor to another OS process and back; the exporter keeps only the handle" do
      mappings = CUDA.runtime().ipc_mappings
      g = Tensor.from_binary(f32s(Enum.to_list(1..64)), :float32, {16, 4}) |> Tensor.to_device({:cuda, 0})
      handle = IPC.export(g)
      assert {handle.kind, handle.address, handle.data_size} == {:ipc, 0, 256}
      assert byte_size(handle.handle) in [64, 72]
      assert handle.tensor == g
      # Only the handle's tensor keeps the memory from here on.
      g = nil
      _ = g
      Lifetime.churn()

      report = peer(handle, :float32, {16, 4}, 1, f32s([-1, -2, -3, -4]), %{probe_shape: {1024, 1024}})
      assert report.bytes == f32s(Enum.to_list(1..64))
      assert {report.device, report.memory, report.mappings_open} == {{:cuda, 0}, :ipc, 1}
      # A shape the allocation cannot hold is refused (and nothing stays open).
      assert {:badarg, message} = report.probe
      assert message =~ "do not fit in the exported allocation"
      # The opened tensor was collected while a view of it lived: the
      # mapping stayed open, and was closed once the view was gone too.
      assert {report.tensors_with_view, report.mappings_with_view} == {1, 1}
      assert report.view_after_drop == f32s([-1, -2, -3, -4])
      assert {report.tensors_left, report.mappings_left} == {0, 0}
      # The other process wrote into our device memory.
      assert Tensor.to_binary(handle.tensor) == f32s([-1, -2, -3, -4] ++ Enum.to_list(5..64))
      assert CUDA.runtime().ipc_mappings == mappings
    end

    @tag :cuda
    test "a slice inside its allocation carries its offset; a transposed tensor is shared as a copy" do
      g = Tensor.from_binary(f32s(Enum.to_list(1..64)), :float32, {16, 4}) |> Tensor.to_device({:cuda, 0})
      slice = Tensor.narrow(g, 0, 8, 8)
      handle = IPC.export(slice)
      assert handle.tensor == slice
      assert <<_::binary-size(64), offset::64-little>> = handle.handle
      assert offset >= 128 and rem(offset, 4) == 0

      report = peer(handle, :float32, {8, 4}, 8, f32s(List.duplicate(0, 32)))
      assert report.bytes == f32s(Enum.to_list(33..64))
      assert Tensor.to_binary(g) == f32s(Enum.to_list(1..32) ++ List.duplicate(0, 32))

      t = Tensor.transpose(g, 0, 1)
      handle = IPC.export(t)
      refute handle.tensor == t
      assert Tensor.memory(handle.tensor) == :owned
      report = peer(handle, :float32, {4, 16}, 1, f32s(List.duplicate(9, 16)))
      assert report.bytes == Tensor.to_binary(t)
      assert binary_part(Tensor.to_binary(handle.tensor), 0, 64) == f32s(List.duplicate(9, 16))
    end

    @tag :cuda
    test "bad handles, devices and empty tensors: clear errors, never a crash" do
      g = Tensor.to_device(Tensor.from_binary(f32s(Enum.to_list(1..16)), :float32, {16}), {:cuda, 0})
      handle = IPC.export(g)

      # CUDA opens a handle in another process only (on the H100 the
      # runtime answers "invalid device context"); the message says so.
      mappings = CUDA.runtime().ipc_mappings

      assert_raise TensorBlob.Error, ~r/cudaIpcOpenMemHandle: .*another OS process/, fn ->
        IPC.open(handle, :float32, {16})
      end

      assert CUDA.runtime().ipc_mappings == mappings

      assert_raise ArgumentError, ~r/expected a CUDA IPC handle \(64 bytes/, fn ->
        IPC.open(%{handle | handle: "short"}, :float32, {16})
      end

      assert_raise ArgumentError, ~r/CUDA device 99 does not exist here/, fn ->
        IPC.open(%{handle | address: 99}, :float32, {16})
      end

      empty = Tensor.to_device(Tensor.zeros({0}, :float32), {:cuda, 0})
      assert_raise ArgumentError, ~r/no elements/, fn -> IPC.export(empty) end
    end

    @tag :cuda
    test "DLPack export to a consumer's stream, and the stream values" do
      g = Tensor.to_device(Tensor.from_binary(f32s(Enum.to_list(1..16)), :float32, {16}), {:cuda, 0})
      stream = :foreign_tensor_nif.cuda_stream()
      assert is_integer(stream)
      # The consumer reads on its own stream, which waits for libtorch's.
      address = g |> DLPack.export(stream: stream) |> DLPack.consume()
      assert :foreign_tensor_nif.cuda_read(address, stream) == f32s(Enum.to_list(1..16))
      :ok = :foreign_tensor_nif.release(address)

      for s <- [1, 2, -1] do
        assert g |> DLPack.export(stream: s) |> DLPack.import() |> Tensor.to_binary() == f32s(Enum.to_list(1..16))
      end

      assert_raise ArgumentError, ~r/0 is ambiguous/, fn -> DLPack.export(g, stream: 0) end
      assert_raise ArgumentError, ~r/expected -1/, fn -> DLPack.export(g, stream: -7) end
      :ok = :foreign_tensor_nif.cuda_stream_destroy(stream)
    end

    @tag :cuda
    test "DLPack import waits for the producer's stream" do
      {_, freed} = :foreign_tensor_nif.counters()
      # The producer's stream fills the memory with 7s after 300 ms; the
      # legacy default stream does not wait for it by itself.
      {address, stream} = :foreign_tensor_nif.cuda_produce_late(4096, 7, 300)
      t = DLPack.import(address, stream: stream, unsafe_address: true)
      assert {Tensor.device(t), Tensor.dtype(t)} == {{:cuda, 0}, :uint8}
      assert Tensor.to_binary(t) == :binary.copy(<<7>>, 4096)
      t = nil
      _ = t
      assert counters_reach(freed + 1)
    end

    @tag :cuda
    test "page-locked host memory imports as a CPU tensor, managed memory as a CUDA one" do
      {_, freed} = :foreign_tensor_nif.counters()
      data = f32s(Enum.to_list(1..8))

      pinned = DLPack.import(:foreign_tensor_nif.cuda_produce(data, :cuda_host), unsafe_address: true)
      assert {Tensor.device(pinned), Tensor.memory(pinned)} == {:cpu, :dlpack}
      assert Tensor.to_binary(pinned) == data
      assert CUDA.memory(TensorBlob.to_blob(pinned).ptr) == :cuda_host
      assert CUDA.info(TensorBlob.to_blob(pinned)).memory == :cuda_host
      # A stream of the producer's: the host waits for it.
      stream = :foreign_tensor_nif.cuda_stream()
      waited = DLPack.import(:foreign_tensor_nif.cuda_produce(data, :cuda_host), stream: stream, unsafe_address: true)
      assert Tensor.to_binary(waited) == data

      managed = DLPack.import(:foreign_tensor_nif.cuda_produce(data, :cuda_managed), unsafe_address: true)
      assert {Tensor.device(managed), Tensor.memory(managed)} == {{:cuda, 0}, :dlpack}
      assert Tensor.to_binary(managed) == data
      assert CUDA.memory(TensorBlob.to_blob(managed).ptr) == :cuda_managed
      # The host may view managed memory itself.
      %TensorBlob.BlobView{tensor: host} =
        TensorBlob.from_blob(%{TensorBlob.to_blob(managed) | device: :cpu}, owner: {:keep, managed})

      assert Tensor.to_binary(host) == data

      device = Tensor.to_device(Tensor.from_binary(data, :float32, {8}), {:cuda, 0})
      assert CUDA.memory(TensorBlob.to_blob(device).ptr) == :cuda
      # Re-exported as libtorch sees them.
      assert DLPack.info(DLPack.export(pinned)).device_type == :cpu
      assert %{device_type: :cuda, device: {:cuda, 0}} = DLPack.info(DLPack.export(managed))

      {pinned, waited, managed, host} = {nil, nil, nil, nil}
      _ = {pinned, waited, managed, host}
      assert counters_reach(freed + 3)
      :ok = :foreign_tensor_nif.cuda_stream_destroy(stream)
    end
  end
end
