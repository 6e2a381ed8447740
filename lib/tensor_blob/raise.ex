defmodule TensorBlob.Raise do
  @moduledoc false
  # Turns the Erlang API's error({badarg, Msg}) / error({tensor_blob, Msg})
  # into ArgumentError / TensorBlob.Error, keeping the stacktrace (and in
  # it the error's reason and argument, which TensorBlob.Error also holds).
  #
  # Errors raised by the Erlang facade, and by the NIF through it, carry
  # their message as segments (error_info; see "Errors" in
  # src/tensor_blob_error.erl): text, code and terms, the terms already cut down to
  # a bounded tree. Those are rendered here the Elixir way: terms with
  # `inspect/2`, code in its Elixir spelling. An error without them keeps its
  # text.

  defmacro translating(do: body) do
    quote do
      try do
        unquote(body)
      catch
        :error, {kind, message} = reason
        when kind in [:badarg, :tensor_blob] and is_binary(message) ->
          TensorBlob.Raise.reraise_translated(reason, __STACKTRACE__)
      end
    end
  end

  # translating/1 for a function that copies or transfers: its telemetry
  # spans name `function` ({module, name, arity}: the Elixir function the
  # caller called, not the Erlang one behind it), and an error raised
  # inside it ends them with an exception event (guides/telemetry.md).
  defmacro reported(function, do: body) do
    quote do
      :tensor_blob_door.span(unquote(function), fn -> TensorBlob.Raise.translating(do: unquote(body)) end)
    end
  end

  @doc false
  @spec reraise_translated({:badarg | :tensor_blob, binary()}, Exception.stacktrace()) :: no_return()
  def reraise_translated({kind, message} = reason, stacktrace) do
    message =
      case :tensor_blob_door.message(reason, stacktrace) do
        :none -> message
        segments -> render(segments)
      end

    exception =
      case kind do
        :badarg ->
          ArgumentError.exception(message: message)

        :tensor_blob ->
          data = with :none <- :tensor_blob.error_reason(stacktrace), do: %{reason: nil, argument: nil}
          TensorBlob.Error.exception(message: message, reason: data.reason, argument: data.argument)
      end

    reraise exception, stacktrace
  end

  @doc false
  # The facade's own errors, with their reason (a row of the reason table,
  # `TensorBlob.tables/0`'s `:reasons`) and argument (or :none) as data, as
  # the Erlang API's: an ArgumentError (bad input) or a TensorBlob.Error,
  # whose stacktrace holds them for `:tensor_blob.error_reason/1`. The
  # message comes first, so that a call site reads as the raise it is:
  #   "options: ..." |> badarg!(:bad_option, :options)
  @spec badarg!(String.t(), atom(), atom()) :: no_return()
  def badarg!(message, reason, argument) do
    :erlang.error(ArgumentError.exception(message: message), :none, error_info: cause(reason, argument, message))
  end

  @doc false
  @spec error!(String.t(), atom(), atom()) :: no_return()
  def error!(message, reason, argument) do
    exception = TensorBlob.Error.exception(message: message, reason: reason, argument: argument)
    :erlang.error(exception, :none, error_info: cause(reason, argument, message))
  end

  defp cause(reason, argument, message),
    do: %{module: :tensor_blob, cause: %{reason: reason, argument: argument, message: [message]}}

  @doc false
  # A message's segments, rendered the Elixir way.
  @spec render([binary() | {:term, term()} | {:code, binary(), binary()}]) :: String.t()
  def render(segments) do
    Enum.map_join(segments, fn
      {:term, pruned} -> inspect_bounded(pruned)
      {:code, _erlang, elixir} -> elixir
      text -> text
    end)
  end

  @doc false
  # Any term, for a message of the facade's own: bounded in size and in the
  # time it takes, as the Erlang API's messages are (a 50 MB binary, an
  # integer of 200,000 bits, a million-element list).
  @spec inspect_term(term()) :: String.t()
  def inspect_term(term), do: inspect_bounded(:tensor_blob_door.prune(term))

  # A term any caller may have passed (a whole struct, a huge binary),
  # already cut down to a bounded tree: inspected with limits, smaller ones
  # until it fits in about @term_bytes, so a message is never cut in the
  # middle of a term.
  @term_bytes 1024
  @limits [{50, 1024}, {20, 256}, {8, 64}, {3, 16}]

  defp inspect_bounded(pruned) do
    Enum.reduce_while(@limits, nil, fn {limit, printable_limit}, _ ->
      text = IO.iodata_to_binary(term(pruned, limit: limit, printable_limit: printable_limit))
      if byte_size(text) <= @term_bytes, do: {:halt, text}, else: {:cont, text}
    end)
  end

  # A pruned term (:tensor_blob's pruned()): whole terms as inspect/2 shows
  # them, the rest as inspect/2 shows a term it cut short.
  defp term(:elided, _opts), do: "..."
  defp term({:big_integer, sign, bits}, _opts), do: :tensor_blob_door.big_integer_text(sign, bits)
  defp term({:whole, term}, opts), do: inspect(term, opts)

  defp term({:list, items, tail}, opts) do
    {shown, more?} = shown(items, tail == :more, opts)

    case tail do
      {:tail, node} -> ["[", join(shown, opts), " | ", term(node, opts), "]"]
      _ -> ["[", join(shown, opts), more(shown, more?), "]"]
    end
  end

  defp term({:tuple, items, more?}, opts) do
    {shown, more?} = shown(items, more?, opts)
    ["{", join(shown, opts), more(shown, more?), "}"]
  end

  defp term({:map, pairs, more?}, opts) do
    {name, pairs} =
      case List.keytake(pairs, {:whole, :__struct__}, 0) do
        {{_, {:whole, module}}, fields} when is_atom(module) -> {inspect(module), fields}
        _ -> {"", pairs}
      end

    {shown, more?} = shown(pairs, more?, opts)
    keywords? = Enum.all?(shown, &match?({{:whole, key}, _} when is_atom(key), &1))

    fields =
      Enum.map(shown, fn
        {{:whole, key}, value} when keywords? -> [Macro.inspect_atom(:key, key), " ", term(value, opts)]
        {key, value} -> [term(key, opts), " => ", term(value, opts)]
      end)

    ["%", name, "{", Enum.intersperse(fields, ", "), more(shown, more?), "}"]
  end

  defp shown(items, more?, opts) do
    {shown, rest} = Enum.split(items, opts[:limit])
    {shown, more? or rest != []}
  end

  defp join(nodes, opts), do: nodes |> Enum.map(&term(&1, opts)) |> Enum.intersperse(", ")

  defp more(_shown, false), do: ""
  defp more([], true), do: "..."
  defp more(_shown, true), do: ", ..."
end
