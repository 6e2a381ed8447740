defmodule TensorBlob.Raise do
  @moduledoc false
  # Turns the Erlang API's error({badarg, Msg}) / error({tensor_blob, Msg})
  # into ArgumentError / TensorBlob.Error, keeping the stacktrace.
  #
  # Errors raised by the Erlang facade, and by the NIF through it, carry
  # their format and arguments (error_info); those are rendered here the
  # Elixir way: terms with `inspect/2`, code snippets in their Elixir
  # spelling. An error without them keeps its text.

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

  @doc false
  @spec reraise_translated({:badarg | :tensor_blob, binary()}, Exception.stacktrace()) :: no_return()
  def reraise_translated({kind, message} = reason, stacktrace) do
    message =
      case :tensor_blob.error_message(reason, stacktrace) do
        {format, args} -> render(format, args)
        :none -> message
      end

    exception = if kind == :badarg, do: ArgumentError, else: TensorBlob.Error
    reraise exception, [message: message], stacktrace
  end

  @doc false
  # An io_lib format string with its arguments, rendered the Elixir way.
  # The facade's formats use ~p ~P ~w ~s ~b and ~~ (with t and a field width
  # of 0 at most).
  @spec render(:io.format(), [term()]) :: String.t()
  def render(format, args) do
    format |> IO.chardata_to_string() |> render(args, [])
  end

  defp render("~~" <> rest, args, acc), do: render(rest, args, ["~" | acc])

  defp render("~" <> rest, args, acc) do
    [directive] = Regex.run(~r/^[0-9]*t?[pPwsb]/, rest)
    rest = binary_part(rest, byte_size(directive), byte_size(rest) - byte_size(directive))
    {text, args} = directive(String.last(directive), args)
    render(rest, args, [text | acc])
  end

  defp render(<<char::utf8, rest::binary>>, args, acc), do: render(rest, args, [<<char::utf8>> | acc])
  defp render("", [], acc), do: acc |> Enum.reverse() |> IO.iodata_to_binary()

  defp directive("P", [term, depth | args]), do: {inspect(term, limit: depth * 2, printable_limit: 256), args}
  defp directive(p, [term | args]) when p in ["p", "w"], do: {inspect_bounded(term), args}
  defp directive("s", [{:code, _erlang, elixir} | args]), do: {elixir, args}
  defp directive("s", [text | args]), do: {to_string(text), args}
  defp directive("b", [integer | args]), do: {Integer.to_string(integer), args}

  # A term any caller may have passed (a whole struct, a huge binary):
  # inspected with limits, smaller ones until it fits in about @term_bytes,
  # so a message is never cut in the middle of a term. Each pass is bounded
  # by its limit.
  @term_bytes 1024
  @limits [{50, 1024}, {20, 256}, {8, 64}, {3, 16}]

  defp inspect_bounded(term) do
    Enum.reduce_while(@limits, nil, fn {limit, printable_limit}, _ ->
      text = inspect(term, limit: limit, printable_limit: printable_limit)
      if byte_size(text) <= @term_bytes, do: {:halt, text}, else: {:cont, text}
    end)
  end
end
