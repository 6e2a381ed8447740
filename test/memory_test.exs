defmodule TensorBlob.MemoryTest do
  # What memory is (memory/1, read-only) for every kind of tensor, the
  # guards that keep binaries immutable, dirty scheduling of copies, and the
  # cases an adversarial user tried: deep chains, capsule owners, overflowing
  # strides, pointer wrap, empty regions, halted creators.
  use ExUnit.Case, async: false

  alias TensorBlob.{BlobView, DLPack, IPC, Tensor}
  alias TensorBlob.Test.Lifetime

  defp f32s(list), do: for(x <- list, into: <<>>, do: <<x::float-32-native>>)

  defp badarg_message(fun) do
    try do
      fun.()
      flunk("expected an ArgumentError")
    rescue
      e in ArgumentError -> e.message
    end
  end

  # Runs Erlang code in a fresh BEAM (extra flags first) and returns its output.
  defp in_os_process(code, flags) do
    ebin = Path.dirname(:code.which(:tensor_blob))
    args = flags ++ ["-noshell", "-pa", ebin, "-eval", code <> ", halt()."]
    {out, status} = System.cmd("erl", args, stderr_to_stdout: true)
    {out, status}
  end

  describe "memory/1 says what the memory is, for every kind" do
    test "owned, pinned (term owners), unpinned; a view of one of our tensors answers as that tensor" do
      t = Tensor.zeros({8}, :float32)
      assert Tensor.memory(t) == :owned
      blob = TensorBlob.to_blob(t)
      %BlobView{tensor: by_tensor} = TensorBlob.from_blob(blob)
      %BlobView{tensor: by_term} = TensorBlob.from_blob(Map.delete(blob, :owner), owner: {:keep, t})
      unpinned = TensorBlob.from_blob(blob, owner: :none)
      # A view of our own tensor shares its storage, as a slice does.
      assert Tensor.memory(by_tensor) == :owned
      assert Tensor.memory(by_term) == :pinned
      assert Tensor.memory(unpinned) == :unpinned
      # Slices answer as what they view.
      assert Tensor.memory(Tensor.narrow(by_term, 0, 2, 3)) == :pinned
      assert Tensor.memory(Tensor.narrow(unpinned, 0, 2, 3)) == :unpinned
    end

    test "a DLPack import, and its slices" do
      t = DLPack.import(DLPack.consume(DLPack.export(Tensor.zeros({2, 3}, :int32))))
      assert Tensor.memory(t) == :dlpack
      assert Tensor.memory(Tensor.transpose(t, 0, 1)) == :dlpack
      assert Tensor.pinned?(t)
    end

    test "a view of a binary, by from_binary and by from_blob with a binary owner" do
      bin = :binary.copy(f32s([1]), 64)
      view = Tensor.from_binary(bin, :float32, {64}, copy: false)
      assert Tensor.memory(view) == :binary

      %BlobView{tensor: v} =
        TensorBlob.from_blob(%{ptr: TensorBlob.to_blob(view).ptr, shape: {64}, dtype: :float32}, owner: bin)

      assert Tensor.memory(v) == :binary
    end

    test "a shared-memory region, made here or opened" do
      t = IPC.zeros({16}, :uint8)
      assert Tensor.memory(t) == :ipc
      handle = IPC.export(t)
      opened = IPC.open(handle, :uint8, {16})
      assert Tensor.memory(opened) == :ipc
      assert Tensor.memory(Tensor.narrow(opened, 0, 4, 4)) == :ipc
      refute Tensor.pinned?(t)
    end
  end

  describe "read-only memory stays read-only" do
    test "through a wrapped owner, and through an unpinned alias (the memory decides, not the owner term)" do
      bin = :binary.copy(f32s([7]), 32)
      ro = Tensor.from_binary(bin, :float32, {32}, copy: false)
      spec = Map.delete(TensorBlob.to_blob(ro), :owner)
      %BlobView{tensor: wrapped} = TensorBlob.from_blob(spec, owner: {ro})
      assert badarg_message(fn -> Tensor.write!(wrapped, f32s(List.duplicate(0, 32))) end) =~ "read-only"
      alias_view = TensorBlob.from_blob(spec, owner: :none)
      assert badarg_message(fn -> Tensor.write!(alias_view, f32s(List.duplicate(0, 32))) end) =~ "read-only"
      assert bin == :binary.copy(f32s([7]), 32)
      # A read-only tensor is exported read-only too.
      assert DLPack.info(DLPack.export(wrapped)).read_only
    end

    test "a binary view of a region guards a second mapping of the same region" do
      t = IPC.zeros({64}, :uint8)
      handle = IPC.export(t)
      bin = Tensor.to_binary(t, copy: false, unsafe_shared_memory: true)
      second = IPC.open(handle.handle, :uint8, {64})
      assert badarg_message(fn -> Tensor.write!(second, :binary.copy(<<1>>, 64)) end) =~ "to_binary(copy: false)"
      assert bin == :binary.copy(<<0>>, 64)
      # A slice of the second mapping overlapping the binary is refused too,
      # one that does not overlap... does not exist here: the binary shows all.
      assert badarg_message(fn -> Tensor.write!(Tensor.narrow(second, 0, 60, 4), <<1, 2, 3, 4>>) end) =~
               "to_binary(copy: false)"

      _ = bin
      Lifetime.collect()
    end
  end

  describe "copies run on a dirty scheduler when large" do
    test "a process on the only normal scheduler keeps running during a 256 MiB misaligned copy" do
      # +S 1: one normal scheduler. A copy on it would stop every other
      # process for its whole length; on a dirty scheduler it does not.
      #
      # The copy runs in a process of its own that reports and exits. On
      # OTP 25.2 (erts 13.1.5, Debian 12) a process that goes on running
      # Erlang code after a long dirty NIF, while another process ran on the
      # normal scheduler meanwhile, sometimes dies from a jump to a heap
      # address: an emulator bug, reproduced with crypto:hash/2 alone and
      # never on OTP 27 (see guides/building.md, "Known problem").
      code = """
      Big = binary:copy(<<7>>, 256 * 1024 * 1024 + 1),
      Part = binary:part(Big, 1, 256 * 1024 * 1024),
      Self = self(),
      Ticker = spawn(fun Loop() -> Self ! {tick, erlang:monotonic_time(millisecond)}, receive stop -> ok after 1 -> Loop() end end),
      T0 = erlang:monotonic_time(millisecond),
      {_, Copier} = spawn_monitor(fun() ->
          T = tensor_blob:from_binary(Part, float32, {64 * 1024 * 1024}, \#{copy => if_needed}),
          Self ! {copied, erlang:monotonic_time(millisecond), tensor_blob:memory(T)}
        end),
      {T1, owned} = receive {copied, At1, Memory} -> {At1, Memory} end,
      receive {'DOWN', Copier, process, _, normal} -> ok end,
      Ticker ! stop,
      Ticks = fun Collect(Acc) -> receive {tick, At} -> Collect([At | Acc]) after 100 -> Acc end end,
      During = [At || At <- Ticks([]), At > T0 + 5, At < T1 - 5],
      io:format("copy_ms=~p ticks_during=~p~n", [T1 - T0, length(During)])
      """

      {out, 0} = in_os_process(code, ["+S", "1:1", "+SDcpu", "2:2"])
      [_, ms, ticks] = Regex.run(~r/copy_ms=(\d+) ticks_during=(\d+)/, out)
      {ms, ticks} = {String.to_integer(ms), String.to_integer(ticks)}
      # Only meaningful when the copy took long enough to tick through.
      if ms > 40, do: assert(ticks > 0, "no tick in #{ms} ms: the copy held the scheduler")
    end
  end

  describe "chains of views" do
    # 30,000 views, each made from the one before by `step`, dropped at
    # once: freed without overflowing the stack, the last one reading the
    # first one's data.
    defp assert_chain_freed(step, memory) do
      Lifetime.assert_freed_after(fn ->
        t0 = Tensor.from_binary(f32s([1, 2, 3, 4]), :float32, {4})
        t = Enum.reduce(1..30_000, t0, fn _, p -> step.(p) end)
        assert Tensor.memory(t) == memory
        assert Tensor.to_binary(t) == f32s([1, 2, 3, 4])
        :ok
      end)
    end

    test "30,000 DLPack round trips, dropped at once, are freed without overflowing the stack" do
      # Through the address: each import holds the previous tensor's
      # export (a capsule imported as it is would give its tensor back).
      assert_chain_freed(fn p -> p |> DLPack.export() |> DLPack.consume() |> DLPack.import() end, :dlpack)
    end

    test "30,000 pins of pins, dropped at once" do
      # A term owner: each view pins one holding the previous view.
      assert_chain_freed(
        fn p ->
          %BlobView{tensor: v} = TensorBlob.from_blob(TensorBlob.to_blob(p), owner: {:keep, p})
          v
        end,
        :pinned
      )
    end
  end

  describe "hardening" do
    test "a view pinning a capsule keeps the memory alive when someone else imports and drops it" do
      capsule = DLPack.export(Tensor.from_binary(:binary.copy(<<9>>, 65536), :uint8, {65536}))
      ptr = DLPack.info(capsule).ptr
      %BlobView{tensor: view} = TensorBlob.from_blob(%{ptr: ptr, shape: {65536}, dtype: :uint8}, owner: capsule)
      Lifetime.in_process(fn -> DLPack.import(capsule) && :ok end)
      Lifetime.churn()
      assert Tensor.to_binary(view) == :binary.copy(<<9>>, 65536)
    end

    test "strides that overflow when sliced are refused even with a dimension of 0" do
      t = Tensor.zeros({4}, :float32)
      ptr = TensorBlob.to_blob(t).ptr

      msg =
        badarg_message(fn ->
          TensorBlob.from_blob(%{ptr: ptr, shape: {2, 0}, strides: [2 ** 63 - 1, 1], dtype: :float32}, owner: t)
        end)

      assert msg =~ "strides: the byte extent overflows 64 bits"
    end

    test "a pointer whose extent wraps the address space is the pointer's fault" do
      msg =
        badarg_message(fn -> TensorBlob.from_blob(%{ptr: 2 ** 64 - 16, shape: {8}, dtype: :float32}, owner: :none) end)

      assert msg =~ "ptr: the memory would wrap past the end of the address space"
    end

    test "to_blob's struct name must be an atom" do
      t = Tensor.zeros({2}, :uint8)

      for bad <- [2, "name", {:a}, 1.5] do
        assert {:badarg, msg} = catch_error(:tensor_blob.to_blob(Tensor.ref(t), %{struct: bad}))
        assert msg =~ "struct: expected a module name"
      end
    end

    test "opening an empty region a thousand times leaves no mapping behind" do
      t = IPC.zeros({0}, :uint8)
      handle = IPC.export(t)
      # Counts the mappings of this region alone: the VM's allocators and
      # other tests map memory of their own meanwhile.
      region_maps = fn ->
        File.read!("/proc/self/maps") |> String.split("\n") |> Enum.count(&String.contains?(&1, handle.handle))
      end

      maps_before = region_maps.()

      for _ <- 1..1000 do
        assert Tensor.shape(IPC.open(handle, :uint8, {0})) == {0}
      end

      Lifetime.collect()
      assert region_maps.() == maps_before
    end

    test "a region that does not fit in /dev/shm is refused, not a SIGBUS later" do
      ebin = Path.dirname(:code.which(:tensor_blob))

      script = """
      mount -t tmpfs -o size=1m tmpfs /dev/shm || exit 77
      exec erl -noshell -pa #{ebin} -eval '
        R = try tensor_blob_ipc:zeros({4194304}, uint8) of _ -> made catch error:{tensor_blob, M} -> M end,
        io:format("~s~n", [R]),
        T = tensor_blob:from_binary(binary:copy(<<1>>, 4194304), uint8, {4194304}),
        E = try tensor_blob_ipc:export(T) of _ -> made catch error:{tensor_blob, M2} -> M2 end,
        io:format("~s~n", [E]), halt().'
      """

      case System.cmd("unshare", ["-m", "sh", "-c", script], stderr_to_stdout: true) do
        {out, 0} ->
          assert out =~ "a region of 4194304 bytes does not fit in /dev/shm"
          refute out =~ "made"

        {_out, _} ->
          # No mount namespace here (not root, or no unshare): nothing to test.
          :ok
      end
    end
  end
end
