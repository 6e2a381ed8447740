defmodule TensorBlob.Raise do
  @moduledoc false
  # Turns the Erlang API's error({badarg, Msg}) / error({tensor_blob, Msg})
  # into ArgumentError / TensorBlob.Error, keeping the stacktrace.

  defmacro translating(do: body) do
    quote do
      try do
        unquote(body)
      catch
        :error, {:badarg, message} when is_binary(message) ->
          reraise ArgumentError, [message: message], __STACKTRACE__

        :error, {:tensor_blob, message} when is_binary(message) ->
          reraise TensorBlob.Error, [message: message], __STACKTRACE__
      end
    end
  end
end
