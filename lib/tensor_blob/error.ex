defmodule TensorBlob.Error do
  @moduledoc """
  Raised for failures that are not the caller's fault: out of memory, a
  libtorch error, a dtype or device this build cannot handle.

  Besides its `message`, it carries as data its `reason` (an atom, one of
  `TensorBlob.tables().reasons`, such as `:no_memory`, `:libtorch` or
  `:unsupported`) and the `argument` it is about (an atom naming the
  argument or field, or `:none`). Decide on those, never on the message's
  text. An `ArgumentError` raised by the library carries the same in its
  stacktrace: `:tensor_blob.error_reason(__STACKTRACE__)` reads them.
  """
  defexception [:message, :reason, :argument]

  @type t :: %__MODULE__{message: String.t(), reason: atom() | nil, argument: atom() | nil}
end
