defmodule TensorBlob.CUDATorchShareTest do
  # PyTorch's CUDA sharing format (storage._share_cuda_()): what is checked
  # before any device is asked, here; the exchange with a PyTorch process,
  # on a GPU (:cuda, excluded elsewhere). The bookkeeping of the counter
  # file and the event decision are unit-tested in c_test/test_cuda.c.
  use ExUnit.Case, async: false

  alias TensorBlob.{CUDA, Tensor}
  alias TensorBlob.Test.Lifetime

  @python "/usr/bin/python3"

  defp f32s(list), do: for(x <- list, into: <<>>, do: <<x::float-32-native>>)

  # A share as PyTorch 1.13 writes one, with a counter file of PyTorch's
  # format whose counter 3 is the receiver's.
  defp share(fields \\ %{}) do
    Map.merge(
      %{
        device: 0,
        handle: :binary.copy(<<7>>, 64),
        storage_size_bytes: 64,
        storage_offset_bytes: 512,
        ref_counter_handle: "/torch_tensor_blob_test_no_such_counter",
        ref_counter_offset: 3,
        event_handle: <<0::512>>,
        event_sync_required: true
      },
      fields
    )
  end

  describe "fields, checked before any device is asked" do
    test "handles of each PyTorch form pass; others are refused, saying why" do
      for handle <- [:binary.copy(<<7>>, 64), <<2, ?c>> <> :binary.copy(<<7>>, 64)] do
        error = catch_open(share(%{handle: handle}), :float32, {16})
        refute match?(%ArgumentError{}, error), inspect(error)
      end

      assert %ArgumentError{message: m} = catch_open(share(%{handle: <<2, ?e>> <> <<0::512>>}), :float32, {16})
      assert m =~ "expandable segments"
      assert %ArgumentError{message: m} = catch_open(share(%{handle: <<0::520>>}), :float32, {16})
      assert m =~ "64 bytes, or 66"
      assert %ArgumentError{message: m} = catch_open(share(%{event_handle: <<0::256>>}), :float32, {16})
      assert m =~ "event_handle"
      assert %ArgumentError{message: m} = catch_open(share(%{event_sync_required: 1}), :float32, {16})
      assert m =~ "event_sync_required"
      assert %ArgumentError{message: m} = catch_open(share(%{ref_counter_offset: -1}), :float32, {16})
      assert m =~ "ref_counter_offset"
      assert %ArgumentError{message: m} = catch_open(Map.delete(share(), :event_handle), :float32, {16})
      assert m =~ "storage._share_cuda_()"
      # The shape must fit in the storage.
      assert %ArgumentError{message: m} = catch_open(share(), :float32, {17})
      assert m =~ "needs 68 bytes; the storage holds 64"
    end

    if not CUDA.available?() do
      test "without CUDA, a well-formed share is a tensor_blob error saying why" do
        assert %TensorBlob.Error{message: m} = catch_open(share(), :float32, {16})
        assert m =~ "a PyTorch CUDA share (device 0)"

        assert m =~
                 ~r/not supported by this build|this libtorch was built without CUDA|no CUDA runtime|no CUDA device/

        # A CPU tensor is no CUDA tensor: said, and no counter file made.
        before = File.ls!("/dev/shm")
        error = assert_raise ArgumentError, fn -> CUDA.export_torch_share(Tensor.zeros({4}, :float32)) end
        assert error.message =~ "a CPU tensor; CUDA IPC shares CUDA tensors"
        assert File.ls!("/dev/shm") -- before == []
      end
    end
  end

  defp catch_open(share, dtype, shape) do
    CUDA.open_torch_share(share, dtype, shape)
    flunk("opened")
  rescue
    e in [ArgumentError, TensorBlob.Error] -> e
  end

  # A Python process with torch and CUDA: the producer or the receiver.
  defp python(script) do
    port = Port.open({:spawn_executable, @python}, [:binary, :exit_status, {:line, 65_536}, args: ["-u", "-c", script]])
    port
  end

  defp read_line(port) do
    receive do
      {^port, {:data, {:eol, line}}} -> line
      {^port, {:exit_status, status}} -> flunk("python exited with #{status}")
    after
      60_000 -> flunk("python said nothing")
    end
  end

  @tag :cuda
  test "with a GPU: a storage PyTorch shares opens at its offset; the counter drops when the last tensor goes" do
    port =
      python("""
      import os, struct, sys, torch
      t = torch.arange(64, dtype=torch.float32, device="cuda:0")
      s = t[16:].storage() if torch.__version__ < "2" else t[16:].untyped_storage()
      d, h, size, off, name, slot, ev, sync = s._share_cuda_()
      print(d, h.hex(), size, off, name.decode(), slot, ev.hex(), int(sync), flush=True)
      sys.stdin.readline()
      fd = os.open("/dev/shm" + name.decode(), os.O_RDONLY)
      os.lseek(fd, 64 + 8 * slot, 0)
      print(struct.unpack("q", os.read(fd, 8))[0], flush=True)
      """)

    [d, h, size, off, name, slot, ev, sync] = port |> read_line() |> String.split(" ")

    share = %{
      device: String.to_integer(d),
      handle: Base.decode16!(h, case: :lower),
      storage_size_bytes: String.to_integer(size),
      storage_offset_bytes: String.to_integer(off),
      ref_counter_handle: name,
      ref_counter_offset: String.to_integer(slot),
      event_handle: Base.decode16!(ev, case: :lower),
      event_sync_required: sync == "1"
    }

    # The storage of t[16:] is t's whole storage: 64 floats.
    view =
      Lifetime.in_process(fn ->
        t = CUDA.open_torch_share(share, :float32, {64})
        assert Tensor.to_binary(t) == f32s(Enum.to_list(0..63))
        # A share opens once: the counter is the receiver's.
        assert_raise ArgumentError, ~r/already released|a share opens once/, fn ->
          CUDA.open_torch_share(share, :float32, {64})
        end

        Tensor.narrow(t, 0, 60, 4)
      end)

    Lifetime.collect()
    assert Tensor.to_binary(view) == f32s([60, 61, 62, 63])
    _ = view
    view = nil
    _ = view
    Lifetime.collect()
    Port.command(port, "go\n")
    assert read_line(port) == "0"
  end

  @tag :cuda
  test "with a GPU: a PyTorch process rebuilds ours with UntypedStorage._new_shared_cuda and drops the counter" do
    path =
      Lifetime.in_process(fn ->
        t = Tensor.to_device(Tensor.from_binary(f32s(Enum.to_list(1..32)), :float32, {32}), {:cuda, 0})
        export = CUDA.export_torch_share(Tensor.narrow(t, 0, 8, 24))
        assert byte_size(export.handle) == 64
        assert export.storage_size_bytes == 96
        assert export.event_sync_required == false
        assert CUDA.torch_share_pending(export) == 1

        fields =
          Enum.map_join(
            [
              export.device,
              Base.encode16(export.handle),
              export.storage_size_bytes,
              export.storage_offset_bytes,
              export.ref_counter_handle,
              export.ref_counter_offset,
              Base.encode16(export.event_handle)
            ],
            " ",
            &to_string/1
          )

        {out, 0} =
          System.cmd(@python, [
            "-c",
            """
            import sys, torch
            d, h, size, off, name, slot, ev = sys.argv[1].split(" ")
            s = torch.UntypedStorage._new_shared_cuda(int(d), bytes.fromhex(h), int(size), int(off),
                                                      name.encode(), int(slot), bytes.fromhex(ev), False)
            x = torch.empty(0, dtype=torch.float32, device="cuda:" + d)
            typed = torch.storage.TypedStorage(wrap_storage=s, dtype=torch.float32)
            x.set_(typed if torch.__version__ < "2" else s, 0, (int(size) // 4,), (1,))
            print(" ".join(str(int(v)) for v in x.tolist()))
            del x, typed, s
            """,
            fields
          ])

        assert out |> String.trim() |> String.split() |> Enum.map(&String.to_integer/1) == Enum.to_list(9..32)
        # The receiver freed its storage: the counter is 0 and the file ours alone.
        assert CUDA.torch_share_pending(export) == 0
        path = "/dev/shm" <> export.ref_counter_handle
        assert File.exists?(path)
        path
      end)

    # Our counter gone too: nothing left in /dev/shm.
    Lifetime.collect()
    refute File.exists?(path)
  end
end
