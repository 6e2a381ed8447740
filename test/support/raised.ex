defmodule TensorBlob.Test.Raised do
  @moduledoc false

  # {exception, reason data} of what fun raises (flunks when it returns).
  def raised(fun) do
    fun.()
    ExUnit.Assertions.flunk("expected an error")
  rescue
    e in ExUnit.AssertionError -> reraise e, __STACKTRACE__
    e -> {e, :tensor_blob.error_reason(__STACKTRACE__)}
  end
end
