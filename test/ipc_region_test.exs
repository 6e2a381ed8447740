defmodule TensorBlob.IPCRegionTest do
  # Shared-memory regions that other programs change: shrunk under a
  # mapping, sparse on a full /dev/shm, creators in other PID namespaces,
  # creators killed. The cases that need a mount or PID namespace run under
  # `unshare` and say so when it is refused here.
  use ExUnit.Case, async: false

  alias TensorBlob.{IPC, Tensor}
  alias TensorBlob.Test.Lifetime

  defp shm_path(name), do: "/dev/shm" <> name
  defp ebin, do: Path.dirname(:code.which(:tensor_blob))

  defp vanished?(fun) do
    fun.()
    false
  rescue
    e in TensorBlob.Error -> e.message =~ "vanished under the copy"
  end

  # Waits up to ~30 s for a condition (a loaded machine, an ASan build).
  defp eventually(fun), do: TensorBlob.Test.Shm.eventually(fun, 600, 50)

  # A region opened here that another program shrinks to nothing.
  defp shrunk_region(shape) do
    size = Tuple.product(shape)
    handle = IPC.export(IPC.zeros(shape, :uint8))
    opened = IPC.open(handle.handle, :uint8, shape)
    Tensor.write!(opened, :binary.copy(<<7>>, size))
    {_, 0} = System.cmd("truncate", ["-s", "0", shm_path(handle.handle)])
    {handle, opened}
  end

  describe "a region another program shrinks" do
    test "every copy the library makes of it raises, and the VM lives on" do
      {handle, o} = shrunk_region({256, 256})
      assert vanished?(fn -> Tensor.to_binary(o) end)
      assert vanished?(fn -> Tensor.to_binary(Tensor.transpose(o, 0, 1)) end)
      assert vanished?(fn -> Tensor.to_binary(Tensor.narrow(o, 0, 255, 1)) end)
      assert vanished?(fn -> Tensor.write!(o, :binary.copy(<<1>>, 65536)) end)
      assert vanished?(fn -> Tensor.write!(Tensor.transpose(o, 0, 1), :binary.copy(<<1>>, 65536)) end)
      assert vanished?(fn -> Tensor.to_device(o, :cpu) end)
      assert vanished?(fn -> IPC.export(Tensor.narrow(o, 0, 0, 2)) end)
      # The creator's own mapping is the same file: shrunk too.
      assert vanished?(fn -> Tensor.to_binary(handle.tensor) end)
      # A view that pins the region's tensor reads the same memory.
      %{tensor: pinned} = TensorBlob.from_blob(TensorBlob.to_blob(o), owner: o)
      assert vanished?(fn -> Tensor.to_binary(pinned) end)
      # Memory libtorch allocated is copied as before, on the same threads.
      t = Tensor.from_binary(:binary.copy(<<1, 2, 3, 4>>, 16), :uint8, {8, 8})

      assert Tensor.to_binary(Tensor.transpose(t, 0, 1)) ==
               for(i <- 0..7, j <- 0..7, into: <<>>, do: <<rem(j * 8 + i, 4) + 1>>)
    end

    test "a fault outside the library's copies still kills, as before (the guard chains)" do
      # In another OS process: a read of an opted-in zero-copy binary after
      # the shrink is a read by BEAM code, which no guard covers.
      code = """
      T = tensor_blob_ipc:zeros({65536}, uint8),
      \#{handle := Name} = tensor_blob_ipc:export(T),
      O = tensor_blob_ipc:open(Name, uint8, {65536}),
      B = tensor_blob:to_binary(O, \#{copy => false, unsafe_shared_memory => true}),
      os:cmd("truncate -s 0 /dev/shm" ++ binary_to_list(Name)),
      R = try tensor_blob:to_binary(O) of _ -> copied catch error:{tensor_blob, _} -> raised end,
      erlang:display({guarded, R}),
      erlang:display({sum, lists:sum(binary_to_list(B))}),
      halt(0).
      """

      {out, status} = System.cmd("erl", ["-noshell", "-pa", ebin(), "-eval", code], stderr_to_stdout: true)
      assert out =~ "{guarded,raised}"
      refute out =~ "{sum,"
      # SIGBUS (or an abort, where a sanitizer's handler was installed first).
      assert status > 128
    end
  end

  describe "copies on the calling thread" do
    test "strided reads and writes of region memory, for every dtype, match the row-major model" do
      for dtype <- TensorBlob.dtypes() do
        t = IPC.zeros({3, 5}, dtype)
        size = TensorBlob.to_blob(t).element_size
        bytes = :crypto.strong_rand_bytes(15 * size)
        # A bool tensor's bytes are 0 and 1.
        bytes = if dtype == :bool, do: for(<<b <- bytes>>, into: <<>>, do: <<rem(b, 2)>>), else: bytes
        elements = for i <- 0..14, do: binary_part(bytes, i * size, size)
        # Written through the transpose ({5, 3}): element (i, j) lands at (j, i).
        Tensor.write!(Tensor.transpose(t, 0, 1), bytes)
        assert Tensor.to_binary(Tensor.transpose(t, 0, 1)) == bytes, inspect(dtype)
        expected = for j <- 0..2, i <- 0..4, into: <<>>, do: Enum.at(elements, i * 3 + j)
        assert Tensor.to_binary(t) == expected, inspect(dtype)
        assert Tensor.to_binary(Tensor.to_device(Tensor.transpose(t, 0, 1), :cpu)) == bytes, inspect(dtype)
      end
    end
  end

  describe "zero-copy binaries of region memory" do
    test "are refused by default, with the opt-in named; copy: :if_needed copies" do
      t = IPC.zeros({64}, :uint8)
      Tensor.write!(t, :binary.copy(<<5>>, 64))
      o = IPC.open(IPC.export(t).handle, :uint8, {64})
      %{tensor: pinned} = TensorBlob.from_blob(TensorBlob.to_blob(o), owner: o)
      %{tensor: in_term} = TensorBlob.from_blob(Map.delete(TensorBlob.to_blob(o), :owner), owner: {o})
      imported = TensorBlob.DLPack.import(TensorBlob.DLPack.consume(TensorBlob.DLPack.export(o)))

      for tensor <- [t, o, Tensor.narrow(o, 0, 8, 8), pinned, in_term, imported] do
        e = assert_raise ArgumentError, fn -> Tensor.to_binary(tensor, copy: false) end
        assert e.message =~ "shared-memory region"
        assert e.message =~ "unsafe_shared_memory: true"
      end

      views = TensorBlob.stats().binaries
      copy = Tensor.to_binary(o, copy: :if_needed)
      assert copy == :binary.copy(<<5>>, 64)
      assert TensorBlob.stats().binaries == views
      # Memory libtorch allocated is still viewed.
      plain = Tensor.from_binary(<<1, 2, 3, 4>>, :uint8, {4})
      bin = Tensor.to_binary(plain, copy: :if_needed)
      assert TensorBlob.stats().binaries == views + 1
      assert bin == <<1, 2, 3, 4>>

      for bad <- [[copy: false, unsafe_shared_memory: 1], [copy: :maybe], [unsafe: true], :x] do
        assert_raise ArgumentError, fn -> Tensor.to_binary(o, bad) end
      end
    end

    test "the opt-in binary keeps the region mapped after everything else is dropped" do
      start = Lifetime.settled_stats()

      bin =
        Lifetime.in_process(fn ->
          t = IPC.zeros({4096}, :uint8)
          o = IPC.open(IPC.export(t).handle, :uint8, {4096})
          Tensor.write!(o, :binary.copy(<<1, 2, 3, 4>>, 1024))
          Tensor.to_binary(Tensor.narrow(o, 0, 4, 4092), copy: false, unsafe_shared_memory: true)
        end)

      Lifetime.collect()
      assert TensorBlob.stats().binaries == start.binaries + 1
      assert bin == binary_part(:binary.copy(<<1, 2, 3, 4>>, 1024), 4, 4092)
    end
  end

  describe "a sparse region on a full /dev/shm" do
    @tag :mount_ns
    test "is refused at open when its pages do not fit; one that fits is reserved and written" do
      # Regions sized with ftruncate alone (truncate(1), as Python's
      # multiprocessing.shared_memory makes them), in a 1 MiB /dev/shm.
      script = """
      mount -t tmpfs -o size=1m tmpfs /dev/shm || exit 77
      truncate -s 4M /dev/shm/sparse_big && truncate -s 768K /dev/shm/sparse_fits || exit 78
      exec erl -noshell -pa #{ebin()} -eval '
        Big = try tensor_blob_ipc:open(<<"sparse_big">>, uint8, {4194304}) of
                  T -> _ = tensor_blob:write(T, binary:copy(<<1>>, 4194304)), opened
              catch error:{tensor_blob, M} -> M end,
        io:format("big=~s~n", [Big]),
        F = tensor_blob_ipc:open(<<"sparse_fits">>, uint8, {786432}),
        _ = tensor_blob:write(F, binary:copy(<<3>>, 786432)),
        io:format("fits=~p~n", [lists:usort(binary_to_list(tensor_blob:to_binary(F)))]),
        halt().'
      """

      case System.cmd("unshare", ["-m", "sh", "-c", script], stderr_to_stdout: true) do
        {out, 0} ->
          assert out =~ "big=ipc: the shared memory"
          assert out =~ "do not fit in /dev/shm"
          assert out =~ "fits=[3]"

        {out, status} ->
          flunk("the VM exited with #{status}:\n" <> out)
      end
    end
  end

  describe "creators judged alive by a lock, not by a pid" do
    # A token of a creator that never ran here: its pid says nothing.
    defp fake_token(pid), do: "#{pid}-" <> Base.encode16(:crypto.strong_rand_bytes(8), case: :lower)

    test "a name whose lock is free is reclaimed, whatever pid it carries; a held lock keeps it" do
      # Loaded first: loading reclaims too.
      _ = IPC.reclaim()
      dead = fake_token(1)
      live = fake_token(:os.getpid())
      for token <- [dead, live], file <- [".lock", ".0"], do: File.write!("/dev/shm/tensor_blob.#{token}#{file}", "")
      # Another process holds the live one's lock, as its creator would.
      lock = "/dev/shm/tensor_blob.#{live}.lock"
      holder = Port.open({:spawn_executable, System.find_executable("flock")}, args: ["-o", lock, "sleep", "30"])
      {:os_pid, holder_pid} = Port.info(holder, :os_pid)
      assert eventually(fn -> match?({_, 1}, System.cmd("flock", ["-n", lock, "true"])) end)

      try do
        assert IPC.reclaim() >= 1
        refute File.exists?("/dev/shm/tensor_blob.#{dead}.0")
        refute File.exists?("/dev/shm/tensor_blob.#{dead}.lock")
        assert File.exists?("/dev/shm/tensor_blob.#{live}.0")
      after
        System.cmd("kill", ["#{holder_pid}"])
      end

      assert eventually(fn -> IPC.reclaim() >= 0 and not File.exists?("/dev/shm/tensor_blob.#{live}.0") end)
    end

    @tag :pid_ns
    test "a VM in another PID namespace leaves a live creator's regions alone" do
      t = IPC.zeros({16}, :uint8)
      Tensor.write!(t, :binary.copy(<<9>>, 16))
      handle = IPC.export(t)
      # Its kill(our pid, 0) says ESRCH there; loading tensor_blob reclaims.
      code = "io:format(\"reclaimed=~p~n\", [tensor_blob_ipc:reclaim()]), halt()."

      case System.cmd("unshare", ["--pid", "--fork", "erl", "-noshell", "-pa", ebin(), "-eval", code],
             stderr_to_stdout: true
           ) do
        {out, 0} ->
          assert out =~ "reclaimed="
          assert File.exists?(shm_path(handle.handle))
          assert Tensor.to_binary(IPC.open(handle.handle, :uint8, {16})) == :binary.copy(<<9>>, 16)

        {out, _} ->
          flunk(out)
      end
    end

    @tag :pid_ns
    test "a creator that was pid 1 of its namespace: another pid 1 reclaims its names" do
      make = """
      T = tensor_blob_ipc:zeros({16}, uint8),
      \#{handle := N} = tensor_blob_ipc:export(T),
      io:format("name=~s pid=~s~n", [N, os:getpid()]), halt(0).
      """

      reclaim = "io:format(\"reclaimed=~p~n\", [tensor_blob_ipc:reclaim()]), halt()."

      run = fn code ->
        System.cmd("unshare", ["--pid", "--fork", "erl", "-noshell", "-pa", ebin(), "-eval", code],
          stderr_to_stdout: true
        )
      end

      case run.(make) do
        {out, 0} ->
          [_, name, pid] = Regex.run(~r/name=(\S+) pid=(\d+)/, out)
          assert pid == "1"
          {_, 0} = run.(reclaim)
          assert eventually(fn -> not File.exists?(shm_path(name)) end)

        {out, _} ->
          flunk(out)
      end
    end
  end

  describe "a creator killed with SIGKILL" do
    test "its names are removed within seconds, and mappings elsewhere stay readable" do
      code = """
      T = tensor_blob_ipc:zeros({4096}, uint8),
      _ = tensor_blob:write(T, binary:copy(<<42>>, 4096)),
      \#{handle := N} = tensor_blob_ipc:export(T),
      io:format("name=~s pid=~s~n", [N, os:getpid()]),
      receive never -> T end.
      """

      port =
        Port.open({:spawn_executable, System.find_executable("erl")},
          args: ["-noshell", "-pa", ebin(), "-eval", code],
          line: 1024
        )

      {name, pid} =
        receive do
          {^port, {:data, {:eol, line}}} ->
            [_, name, pid] = Regex.run(~r/name=(\S+) pid=(\d+)/, to_string(line))
            {name, pid}
        after
          30_000 -> flunk("the creator printed nothing")
        end

      opened = IPC.open(name, :uint8, {4096})
      {_, 0} = System.cmd("kill", ["-9", pid])
      assert eventually(fn -> not File.exists?(shm_path(name)) end), "#{name} outlived its creator"
      assert Tensor.to_binary(opened) == :binary.copy(<<42>>, 4096)
    end
  end
end
