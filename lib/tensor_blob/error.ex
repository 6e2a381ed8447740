defmodule TensorBlob.Error do
  @moduledoc """
  Raised for failures that are not the caller's fault: out of memory, a
  libtorch error, a dtype or device this build cannot handle.
  """
  defexception [:message]
end
