defmodule TensorBlob.IPC.JSON do
  @moduledoc false
  # The JSON of the maps of shared tensors (objects, arrays, strings,
  # integers, true, false, null), for TensorBlob.IPC.to_json/1 and open/1.
  # The library depends on no JSON package. On OTP 27 and later, stdlib's
  # `json` module decodes and escapes strings (`:stdlib`); on older OTPs a
  # small codec does (`:fallback`): the Erlang API's decoder
  # (:tensor_blob_door.decode_json/2) and this module's encoder. Both give the same
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

  # Decoded by the Erlang API's reader of JSON, for both backends.
  @spec decode(String.t(), backend()) :: {:ok, term()} | {:error, {:duplicate_key, String.t()}} | :error
  def decode(text, backend \\ backend()), do: :tensor_blob_door.decode_json(text, backend)
end
