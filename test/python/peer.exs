# The BEAM side of test/python/sharing_test.py: reads one command a line
# from stdin, answers one line on stdout ("ok ..." or "error <message>").
#
#   open NAME N                  a float32 {N} tensor over a region (IPC.open)
#   read NAME                    its values
#   set NAME I VALUE             element I := VALUE (write!)
#   drop NAME                    forget it and collect: the last tensor is freed
#   export_torch VALUES          a new float32 tensor, exported in PyTorch's format
#   export VALUES                a new float32 tensor, exported as a plain region
#   memory NAME                  Tensor.memory/1
#   tensors                      live tensors (TensorBlob.stats/0)
#
# The loop collects its garbage after each command, before it answers: a
# dropped tensor is freed by then.
alias TensorBlob.{IPC, Tensor}

defmodule Peer do
  def values(t), do: for(<<x::float-32-native <- Tensor.to_binary(t)>>, do: x)

  def floats(list), do: for(v <- list, into: <<>>, do: <<String.to_float(v)::float-32-native>>)

  def reply(words), do: Enum.join(["ok" | Enum.map(words, &to_string/1)], " ")

  def export(values, fun) do
    t = Tensor.from_binary(floats(values), :float32, {length(values)})
    fun.(t)
  end

  def run(held) do
    case IO.gets("") do
      :eof ->
        :ok

      line ->
        {answer, held} =
          try do
            command(String.split(String.trim(line)), held)
          rescue
            e -> {"error " <> String.replace(Exception.message(e), "\n", " "), held}
          end

        :erlang.garbage_collect()
        IO.puts(answer)
        run(held)
    end
  end

  defp command(["open", name, n], held) do
    t = IPC.open(name, :float32, {String.to_integer(n)})
    {reply(values(t)), Map.put(held, name, t)}
  end

  defp command(["read", name], held) do
    {reply(values(Map.fetch!(held, name))), held}
  end

  defp command(["set", name, i, v], held) do
    t = Map.fetch!(held, name)
    i = String.to_integer(i)
    Tensor.write!(Tensor.narrow(t, 0, i, 1), floats([v]))
    {reply([]), held}
  end

  defp command(["drop", name], held) do
    {reply([]), Map.delete(held, name)}
  end

  defp command(["export_torch" | values], held) do
    h = export(values, &IPC.export_torch/1)
    {reply([h.handle, h.data_size]), Map.put(held, h.handle, h.tensor)}
  end

  defp command(["export" | values], held) do
    h = export(values, &IPC.export/1)
    {reply([h.handle, h.data_size]), Map.put(held, h.handle, h.tensor)}
  end

  defp command(["memory", name], held) do
    {reply([Tensor.memory(Map.fetch!(held, name))]), held}
  end

  defp command(["tensors"], held) do
    {reply([TensorBlob.stats().tensors]), held}
  end
end

IO.puts(Peer.reply(["ready"]))
Peer.run(%{})
