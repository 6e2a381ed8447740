defmodule TensorBlob.IPC.JSON do
  @moduledoc false
  # The JSON of the maps of shared tensors (objects, arrays, strings,
  # integers, true, false, null), for TensorBlob.IPC.to_json/1 and open/1.
  # The library depends on no JSON package. On OTP 27 and later, stdlib's
  # `json` module decodes and escapes strings (`:stdlib`); on older OTPs a
  # small codec of this module does (`:fallback`). Both give the same
  # terms: null is nil, and a number with a fraction or an exponent is
  # refused (a map of a shared tensor holds integers only). An object that
  # names a key twice is refused by both, naming the key: decoders differ
  # on which value such a key has (stdlib keeps the first, others the
  # last), so one text would be two specs. Both run in time and memory
  # linear in the text; open/1 bounds the text's length.

  @type backend :: :stdlib | :fallback

  @doc false
  # :stdlib where stdlib has `json` (OTP 27), else :fallback.
  @spec backend() :: backend()
  def backend do
    case :persistent_term.get({__MODULE__, :backend}, nil) do
      nil ->
        found = if Code.ensure_loaded?(:json), do: :stdlib, else: :fallback
        :persistent_term.put({__MODULE__, :backend}, found)
        found

      found ->
        found
    end
  end

  # Called through a variable: on OTPs before 27 the module does not exist,
  # and the compiler need not say so.
  defp stdlib_json, do: :json

  @spec encode(term(), backend()) :: String.t()
  def encode(term, backend \\ backend())
  def encode(map, backend) when is_map(map), do: encode_object(Enum.sort(map), backend)

  def encode(list, backend) when is_list(list),
    do: IO.iodata_to_binary(["[", Enum.intersperse(Enum.map(list, &encode(&1, backend)), ", "), "]"])

  def encode(n, _) when is_integer(n), do: Integer.to_string(n)
  def encode(nil, _), do: "null"
  def encode(b, _) when is_boolean(b), do: Atom.to_string(b)
  def encode(a, backend) when is_atom(a), do: encode(Atom.to_string(a), backend)
  # The escapes of RFC 8259 either way; stdlib also escapes some characters
  # that need none (both are valid JSON, read alike).
  def encode(s, :stdlib) when is_binary(s), do: IO.iodata_to_binary(apply(stdlib_json(), :encode_binary, [s]))

  def encode(s, :fallback) when is_binary(s) do
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

  # An object of these fields, in this order, spaced as Python's
  # json.dumps spaces it.
  @spec encode_object([{atom() | String.t(), term()}], backend()) :: String.t()
  def encode_object(fields, backend \\ backend()) do
    fields = for {k, v} <- fields, do: [encode(to_string(k), backend), ": ", encode(v, backend)]
    IO.iodata_to_binary(["{", Enum.intersperse(fields, ", "), "}"])
  end

  # The float decoder below only throws, on purpose.
  @dialyzer {:nowarn_function, decode: 2}
  @spec decode(String.t(), backend()) :: {:ok, term()} | {:error, {:duplicate_key, String.t()}} | :error
  def decode(text, backend \\ backend())

  def decode(text, :stdlib) when is_binary(text) do
    # A float is refused: the decoder's fun fails, which stdlib reports
    # as an error (or lets the throw through): :error either way. An
    # object is made by object_finish, which refuses a repeated key.
    decoders = %{null: nil, float: fn _ -> throw(:float) end, object_finish: &object_finish/2}

    case apply(stdlib_json(), :decode, [text, :ok, decoders]) do
      {value, :ok, rest} -> if skip(rest) == "", do: {:ok, value}, else: :error
    end
  catch
    {:duplicate_key, key} -> {:error, {:duplicate_key, key}}
    :float -> :error
    :error, _ -> :error
  end

  def decode(text, :fallback) when is_binary(text) do
    case value(skip(text)) do
      {:ok, v, rest} -> if skip(rest) == "", do: {:ok, v}, else: :error
      :error -> :error
    end
  catch
    {:duplicate_key, key} -> {:error, {:duplicate_key, key}}
  end

  # stdlib's object_finish: the object's pairs, last first. One map when
  # every key differs; else the first key named twice, in the text's order.
  defp object_finish(pairs, old_acc) do
    map = Map.new(pairs)
    if map_size(map) != length(pairs), do: throw({:duplicate_key, repeated(Enum.reverse(pairs), MapSet.new())})
    {map, old_acc}
  end

  defp repeated([{key, _} | rest], seen) do
    if MapSet.member?(seen, key), do: key, else: repeated(rest, MapSet.put(seen, key))
  end

  defp skip(<<c, rest::binary>>) when c in ~c" \t\r\n", do: skip(rest)
  defp skip(rest), do: rest

  defp value("{" <> rest), do: members(skip(rest), %{})
  defp value("[" <> rest), do: elements(skip(rest), [])
  defp value("\"" <> rest), do: string(rest, [])
  defp value("true" <> rest), do: {:ok, true, rest}
  defp value("false" <> rest), do: {:ok, false, rest}
  defp value("null" <> rest), do: {:ok, nil, rest}

  # -?(0|[1-9][0-9]*), and no fraction or exponent after it.
  defp value(text) do
    {sign, digits} = if match?("-" <> _, text), do: {"-", binary_part(text, 1, byte_size(text) - 1)}, else: {"", text}
    n = count_digits(digits, 0)

    cond do
      n == 0 or (n > 1 and :binary.first(digits) == ?0) ->
        :error

      n < byte_size(digits) and :binary.at(digits, n) in ~c".eE" ->
        :error

      true ->
        {int, rest} = :erlang.split_binary(digits, n)
        {:ok, String.to_integer(sign <> int), rest}
    end
  end

  defp count_digits(<<c, rest::binary>>, n) when c in ?0..?9, do: count_digits(rest, n + 1)
  defp count_digits(_, n), do: n

  defp members("}" <> rest, acc) when acc == %{}, do: {:ok, acc, rest}

  defp members("\"" <> rest, acc) do
    with {:ok, k, rest} <- string(rest, []),
         :ok <- if(is_map_key(acc, k), do: throw({:duplicate_key, k}), else: :ok),
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

  # A string's body, in one pass: a run of plain characters is counted
  # (len bytes from the start of the run, orig) and taken whole as one
  # sub-binary when a quote or an escape ends it; the pieces gather as
  # iodata (acc, nested to the left: no reversal) and become the string once.
  defp string(text, acc), do: str(text, text, 0, acc)

  defp str(<<?", rest::binary>>, orig, len, acc),
    do: {:ok, IO.iodata_to_binary([acc, binary_part(orig, 0, len)]), rest}

  defp str(<<?\\, rest::binary>>, orig, len, acc), do: escape(rest, [acc, binary_part(orig, 0, len)])
  defp str(<<c, rest::binary>>, orig, len, acc) when c >= 0x20 and c < 0x80, do: str(rest, orig, len + 1, acc)
  defp str(<<c::utf8, rest::binary>>, orig, len, acc) when c >= 0x80, do: str(rest, orig, len + utf8_size(c), acc)
  defp str(_, _, _, _), do: :error

  defp utf8_size(c) when c < 0x800, do: 2
  defp utf8_size(c) when c < 0x10000, do: 3
  defp utf8_size(_), do: 4

  defp escape(<<c, rest::binary>>, acc) when c in ~c"\"\\/", do: string(rest, [acc, c])
  defp escape("n" <> rest, acc), do: string(rest, [acc, ?\n])
  defp escape("t" <> rest, acc), do: string(rest, [acc, ?\t])
  defp escape("r" <> rest, acc), do: string(rest, [acc, ?\r])
  defp escape("b" <> rest, acc), do: string(rest, [acc, ?\b])
  defp escape("f" <> rest, acc), do: string(rest, [acc, ?\f])

  defp escape(<<"u", hex::binary-size(4), rest::binary>>, acc) do
    case hex(hex) do
      hi when hi in 0xD800..0xDBFF -> low_surrogate(hi, rest, acc)
      hi when hi in 0xDC00..0xDFFF -> :error
      hi when is_integer(hi) -> string(rest, [acc, <<hi::utf8>>])
      :error -> :error
    end
  end

  defp escape(_, _), do: :error

  # A character past U+FFFF, escaped as a UTF-16 surrogate pair.
  defp low_surrogate(hi, <<"\\u", hex::binary-size(4), rest::binary>>, acc) do
    case hex(hex) do
      lo when lo in 0xDC00..0xDFFF ->
        c = 0x10000 + Bitwise.bsl(hi - 0xD800, 10) + (lo - 0xDC00)
        string(rest, [acc, <<c::utf8>>])

      _ ->
        :error
    end
  end

  defp low_surrogate(_, _, _), do: :error

  # Four hex digits (no sign, no space), or :error.
  defp hex(<<a, b, c, d>> = digits) do
    if Enum.all?([a, b, c, d], &(&1 in ?0..?9 or &1 in ?a..?f or &1 in ?A..?F)),
      do: String.to_integer(digits, 16),
      else: :error
  end
end
