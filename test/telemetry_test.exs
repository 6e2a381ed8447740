# The [:tensor_blob, :copy] and [:tensor_blob, :transfer] events
# (guides/telemetry.md). The :telemetry tests run where the telemetry
# library is on the code path (make nx-test: NX_PATH holds it); the
# :no_telemetry tests where it is not (make mix-test).
defmodule TensorBlob.TelemetryTest do
  use ExUnit.Case, async: false

  alias TensorBlob.{IPC, Nodes, Tensor}

  @bytes for i <- 1..24, into: <<>>, do: <<i>>

  defp t64, do: Tensor.from_binary(@bytes, :uint8, {4, 6})

  # A handler must be a remote function (telemetry warns on local ones).
  def handle(event, measurements, metadata, pid), do: send(pid, {:event, event, measurements, metadata})

  describe "with telemetry" do
    @describetag :telemetry

    setup do
      {:ok, _} = Application.ensure_all_started(:telemetry)
      id = {__MODULE__, make_ref()}
      # Called through a variable: this file compiles where telemetry is absent too.
      telemetry = :telemetry
      :ok = telemetry.attach_many(id, [[:tensor_blob, :copy], [:tensor_blob, :transfer]], &__MODULE__.handle/4, self())
      on_exit(fn -> telemetry.detach(id) end)
      assert :tensor_blob_telemetry.enabled()
      :ok
    end

    defp assert_copy(function, reason, bytes) do
      assert_received {:event, [:tensor_blob, :copy], %{bytes: ^bytes, duration: duration},
                       %{function: ^function, reason: ^reason, dtype: _, shape: _} = meta}

      assert is_integer(duration) and duration >= 0
      meta
    end

    defp assert_transfer(function, bytes, copied) do
      zero_copy = copied == 0

      assert_received {:event, [:tensor_blob, :transfer], %{bytes: ^bytes, copied: ^copied, duration: duration},
                       %{function: ^function, zero_copy: ^zero_copy} = meta}

      assert is_integer(duration) and duration >= 0
      meta
    end

    defp refute_events, do: refute_received({:event, _, _, _})

    test "explicit copies: to_binary, from_binary, write!, to_device" do
      t = t64()
      assert_copy({:tensor_blob, :from_binary, 3}, :requested, 24)
      assert Tensor.to_binary(t) == @bytes
      assert_copy({:tensor_blob, :to_binary, 1}, :requested, 24)
      assert Tensor.to_binary(t, copy: true) == @bytes
      assert_copy({:tensor_blob, :to_binary, 2}, :requested, 24)
      Tensor.write!(t, @bytes)
      assert_copy({:tensor_blob, :write, 2}, :requested, 24)
      Tensor.to_device(t, :cpu)
      assert %{dtype: :uint8, shape: {4, 6}} = assert_copy({:tensor_blob, :to_device, 2}, :requested, 24)
      refute_events()
    end

    test "views copy nothing and say nothing" do
      t = t64()
      assert_copy({:tensor_blob, :from_binary, 3}, :requested, 24)
      _ = Tensor.to_binary(t, copy: false)
      _ = Tensor.from_binary(:binary.copy(@bytes, 4), :uint8, {96}, copy: false)
      _ = TensorBlob.from_blob(TensorBlob.to_blob(t), owner: {:keep, t})
      _ = Tensor.transpose(t, 0, 1)
      refute_events()
    end

    test "copies made where a view was asked for if possible say why" do
      t = t64()
      assert_copy({:tensor_blob, :from_binary, 3}, :requested, 24)
      strided = Tensor.transpose(t, 0, 1)
      assert Tensor.to_binary(strided, copy: :if_needed) == Tensor.to_binary(strided, copy: true)
      assert_copy({:tensor_blob, :to_binary, 2}, :not_contiguous, 24)
      assert_copy({:tensor_blob, :to_binary, 2}, :requested, 24)

      region = IPC.zeros({24}, :uint8)
      _ = Tensor.to_binary(region, copy: :if_needed)
      assert_copy({:tensor_blob, :to_binary, 2}, :shared_memory, 24)

      # A part of a binary starting at an odd address, for a 4-byte dtype.
      odd = binary_part(:binary.copy(@bytes, 8), 1, 96)
      _ = Tensor.from_binary(odd, :float32, {24}, copy: :if_needed)
      assert_copy({:tensor_blob, :from_binary, 4}, :misaligned, 96)
      refute_events()
    end

    test "IPC exports: a tensor not in a region is copied into one; a region is shared as it is" do
      t = t64()
      assert_copy({:tensor_blob, :from_binary, 3}, :requested, 24)
      handle = IPC.export(t)
      assert_copy({:tensor_blob, :ipc_export, 1}, :not_a_region, 24)
      assert_transfer({:tensor_blob, :ipc_export, 1}, 24, 24)

      _ = IPC.export(handle.tensor)
      assert_transfer({:tensor_blob, :ipc_export, 1}, 24, 0)

      # A strided tensor: read in place, its elements copied once, in order,
      # into the region.
      _ = IPC.export_torch(Tensor.transpose(t, 0, 1))
      assert_copy({:tensor_blob, :ipc_torch_export, 1}, :not_a_region, 24)
      assert_transfer({:tensor_blob, :ipc_torch_export, 1}, 24, 24)
      refute_events()
    end

    test "Nodes.pack of a tensor not in a region copies it, and says so; unpack maps it" do
      t = t64()
      assert_copy({:tensor_blob, :from_binary, 3}, :requested, 24)
      packed = Nodes.pack(t, node(), via: :region)
      assert_copy({:tensor_blob, :node_pack, 3}, :not_a_region, 24)
      meta = assert_transfer({:tensor_blob, :node_pack, 3}, 24, 24)
      assert %{node: node, via: :region, dtype: :uint8, shape: {4, 6}} = meta
      assert node == node()

      assert Tensor.memory(Nodes.unpack(packed)) == :ipc
      assert_transfer({:tensor_blob, :node_unpack, 2}, 24, 0)

      # Through a binary: a view of a contiguous tensor, a copy of a strided one.
      _ = Nodes.pack(t, node(), via: :binary)
      assert_transfer({:tensor_blob, :node_pack, 3}, 24, 0)
      _ = Nodes.pack(Tensor.transpose(t, 0, 1), node(), via: :binary)
      assert_copy({:tensor_blob, :node_pack, 3}, :not_contiguous, 24)
      assert_transfer({:tensor_blob, :node_pack, 3}, 24, 24)
      refute_events()
    end

    if Code.ensure_loaded?(Nx) do
      test "Nx: to_nx views, or copies and says why; from_nx copies on request" do
        {:ok, _} = Application.ensure_all_started(:nx)
        t = t64()
        assert_copy({:tensor_blob, :from_binary, 3}, :requested, 24)

        _ = TensorBlob.Nx.to_nx(t)
        meta = assert_transfer({TensorBlob.Nx, :to_nx, 2}, 24, 0)
        assert meta.backend == Nx.BinaryBackend

        region = IPC.zeros({24}, :uint8)
        _ = TensorBlob.Nx.to_nx(region)
        assert_copy({TensorBlob.Nx, :to_nx, 2}, :shared_memory, 24)
        assert_transfer({TensorBlob.Nx, :to_nx, 2}, 24, 24)

        # Nx functions that take our tensors get a copy (guides/nx.md).
        assert Nx.to_number(Nx.sum(t)) == Enum.sum(1..24)
        assert_copy({TensorBlob.Nx, :to_nx, 2}, :requested, 24)
        assert_transfer({TensorBlob.Nx, :to_nx, 2}, 24, 24)

        _ = TensorBlob.Nx.from_nx(Nx.iota({6}, type: {:u, 8}), copy: :always)
        assert_copy({TensorBlob.Nx, :from_nx, 2}, :requested, 6)
        assert_transfer({TensorBlob.Nx, :from_nx, 2}, 6, 6)
        refute_events()
      end
    end
  end

  describe "without telemetry" do
    @describetag :no_telemetry

    test "nothing is emitted and nothing fails" do
      refute Code.ensure_loaded?(:telemetry)
      refute :tensor_blob_telemetry.enabled()
      t = t64()

      assert Tensor.to_binary(Tensor.transpose(t, 0, 1), copy: :if_needed) ==
               Tensor.to_binary(Tensor.transpose(t, 0, 1))

      assert Tensor.to_binary(IPC.export(t).tensor) == @bytes
      assert Tensor.to_binary(Nodes.unpack(Nodes.pack(t, node(), via: :region))) == @bytes
      assert Tensor.to_binary(Tensor.to_device(t, :cpu)) == @bytes
    end
  end
end
