defmodule TensorBlob.ShmSurfaceTest do
  # What other programs, users and VMs do to shared memory and its names:
  # files planted under the names the library opens, PyTorch-format
  # regions shrunk under their header, VMs that die holding references,
  # lock files deleted, builds upgraded, packed terms forged. Each case
  # runs in its own OS process; files planted by hand live in a private
  # /dev/shm (a mount namespace: `unshare -m`); those cases are tagged
  # :mount_ns, excluded where the machine does not allow one (test_helper.exs).
  use ExUnit.Case, async: false

  alias TensorBlob.{IPC, Nodes, Tensor}
  alias TensorBlob.Test.{Lifetime, Shm}

  @header 64

  defp ebin, do: Path.dirname(:code.which(:tensor_blob))
  defp shm(name), do: Shm.path(name)
  defp refcount(name), do: Shm.refcount(name)
  # Waits up to ~30 s for a condition (a loaded machine, an ASan build).
  defp eventually(fun), do: Shm.eventually(fun, 600, 50)

  # A region laid out as PyTorch lays it out: its process holds one reference.
  defp pytorch_region(data) do
    name = "/torch_#{System.pid()}_#{System.unique_integer([:positive])}_0"
    File.write!(shm(name), <<1::signed-native-32, 0::size(@header - 4)-unit(8), data::binary>>)
    name
  end

  # A shell script in a private /dev/shm (a tmpfs of its own), with
  # TB_CODE in its environment (the test is tagged :mount_ns).
  defp in_private_shm(script, code, tmpfs_options \\ "size=64m") do
    full = "mount -t tmpfs -o #{tmpfs_options} tmpfs /dev/shm || exit 77\n" <> script

    case System.cmd("unshare", ["-m", "sh", "-c", full], stderr_to_stdout: true, env: [{"TB_CODE", code}]) do
      {out, 77} -> flunk("no private /dev/shm although the machine allows one:\n" <> out)
      {out, status} -> {:ok, out, status}
    end
  end

  # The line that runs the Erlang code in TB_CODE in a fresh VM, under
  # `timeout`: a hang fails the test instead of blocking it.
  defp erl_line(seconds \\ 60),
    do: ~s(exec timeout -s KILL #{seconds} erl -noshell -pa #{ebin()} -eval "$TB_CODE")

  defp run_erl(code), do: System.cmd("sh", ["-c", erl_line()], stderr_to_stdout: true, env: [{"TB_CODE", code}])

  # A VM of its own, that prints lines and waits: its port and OS pid.
  defp start_vm(code) do
    port =
      Port.open({:spawn_executable, System.find_executable("erl")},
        args: ["-noshell", "-pa", ebin(), "-eval", code],
        line: 4096
      )

    {:os_pid, pid} = Port.info(port, :os_pid)
    {port, Integer.to_string(pid)}
  end

  defp line(port) do
    receive do
      {^port, {:data, {:eol, line}}} -> to_string(line)
    after
      30_000 -> flunk("the VM printed nothing")
    end
  end

  describe "1. files planted under the names the library opens" do
    @tag :mount_ns
    test "a FIFO as a lock hangs neither load nor reclaim; FIFOs, links and other users' files are refused at open" do
      token = "1-0123456789abcdef"

      script = """
      mkfifo /dev/shm/tensor_blob.#{token}.lock && : > /dev/shm/tensor_blob.#{token}.0 || exit 78
      mkfifo /dev/shm/planted_fifo /dev/shm/torch_planted_fifo
      ln -s /dev/shm/tensor_blob.#{token}.0 /dev/shm/planted_link
      : > /dev/shm/foreign && chown 65534 /dev/shm/foreign || echo nochown
      #{erl_line(30)}
      """

      code = """
      Open = fun(F, N) -> try tensor_blob_ipc:F(N, uint8, {0}) of _ -> opened catch error:{badarg, M} -> M end end,
      io:format("reclaimed=~p~n", [tensor_blob_ipc:reclaim()]),
      io:format("fifo=~ts~n", [Open(open, <<"planted_fifo">>)]),
      io:format("torch_fifo=~ts~n", [Open(torch_open, <<"torch_planted_fifo">>)]),
      io:format("link=~ts~n", [Open(open, <<"planted_link">>)]),
      io:format("foreign=~ts~n", [Open(open, <<"foreign">>)]),
      halt().
      """

      case in_private_shm(script, code) do
        {:ok, out, status} ->
          assert status == 0, "the VM hung or died (#{status}):\n" <> out
          assert out =~ "reclaimed=0"
          assert out =~ ~r/fifo=handle: cannot open shared memory <<"planted_fifo">>: not a regular file/
          assert out =~ ~r/torch_fifo=handle: cannot open shared memory <<"torch_planted_fifo">>: not a regular file/
          assert out =~ ~r/link=handle: cannot open shared memory <<"planted_link">>: a symbolic link, refused/

          unless out =~ "nochown" do
            assert out =~ ~r/foreign=handle: cannot open shared memory <<"foreign">>: the file belongs to another user/
          end
      end
    end
  end

  describe "2. a PyTorch-format region shrunk by another program" do
    test "its tensors raise when read, and freeing them (or stopping the VM) does not kill the VM" do
      # Made here, and opened from a region made PyTorch's way; each shrunk
      # to nothing, read, then dropped with the process that held it; one
      # more is held by a process when the VM stops.
      code = """
      Shrink = fun(N) -> os:cmd("truncate -s 0 /dev/shm" ++ binary_to_list(N)) end,
      Read = fun(T) -> try tensor_blob:to_binary(T) of _ -> read catch error:{tensor_blob, _} -> raised end end,
      Use = fun(Make) ->
          {P, R} = spawn_monitor(fun() -> {T, N} = Make(), Shrink(N), io:format("read=~p~n", [Read(T)]) end),
          receive {'DOWN', R, _, P, _} -> ok end
      end,
      Made = fun() -> T = tensor_blob_ipc:torch_zeros({65536}, uint8),
                      \#{handle := N} = tensor_blob_ipc:torch_export(T), {T, N} end,
      Opened = fun() -> N = list_to_binary("/torch_" ++ os:getpid() ++ "_1_0"),
                        ok = file:write_file("/dev/shm" ++ binary_to_list(N), <<1:32/native, 0:(60*8), 0:(4096*8)>>),
                        {tensor_blob_ipc:open(N, uint8, {4096}), N} end,
      io:format("pid=~s~n", [os:getpid()]),
      Use(Made), Use(Opened),
      ok = file:delete("/dev/shm/torch_" ++ os:getpid() ++ "_1_0"),
      [erlang:garbage_collect(P) || P <- processes()],
      timer:sleep(300),
      io:format("alive~n"),
      Self = self(),
      spawn(fun() -> {T, N} = Made(), Shrink(N), Self ! held, receive never -> T end end),
      receive held -> ok end,
      init:stop().
      """

      {out, status} = run_erl(code)
      assert status == 0, "the VM died (#{status}):\n" <> out
      assert out =~ "read=raised\nread=raised\nalive"
      # The names it made went with it, shrunk as they were.
      [_, pid] = Regex.run(~r/pid=(\d+)/, out)
      left = fn -> Enum.filter(File.ls!("/dev/shm"), &(&1 =~ ~r/tensor_blob\.#{pid}-/)) end
      assert eventually(fn -> left.() == [] end), "left behind: #{inspect(left.())}"
    end
  end

  describe "3. a sparse PyTorch-format region on a full /dev/shm" do
    @tag :mount_ns
    test "is refused at open when its pages do not fit; one that fits is reserved and written" do
      # Sized by ftruncate alone (as PyTorch makes them), a count of 1 in
      # the header, in a 1 MiB /dev/shm.
      script = """
      printf '\\001\\000\\000\\000' > /dev/shm/torch_sparse_big && truncate -s 4M /dev/shm/torch_sparse_big || exit 78
      printf '\\001\\000\\000\\000' > /dev/shm/torch_sparse_fits && truncate -s 768K /dev/shm/torch_sparse_fits || exit 78
      #{erl_line()}
      """

      code = """
      Big = try tensor_blob_ipc:open(<<"torch_sparse_big">>, uint8, {4194240}) of
                T -> _ = tensor_blob:write(T, binary:copy(<<1>>, 4194240)), opened
            catch error:{tensor_blob, M} -> M end,
      io:format("big=~ts~n", [Big]),
      F = tensor_blob_ipc:open(<<"torch_sparse_fits">>, uint8, {786368}),
      _ = tensor_blob:write(F, binary:copy(<<3>>, 786368)),
      io:format("fits=~p~n", [lists:usort(binary_to_list(tensor_blob:to_binary(F)))]),
      halt().
      """

      case in_private_shm(script, code, "size=1m") do
        {:ok, out, status} ->
          assert status == 0, "the VM died (#{status}):\n" <> out
          assert out =~ ~r/big=torch_shm: the shared memory <<"torch_sparse_big">> has 4194304 bytes/
          assert out =~ "do not fit in /dev/shm"
          assert out =~ "fits=[3]"
      end
    end
  end

  describe "4. a VM that dies holding PyTorch-format regions" do
    # It makes a region (ours), makes one nobody else opens (alone), and
    # opens one made PyTorch's way (theirs); then ends as `ending` says.
    defp holder_vm(theirs, ending) do
      code = """
      T = tensor_blob_ipc:torch_zeros({4096}, uint8),
      _ = tensor_blob:write(T, binary:copy(<<42>>, 4096)),
      \#{handle := Ours} = tensor_blob_ipc:torch_export(T),
      Alone = tensor_blob_ipc:torch_zeros({16}, uint8),
      \#{handle := AloneName} = tensor_blob_ipc:torch_export(Alone),
      Theirs = tensor_blob_ipc:open(<<"#{theirs}">>, uint8, {8}),
      io:format("ours=~s alone=~s~n", [Ours, AloneName]),
      #{ending}
      """

      {port, pid} = start_vm(code)
      [_, ours, alone] = Regex.run(~r/ours=(\S+) alone=(\S+)/, line(port))
      {pid, ours, alone}
    end

    for how <- [:kill, :halt] do
      test "its references are dropped within seconds (#{how}), names unlinked at zero, other holders read on" do
        theirs = pytorch_region(:binary.copy(<<5>>, 8))
        on_exit(fn -> File.rm(shm(theirs)) end)

        ending =
          case unquote(how) do
            :kill -> "receive never -> {T, Alone, Theirs} end."
            :halt -> "receive after 500 -> halt(0) end."
          end

        {pid, ours, alone} = holder_vm(theirs, ending)

        Lifetime.in_process(fn ->
          opened = IPC.open(ours, :uint8, {4096})
          assert refcount(ours) == 2
          assert refcount(theirs) == 2
          if unquote(how) == :kill, do: {_, 0} = System.cmd("kill", ["-9", pid])

          assert eventually(fn -> refcount(theirs) == 1 end), "the dead VM's reference in a PyTorch region stayed"
          assert eventually(fn -> refcount(ours) == 1 end), "the dead VM's reference in its own region stayed"
          assert eventually(fn -> not File.exists?(shm(alone)) end), "#{alone} outlived its only holder"
          assert Tensor.to_binary(opened) == :binary.copy(<<42>>, 4096)
        end)

        # This VM was the last holder: dropping its tensor removes the name.
        assert eventually(fn -> not File.exists?(shm(ours)) end), "#{ours} outlived its last holder"
        assert refcount(theirs) == 1
      end
    end
  end

  describe "4. a peer node stopped mid-use" do
    test "its reference in the region is dropped, and this node reads on" do
      {_peer, node, stop} = Shm.start_peer("tb_shm")

      try do
        t = IPC.torch_zeros({1024}, :uint8)
        Tensor.write!(t, :binary.copy(<<9>>, 1024))
        packed = Nodes.pack(t, node, via: :region)
        peer_pid = :erpc.call(node, :os, :getpid, [])
        holder = TensorBlob.Test.Holder.start(node, {Nodes, :unpack, [packed]})
        assert TensorBlob.Test.Holder.call(holder, Tensor, :to_binary) == :binary.copy(<<9>>, 1024)
        assert refcount(packed.handle) == 2
        {_, 0} = System.cmd("kill", ["-9", to_string(peer_pid)])
        assert eventually(fn -> refcount(packed.handle) == 1 end), "the peer's reference stayed"
        assert Tensor.to_binary(t) == :binary.copy(<<9>>, 1024)
      after
        stop.()
      end
    end
  end

  describe "5. a live VM's lock file deleted" do
    test "names made after it are not judged dead by another VM's reclaim" do
      theirs = pytorch_region(:binary.copy(<<5>>, 8))
      on_exit(fn -> File.rm(shm(theirs)) end)

      # It holds a PyTorch region opened before the deletion in a process
      # that drops it on a line from stdin.
      code = """
      Self = self(),
      Holder = spawn(fun() -> Th = tensor_blob_ipc:open(<<"#{theirs}">>, uint8, {8}), Self ! opened,
                              receive drop -> Th =/= x end end),
      receive opened -> ok end,
      T1 = tensor_blob_ipc:zeros({16}, uint8),
      \#{handle := <<"/tensor_blob.", Rest/binary>>} = tensor_blob_ipc:export(T1),
      [Token | _] = binary:split(Rest, <<".">>),
      ok = file:delete("/dev/shm/tensor_blob." ++ binary_to_list(Token) ++ ".lock"),
      T2 = tensor_blob_ipc:zeros({16}, uint8),
      _ = tensor_blob:write(T2, binary:copy(<<7>>, 16)),
      \#{handle := N2} = tensor_blob_ipc:export(T2),
      T3 = tensor_blob_ipc:torch_zeros({16}, uint8),
      \#{handle := N3} = tensor_blob_ipc:torch_export(T3),
      io:format("second=~s torch=~s~n", [N2, N3]),
      _ = io:get_line(""),
      Ref = monitor(process, Holder), Holder ! drop,
      receive {'DOWN', Ref, _, _, _} -> ok end,
      [erlang:garbage_collect(P) || P <- processes()],
      timer:sleep(200),
      io:format("dropped~n"),
      receive never -> {T1, T2, T3} end.
      """

      {port, pid} = start_vm(code)
      [_, second, torch] = Regex.run(~r/second=(\S+) torch=(\S+)/, line(port))

      try do
        # This VM is another VM: its reclaim judges every token but its own.
        _ = IPC.reclaim()
        assert File.exists?(shm(second)), "a live VM's new name was reclaimed"
        assert refcount(torch) == 1
        assert Tensor.to_binary(IPC.open(second, :uint8, {16})) == :binary.copy(<<7>>, 16)
        # The reference it took before the deletion was judged dead and
        # dropped by that reclaim; when it drops its tensor, it is not
        # dropped twice.
        assert refcount(theirs) == 1
        Port.command(port, "go\n")
        assert line(port) == "dropped"
        assert refcount(theirs) == 1
      after
        System.cmd("kill", ["-9", pid])
      end

      assert eventually(fn -> not File.exists?(shm(second)) and not File.exists?(shm(torch)) end)
    end
  end

  describe "6. names across a hot upgrade" do
    test "a new build makes names no earlier build made, while the old build's regions live" do
      source = System.get_env("TENSOR_BLOB_NIF") || Path.join(:code.priv_dir(:tensor_blob), "tensor_blob_nif")
      dir = Path.join(System.tmp_dir!(), "tb_upgrade_#{System.unique_integer([:positive])}")
      File.mkdir_p!(dir)
      on_exit(fn -> File.rm_rf(dir) end)
      copy = Path.join(dir, "tensor_blob_nif")
      File.cp!(source <> ".so", copy <> ".so")
      File.cp!(Path.join(Path.dirname(source), "tensor_blob_reaper"), Path.join(dir, "tensor_blob_reaper"))

      code = """
      Names = fun() -> \#{handle := A} = tensor_blob_ipc:torch_export(tensor_blob_ipc:torch_zeros({4}, uint8)),
                       \#{handle := B} = tensor_blob_ipc:export(tensor_blob_ipc:zeros({4}, uint8)), [A, B] end,
      T = tensor_blob_ipc:torch_zeros({4}, uint8),
      P = tensor_blob_ipc:zeros({4}, uint8),
      true = os:putenv("TENSOR_BLOB_NIF", "#{copy}"),
      {module, tensor_blob_nif} = code:load_file(tensor_blob_nif),
      New = try Names() catch error:E -> E end,
      io:format("new=~p~n", [New]),
      io:format("old=~p~n", [[maps:get(handle, tensor_blob_ipc:torch_export(T)),
                               maps:get(handle, tensor_blob_ipc:export(P))]]),
      halt().
      """

      {out, status} = run_erl(code)
      assert status == 0, out
      assert [_, new] = Regex.run(~r/new=(.*)/, out)
      refute new =~ "File exists", out
      assert new =~ "torch_tensor_blob."
      assert out =~ "old=["
    end
  end

  describe "7. forged packed terms" do
    @tag :mount_ns
    test "a handle naming a plain region or a Python block is refused, and the memory is unchanged" do
      plain = IPC.zeros({128}, :uint8)
      Tensor.write!(plain, :binary.copy(<<7>>, 128))
      forged = fn handle -> %{__tensor_blob_node__: 1, via: :region, handle: handle, dtype: :uint8, shape: {64}} end

      e = assert_raise ArgumentError, fn -> Nodes.unpack(forged.(IPC.export(plain).handle)) end
      assert e.message =~ "PyTorch shared-memory region"
      assert Tensor.to_binary(plain) == :binary.copy(<<7>>, 128)

      # A Python multiprocessing.shared_memory block, in a private /dev/shm.
      script = """
      printf '\\001\\000\\000\\000' > /dev/shm/psm_0123abcd && truncate -s 128 /dev/shm/psm_0123abcd || exit 78
      #{erl_line()}
      """

      code = """
      Packed = \#{'__tensor_blob_node__' => 1, via => region, handle => <<"/psm_0123abcd">>, dtype => uint8, shape => {64}},
      R = try tensor_blob:node_unpack(Packed) of _ -> opened catch error:{badarg, M} -> M end,
      {ok, <<Count:32/native, _/binary>>} = file:read_file("/dev/shm/psm_0123abcd"),
      io:format("unpack=~ts~ncount=~p~n", [R, Count]),
      halt().
      """

      case in_private_shm(script, code) do
        {:ok, out, status} ->
          assert status == 0, out
          assert out =~ ~r/unpack=handle: expected the name of a PyTorch shared-memory region/
          assert out =~ "count=1"
      end

      # A plain open of a PyTorch-format name is refused the same way.
      exported = IPC.export_torch(IPC.torch_zeros({4}, :uint8))

      assert_raise ArgumentError, ~r/names a region of PyTorch's format/, fn ->
        :tensor_blob_nif.ipc_open(exported.handle, :uint8, {4})
      end

      assert Tensor.memory(exported.tensor) == :ipc
    end
  end
end
