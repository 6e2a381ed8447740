defmodule TensorBlob.IPC.JSON do
  @moduledoc false
  # The little JSON that the maps of shared tensors need (objects, arrays,
  # strings, integers, true, false, null), for TensorBlob.IPC.to_json/1 and
  # open/1: the library depends on no JSON package, and Elixir's JSON module
  # is 1.18's.

  @spec encode(term()) :: String.t()
  def encode(map) when is_map(map), do: encode_object(Enum.sort(map))

  def encode(list) when is_list(list),
    do: IO.iodata_to_binary(["[", Enum.intersperse(Enum.map(list, &encode/1), ", "), "]"])

  def encode(n) when is_integer(n), do: Integer.to_string(n)
  def encode(nil), do: "null"
  def encode(b) when is_boolean(b), do: Atom.to_string(b)
  def encode(a) when is_atom(a), do: encode(Atom.to_string(a))

  def encode(s) when is_binary(s) do
    escaped =
      for <<c::utf8 <- s>>, into: "" do
        case c do
          ?" -> "\\\""
          ?\\ -> "\\\\"
          c when c < 0x20 -> "\\u" <> String.pad_leading(Integer.to_string(c, 16), 4, "0")
          c -> <<c::utf8>>
        end
      end

    "\"" <> escaped <> "\""
  end

  # An object of these fields, in this order.
  @spec encode_object([{atom() | String.t(), term()}]) :: String.t()
  def encode_object(fields) do
    fields = for {k, v} <- fields, do: [encode(to_string(k)), ": ", encode(v)]
    IO.iodata_to_binary(["{", Enum.intersperse(fields, ", "), "}"])
  end

  @spec decode(String.t()) :: {:ok, term()} | :error
  def decode(text) do
    case value(skip(text)) do
      {:ok, v, rest} -> if skip(rest) == "", do: {:ok, v}, else: :error
      :error -> :error
    end
  end

  defp skip(<<c, rest::binary>>) when c in ~c" \t\r\n", do: skip(rest)
  defp skip(rest), do: rest

  defp value("{" <> rest), do: members(skip(rest), %{})
  defp value("[" <> rest), do: elements(skip(rest), [])
  defp value("\"" <> rest), do: string(rest, [])
  defp value("true" <> rest), do: {:ok, true, rest}
  defp value("false" <> rest), do: {:ok, false, rest}
  defp value("null" <> rest), do: {:ok, nil, rest}

  defp value(text) do
    case Integer.parse(text) do
      {n, rest} -> if match?(<<c, _::binary>> when c in ~c".eE", rest), do: :error, else: {:ok, n, rest}
      :error -> :error
    end
  end

  defp members("}" <> rest, acc) when acc == %{}, do: {:ok, acc, rest}

  defp members("\"" <> rest, acc) do
    with {:ok, k, rest} <- string(rest, []),
         ":" <> rest <- skip(rest),
         {:ok, v, rest} <- value(skip(rest)) do
      case skip(rest) do
        "," <> rest -> members(skip(rest), Map.put(acc, k, v))
        "}" <> rest -> {:ok, Map.put(acc, k, v), rest}
        _ -> :error
      end
    else
      _ -> :error
    end
  end

  defp members(_, _), do: :error

  defp elements("]" <> rest, []), do: {:ok, [], rest}

  defp elements(text, acc) do
    with {:ok, v, rest} <- value(text) do
      case skip(rest) do
        "," <> rest -> elements(skip(rest), [v | acc])
        "]" <> rest -> {:ok, Enum.reverse([v | acc]), rest}
        _ -> :error
      end
    end
  end

  defp string("\"" <> rest, acc), do: {:ok, IO.iodata_to_binary(Enum.reverse(acc)), rest}
  defp string("\\\"" <> rest, acc), do: string(rest, ["\"" | acc])
  defp string("\\\\" <> rest, acc), do: string(rest, ["\\" | acc])
  defp string("\\/" <> rest, acc), do: string(rest, ["/" | acc])
  defp string("\\n" <> rest, acc), do: string(rest, ["\n" | acc])
  defp string("\\t" <> rest, acc), do: string(rest, ["\t" | acc])
  defp string("\\r" <> rest, acc), do: string(rest, ["\r" | acc])
  defp string("\\b" <> rest, acc), do: string(rest, ["\b" | acc])
  defp string("\\f" <> rest, acc), do: string(rest, ["\f" | acc])

  defp string(<<"\\u", hex::binary-size(4), rest::binary>>, acc) do
    case Integer.parse(hex, 16) do
      {c, ""} when c < 0xD800 or c > 0xDFFF -> string(rest, [<<c::utf8>> | acc])
      _ -> :error
    end
  end

  defp string("\\" <> _, _), do: :error
  defp string(<<c::utf8, rest::binary>>, acc) when c >= 0x20, do: string(rest, [<<c::utf8>> | acc])
  defp string(_, _), do: :error
end
