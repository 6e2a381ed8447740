defmodule TensorBlob.Test.Holder do
  @moduledoc false
  # A process, on any node that has this module, that holds one tensor
  # (made there by an MFA) and runs calls on it, so that a test can drop
  # the tensor on one node while another still holds its own.

  @doc "Starts a holder on node whose tensor is apply(m, f, a) there."
  def start(node, {m, f, a}) do
    parent = self()
    pid = Node.spawn(node, fn -> init(parent, m, f, a) end)

    receive do
      {^pid, :ready} -> pid
      {^pid, :failed, reason} -> raise "holder on #{node}: #{inspect(reason)}"
    after
      30_000 -> raise "holder on #{node} did not start"
    end
  end

  @doc "apply(m, f, [tensor | args]) in the holder; raises what it raised."
  def call(pid, m, f, args \\ []) do
    send(pid, {:call, self(), {m, f, args}})

    receive do
      {^pid, :ok, value} -> value
      {^pid, :error, e, stack} -> reraise e, stack
    after
      30_000 -> raise "holder #{inspect(pid)} did not answer"
    end
  end

  @doc """
  Nodes.unpack(packed), for a holder started with a prefix of any size
  ahead of the packed term in the message that starts it.
  """
  def unpack_after(_prefix, packed), do: TensorBlob.Nodes.unpack(packed)

  @doc "Forgets the tensor and collects; returns once it is freed."
  def drop(pid), do: call(pid, __MODULE__, :forget)

  @doc "Whether the holder's OS process maps a file whose path contains name."
  def maps?(name), do: File.read!("/proc/self/maps") |> String.contains?(name)

  @doc """
  A region tensor of `bytes` (float32) made in the calling process and
  returned packed for `to` (`TensorBlob.Nodes.pack/3` with `opts`): run
  remotely (`:erpc.call/4`), nothing but the packed term keeps the tensor
  once the call's process ends.
  """
  def pack_fresh(bytes, to, opts) do
    t = TensorBlob.IPC.torch_zeros({div(byte_size(bytes), 4)}, :float32)
    TensorBlob.Tensor.write!(t, bytes)
    TensorBlob.Nodes.pack(t, to, opts)
  end

  defp init(parent, m, f, a) do
    tensor = apply(m, f, a)
    send(parent, {self(), :ready})
    hold(tensor)
  rescue
    e -> send(parent, {self(), :failed, e})
  end

  # loop/1 returns when asked to forget: the tensor is then no longer
  # referenced from any frame, and the collection frees it.
  defp hold(tensor) do
    from = loop(tensor)
    :tensor_blob_test_util.gc_all()
    send(from, {self(), :ok, :ok})
    hold(nil)
  end

  defp loop(tensor) do
    receive do
      {:call, from, {__MODULE__, :forget, _}} ->
        from

      {:call, from, {m, f, args}} ->
        case run(m, f, [tensor | args]) do
          {:ok, value} -> send(from, {self(), :ok, value})
          {:error, e, stack} -> send(from, {self(), :error, e, stack})
        end

        loop(tensor)
    end
  end

  defp run(m, f, args) do
    {:ok, apply(m, f, args)}
  rescue
    e -> {:error, e, __STACKTRACE__}
  end
end
