# The BEAM side of test/python/sharing_test.py: reads one command a line
# from stdin, answers one line on stdout ("ok ..." or "error <message>").
#
#   open NAME N                  a float32 {N} tensor over a region (IPC.open)
#   read NAME                    its values
#   set NAME I VALUE             element (or row) I := VALUE (write!)
#   drop NAME                    forget it and collect: the last tensor is freed
#   export_torch VALUES          a new float32 tensor, exported in PyTorch's format
#   export VALUES                a new float32 tensor, exported as a plain region
#   memory NAME                  Tensor.memory/1
#   tensors                      live tensors (TensorBlob.stats/0)
#   pid                          this VM's OS pid (in the names it makes)
#   export_torch_json DTYPE DIMS VALUES
#                                a new DTYPE (float32, int64) tensor of shape
#                                DIMS (2x3), exported in PyTorch's format:
#                                IPC.to_json/1 of the handle
#   export_json DTYPE DIMS VALUES the same, exported as a plain region
#   open_json JSON               IPC.open/1 of a map's JSON: its shape (2x3)
#                                and values; held under the map's handle
#
# The loop collects its garbage after each command, before it answers: a
# dropped tensor is freed by then.
alias TensorBlob.{IPC, Tensor}

defmodule Peer do
  def values(t) do
    case Tensor.dtype(t) do
      :float32 -> for <<x::float-32-native <- Tensor.to_binary(t)>>, do: x
      :int64 -> for <<x::signed-64-native <- Tensor.to_binary(t)>>, do: x
    end
  end

  def floats(list), do: encode(:float32, list)

  def encode(:float32, list), do: for(v <- list, into: <<>>, do: <<number(v)::float-32-native>>)
  def encode(:int64, list), do: for(v <- list, into: <<>>, do: <<String.to_integer(v)::signed-64-native>>)

  defp number(v) do
    case Float.parse(v) do
      {f, ""} -> f
      _ -> raise ArgumentError, "not a number: #{v}"
    end
  end

  def dims(text), do: text |> String.split("x") |> Enum.map(&String.to_integer/1) |> List.to_tuple()
  def dims_text(shape), do: shape |> Tuple.to_list() |> Enum.join("x")

  def typed(dtype, dims, values) do
    dtype = String.to_existing_atom(dtype)
    Tensor.from_binary(encode(dtype, values), dtype, dims(dims))
  end

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
    slice = Tensor.narrow(t, 0, String.to_integer(i), 1)
    Tensor.write!(slice, encode(Tensor.dtype(t), List.duplicate(v, length(values(slice)))))
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

  defp command(["export_torch_json", dtype, dims | values], held) do
    h = IPC.export_torch(typed(dtype, dims, values))
    {"ok " <> IPC.to_json(h), Map.put(held, h.handle, h.tensor)}
  end

  defp command(["export_json", dtype, dims | values], held) do
    h = IPC.export(typed(dtype, dims, values))
    {"ok " <> IPC.to_json(h), Map.put(held, h.handle, h.tensor)}
  end

  defp command(["open_json" | json], held) do
    json = Enum.join(json, " ")
    t = IPC.open(json)
    {:ok, %{"handle" => name}} = TensorBlob.IPC.JSON.decode(json)
    {reply([dims_text(Tensor.shape(t)) | values(t)]), Map.put(held, name, t)}
  end

  defp command(["pid"], held), do: {reply([System.pid()]), held}

  defp command(["tensors"], held) do
    {reply([TensorBlob.stats().tensors]), held}
  end
end

IO.puts(Peer.reply(["ready"]))
Peer.run(%{})
