defmodule TensorBlob.Test.Shm do
  @moduledoc false
  # Helpers for the tests of shared memory (regions, PyTorch's format,
  # other nodes): bytes, region files and their PyTorch reference count,
  # and waiting for what destructors do.

  alias TensorBlob.Test.Lifetime

  @doc "Native-endian float32 bytes of a list of numbers."
  def floats(list), do: for(x <- list, into: <<>>, do: <<x::float-32-native>>)

  @doc "The file of a shared-memory name, with or without its leading /."
  def path(name), do: "/dev/shm/" <> String.trim_leading(name, "/")

  @doc "The reference count in PyTorch's header of a region: how many mappings hold it (nil when the name is gone)."
  def refcount(name) do
    case File.read(path(name)) do
      {:ok, <<count::signed-native-32, _::binary>>} -> count
      _ -> nil
    end
  end

  @doc "Writes the reference count of a region's PyTorch header."
  def set_refcount(name, count) do
    {:ok, f} = :file.open(path(name), [:read, :write, :raw, :binary])
    :ok = :file.pwrite(f, 0, <<count::signed-native-32>>)
    :ok = :file.close(f)
  end

  @doc """
  Whether fun() turns true within `tries` tries `interval` ms apart,
  collecting garbage before each: destructors run shortly after the
  collection that frees a tensor.
  """
  def eventually(fun, tries \\ 200, interval \\ 10) do
    probe = fn ->
      Lifetime.collect()
      {!!fun.(), nil}
    end

    match?({:ok, _}, :tensor_blob_test_util.poll(probe, tries, interval))
  end

  @doc """
  A peer node on this host with this VM's code path, distribution started
  here first when it is not (under `prefix`). Returns `{peer, node, stop}`:
  `stop.()` stops the peer, and the distribution when this call started it.
  """
  def start_peer(prefix) do
    started =
      if Node.alive?() do
        false
      else
        {_, 0} = System.cmd("epmd", ["-daemon"])
        {:ok, _} = :net_kernel.start([:"#{prefix}_#{System.pid()}@127.0.0.1", :longnames])
        true
      end

    paths = Enum.flat_map(:code.get_path(), &[~c"-pa", &1])
    {:ok, peer, node} = :peer.start(%{name: :peer.random_name(), host: ~c"127.0.0.1", longnames: true, args: paths})

    stop = fn ->
      try do
        :peer.stop(peer)
      catch
        :exit, _ -> :ok
      end

      if started, do: Node.stop()
    end

    {peer, node, stop}
  end

  @doc """
  Ends the keepers on this node (`TensorBlob.Nodes.pack/3` to a region
  spawns one, which holds the tensor until an unpack or `keep:` ms), so
  that a packed term no test unpacks frees its tensor now, not in the
  middle of a later test that counts live tensors.
  """
  def drop_keepers do
    for pid <- Process.list(),
        {:dictionary, dict} <- [Process.info(pid, :dictionary)],
        Keyword.has_key?(dict, :tensor_blob_kept) do
      ref = Process.monitor(pid)
      Process.exit(pid, :kill)
      receive do: ({:DOWN, ^ref, _, _, _} -> :ok)
    end

    :ok
  end
end
