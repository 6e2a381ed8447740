# The [:tensor_blob, :copy] and [:tensor_blob, :transfer] spans
# (guides/telemetry.md): :start, :stop and :exception events in the shape
# :telemetry.span/3 gives them. The :telemetry tests run where the
# telemetry library is on the code path (make nx-test: NX_PATH holds it);
# the :no_telemetry tests where it is not (make mix-test).
defmodule TensorBlob.TelemetryTest do
  use ExUnit.Case, async: false

  # This file compiles where telemetry is absent too.
  @compile {:no_warn_undefined, :telemetry}

  alias TensorBlob.{IPC, Nodes, Tensor}

  @bytes for i <- 1..24, into: <<>>, do: <<i>>

  # Every event of the two spans.
  @events for kind <- [:copy, :transfer], event <- [:start, :stop, :exception], do: [:tensor_blob, kind, event]

  defp t64, do: Tensor.from_binary(@bytes, :uint8, {4, 6})

  # A handler must be a remote function (telemetry warns on local ones).
  def handle(event, measurements, metadata, pid), do: send(pid, {:event, event, measurements, metadata})

  # What a span's events carry, as :telemetry.span/3 makes them: a start
  # with monotonic_time and system_time, then a stop with duration and
  # monotonic_time (the stop's time is the start's plus the duration), the
  # two with one telemetry_span_context. Returns {stop measurements, metadata}.
  defp assert_span(kind) do
    assert_received {:event, [:tensor_blob, ^kind, :start], %{monotonic_time: start, system_time: system}, start_meta}

    assert_received {:event, [:tensor_blob, ^kind, :stop], %{duration: duration, monotonic_time: stop} = measurements,
                     meta}

    assert is_integer(start) and is_integer(system) and is_integer(duration) and duration >= 0
    assert stop == start + duration
    assert is_reference(meta.telemetry_span_context)
    assert start_meta == meta
    {measurements, meta}
  end

  describe "with telemetry" do
    @describetag :telemetry

    setup do
      {:ok, _} = Application.ensure_all_started(:telemetry)
      id = {__MODULE__, make_ref()}
      :ok = :telemetry.attach_many(id, @events, &__MODULE__.handle/4, self())
      on_exit(fn -> :telemetry.detach(id) end)
      assert :tensor_blob_telemetry.enabled()
      :ok
    end

    defp assert_copy(function, reason, bytes) do
      {measurements, meta} = assert_span(:copy)
      assert %{bytes: ^bytes} = measurements
      assert %{function: ^function, reason: ^reason, dtype: _, shape: _} = meta
      meta
    end

    # copied: the bytes, or :_any.
    defp assert_transfer(function, bytes, copied) do
      {measurements, meta} = assert_span(:transfer)
      assert %{bytes: ^bytes, copied: got} = measurements
      assert copied in [:_any, got]
      assert %{function: ^function, zero_copy: zero_copy} = meta
      assert zero_copy == (got == 0)
      meta
    end

    defp refute_events, do: refute_received({:event, _, _, _})

    defp drain(acc \\ []) do
      receive do
        {:event, event, measurements, meta} -> drain([{event, measurements, meta} | acc])
      after
        0 -> Enum.reverse(acc)
      end
    end

    # A span that began and ended in an exception, as :telemetry.span/3
    # reports one.
    defp assert_exception(kind, function, exception) do
      assert_received {:event, [:tensor_blob, ^kind, :start], %{monotonic_time: start}, %{function: ^function}}

      assert_received {:event, [:tensor_blob, ^kind, :exception], %{duration: duration, monotonic_time: stop},
                       %{function: ^function, kind: :error, reason: %^exception{}, stacktrace: [_ | _]} = meta}

      assert stop == start + duration and is_reference(meta.telemetry_span_context)
    end

    test "a safetensors tensor at an offset its element size does not divide: one copy, reason misaligned" do
      dir = Path.join(System.tmp_dir!(), "tb_telemetry_#{System.unique_integer([:positive])}")
      File.mkdir_p!(dir)
      path = Path.join(dir, "odd.safetensors")
      # a 58-byte header: the data starts at byte 66, which 4 does not divide
      header = ~s({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}) |> String.pad_trailing(58)
      File.write!(path, [<<byte_size(header)::little-64>>, header, <<1.5::float-little-32>>])
      _ = drain()
      %{tensors: %{"x" => x}} = TensorBlob.SafeTensors.open(path)
      File.rm_rf!(dir)
      assert %{dtype: :float32, shape: {1}} = assert_copy({TensorBlob.SafeTensors, :open, 2}, :misaligned, 4)
      assert Tensor.memory(x) == :owned
      refute_events()
    end

    test "explicit copies: to_binary, from_binary, write!, to_device" do
      t = t64()
      assert_copy({Tensor, :from_binary, 3}, :requested, 24)
      assert Tensor.to_binary(t) == @bytes
      assert_copy({Tensor, :to_binary, 1}, :requested, 24)
      assert Tensor.to_binary(t, copy: true) == @bytes
      assert_copy({Tensor, :to_binary, 2}, :requested, 24)
      Tensor.write!(t, @bytes)
      assert_copy({Tensor, :write!, 2}, :requested, 24)
      Tensor.to_device(t, :cpu)
      assert %{dtype: :uint8, shape: {4, 6}} = assert_copy({Tensor, :to_device, 2}, :requested, 24)
      refute_events()
    end

    test "views copy nothing and say nothing" do
      t = t64()
      assert_copy({Tensor, :from_binary, 3}, :requested, 24)
      _ = Tensor.to_binary(t, copy: false)
      _ = Tensor.from_binary(:binary.copy(@bytes, 4), :uint8, {96}, copy: false)
      _ = TensorBlob.from_blob(TensorBlob.to_blob(t), owner: {:keep, t})
      _ = Tensor.transpose(t, 0, 1)
      refute_events()
    end

    test "copies made where a view was asked for if possible say why" do
      t = t64()
      assert_copy({Tensor, :from_binary, 3}, :requested, 24)
      strided = Tensor.transpose(t, 0, 1)
      assert Tensor.to_binary(strided, copy: :if_needed) == Tensor.to_binary(strided, copy: true)
      assert_copy({Tensor, :to_binary, 2}, :not_contiguous, 24)
      assert_copy({Tensor, :to_binary, 2}, :requested, 24)

      region = IPC.zeros({24}, :uint8)
      _ = Tensor.to_binary(region, copy: :if_needed)
      assert_copy({Tensor, :to_binary, 2}, :shared_memory, 24)

      # A part of a binary starting at an odd address, for a 4-byte dtype.
      odd = binary_part(:binary.copy(@bytes, 8), 1, 96)
      _ = Tensor.from_binary(odd, :float32, {24}, copy: :if_needed)
      assert_copy({Tensor, :from_binary, 4}, :misaligned, 96)
      refute_events()
    end

    test "IPC exports: a tensor not in a region is copied into one; a region is shared as it is" do
      t = t64()
      assert_copy({Tensor, :from_binary, 3}, :requested, 24)
      handle = IPC.export(t)
      assert_copy({IPC, :export, 1}, :not_a_region, 24)
      assert_transfer({IPC, :export, 1}, 24, 24)

      _ = IPC.export(handle.tensor)
      assert_transfer({IPC, :export, 1}, 24, 0)

      # A strided tensor: read in place, its elements copied once, in order,
      # into the region.
      _ = IPC.export_torch(Tensor.transpose(t, 0, 1))
      assert_copy({IPC, :export_torch, 1}, :not_a_region, 24)
      assert_transfer({IPC, :export_torch, 1}, 24, 24)
      refute_events()
    end

    test "Nodes.pack of a tensor not in a region copies it, and says so; unpack maps it" do
      t = t64()
      assert_copy({Tensor, :from_binary, 3}, :requested, 24)
      packed = Nodes.pack(t, node(), via: :region)
      assert_copy({Nodes, :pack, 3}, :not_a_region, 24)
      meta = assert_transfer({Nodes, :pack, 3}, 24, 24)
      assert %{node: node, via: :region, dtype: :uint8, shape: {4, 6}} = meta
      assert node == node()

      assert Tensor.memory(Nodes.unpack(packed)) == :ipc
      assert_transfer({Nodes, :unpack, 1}, 24, 0)

      # Through a binary: a small tensor is copied, which leaves it writable.
      _ = Nodes.pack(t, node(), via: :binary)
      assert_copy({Nodes, :pack, 3}, :small, 24)
      assert_transfer({Nodes, :pack, 3}, 24, 24)
      # A large one: a view of a contiguous tensor, a copy of a strided one.
      n = :tensor_blob_nodes.default_thresholds().region
      big = Tensor.zeros({2, div(n, 2)}, :uint8)
      _ = Nodes.pack(big, node(), via: :binary)
      assert_transfer({Nodes, :pack, 3}, n, 0)
      _ = Nodes.pack(Tensor.transpose(big, 0, 1), node(), via: :binary)
      assert_copy({Nodes, :pack, 3}, :not_contiguous, n)
      assert_transfer({Nodes, :pack, 3}, n, n)
      refute_events()
    end

    if Code.ensure_loaded?(Nx) do
      test "Nx: to_nx views, or copies and says why; from_nx copies on request" do
        {:ok, _} = Application.ensure_all_started(:nx)
        t = t64()
        assert_copy({Tensor, :from_binary, 3}, :requested, 24)

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

      test "Nx: from_nx says zero_copy exactly when the tensor shares the Nx tensor's bytes" do
        {:ok, _} = Application.ensure_all_started(:nx)
        # A binary the VM keeps on the process heap (a small one) is copied
        # by the view's pin: each call gives new memory. A large one is
        # shared: each call gives the same memory.
        for size <- [8, 24, 64, 65, 256] do
          nx = Nx.iota({size}, type: {:u, 8})
          a = TensorBlob.Nx.from_nx(nx)
          %{zero_copy: zero_copy} = assert_transfer({TensorBlob.Nx, :from_nx, 2}, size, :_any)
          b = TensorBlob.Nx.from_nx(nx)
          _ = assert_span(:transfer)
          shared = TensorBlob.to_blob(a).ptr == TensorBlob.to_blob(b).ptr

          assert zero_copy == shared,
                 "#{size} bytes: zero_copy #{zero_copy}, but the memory is #{if shared, do: "shared", else: "new"}"
        end

        refute_events()
      end

      test "Nx: an error inside from_nx ends its span with an exception event" do
        nx = Nx.iota({6}, type: {:u, 8}, backend: Nx.BinaryBackend)
        assert_raise ArgumentError, fn -> TensorBlob.Nx.from_nx(nx, copy: :bogus) end
        assert_exception(:transfer, {TensorBlob.Nx, :from_nx, 2}, ArgumentError)
      end
    end

    test "inspect copies nothing the caller asked for: no event" do
      t = t64()
      assert_copy({Tensor, :from_binary, 3}, :requested, 24)
      assert inspect(t) =~ "[[1, 2, 3, 4, 5, 6], [7, 8, ...], ...]"
      assert inspect(Tensor.transpose(t, 0, 1)) =~ "[[1, 7, 13, 19], [2, 8, 14, 20], ...]"
      refute_events()
    end

    test "the Erlang API names the Erlang function; the Elixir API the Elixir function called" do
      t = t64()
      assert_copy({Tensor, :from_binary, 3}, :requested, 24)
      _ = :tensor_blob.to_binary(Tensor.ref(t))
      assert_copy({:tensor_blob, :to_binary, 1}, :requested, 24)
      _ = :tensor_blob.from_binary(@bytes, :uint8, {24})
      assert_copy({:tensor_blob, :from_binary, 3}, :requested, 24)
      _ = Tensor.from_binary(@bytes, :uint8, {24}, copy: true)
      assert_copy({Tensor, :from_binary, 4}, :requested, 24)
      _ = Nodes.unpack(Nodes.pack(t, node()), copy: true)
      assert_transfer({Nodes, :pack, 2}, 24, :_any)
      assert_transfer({Nodes, :unpack, 2}, 24, :_any)
      # (the copies inside them are named as they are: drained here)
      _ = drain()
    end

    test "an error after a span began ends it with an exception event, and the error is raised as before" do
      # A reference that is no tensor: IPC.export starts its transfer, then
      # finds out.
      bad = %Tensor{ref: make_ref()}
      assert_raise ArgumentError, ~r/tensor/, fn -> IPC.export(bad) end
      assert_exception(:transfer, {IPC, :export, 1}, ArgumentError)
      # The Erlang API: the error as the Erlang API raises it.
      assert {:badarg, _} = catch_error(:tensor_blob_ipc.export(make_ref()))
      assert_received {:event, [:tensor_blob, :transfer, :start], _, %{function: {:tensor_blob_ipc, :export, 1}}}

      assert_received {:event, [:tensor_blob, :transfer, :exception], %{duration: _},
                       %{function: {:tensor_blob_ipc, :export, 1}, kind: :error, reason: {:badarg, _}}}

      refute_events()
    end

    test "a first event does not measure loading the library" do
      # In a VM of its own, where nothing is loaded yet: when the first
      # copy's span starts, the NIF library (and libtorch with it) is
      # loaded already, so the span holds the copy alone. Asked of the VM,
      # not timed: a loaded machine cannot change the answer.
      ebins = Enum.map([:tensor_blob, :telemetry], &Path.dirname(:code.which(&1)))

      code = ~S'''
      {:ok, _} = Application.ensure_all_started(:telemetry)
      me = self()
      loaded = fn -> :erlang.module_loaded(:tensor_blob_nif) end
      :telemetry.attach("first", [:tensor_blob, :copy, :start], fn _, _, _, _ -> send(me, {:start, loaded.()}) end, nil)
      before = loaded.()
      TensorBlob.Tensor.from_binary(<<0::192>>, :uint8, {24})
      receive do
        {:start, at_start} -> IO.puts("loaded: before=#{before} at_start=#{at_start}")
      after
        5000 -> IO.puts("no event")
      end
      '''

      {out, 0} = System.cmd("elixir", Enum.flat_map(ebins, &["-pa", &1]) ++ ["-e", code], stderr_to_stdout: true)
      # Not loaded before the first call (else the test shows nothing),
      # loaded when its span starts.
      assert out =~ "loaded: before=false at_start=true", out
    end

    test "the events have what the guide's Telemetry.Metrics definitions need" do
      # Telemetry.Metrics reads a metric's name as an event name and a
      # measurement ("tensor_blob.copy.stop.duration": the event
      # [:tensor_blob, :copy, :stop], its :duration), and takes its tags
      # from the event's metadata (after tag_values). The definitions are
      # the guide's own.
      guide = File.read!(Path.expand("../guides/telemetry.md", __DIR__))
      metrics = Regex.scan(~r/^\s+(counter|sum|summary|distribution|last_value)\("([a-z_.]+)"(.*)$/m, guide)
      assert length(metrics) >= 3

      t = t64()
      _ = Tensor.to_binary(Tensor.transpose(t, 0, 1), copy: :if_needed)
      _ = IPC.export(t)
      received = drain()

      for [_, _type, name, rest] <- metrics do
        {event, [measurement]} = name |> String.split(".") |> Enum.map(&String.to_atom/1) |> Enum.split(-1)

        tags =
          for [_, tag] <- Regex.scan(~r/:([a-z_]+)/, List.first(Regex.run(~r/tags: \[([^\]]*)\]/, rest) || [""])),
              do: String.to_atom(tag)

        matching = for {^event, measurements, meta} <- received, do: {measurements, meta}
        assert matching != [], "no #{inspect(event)} event for #{name}"

        for {measurements, meta} <- matching do
          assert is_number(Map.get(measurements, measurement)), "#{name}: #{inspect(measurements)}"
          for tag <- tags, do: assert(Map.has_key?(meta, tag), "#{name}: no tag #{tag} in #{inspect(meta)}")
        end
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
