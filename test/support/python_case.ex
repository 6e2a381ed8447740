defmodule TensorBlob.Test.PythonCase do
  @moduledoc false
  # The suites of Python in this VM: tagged :python (excluded where Pythonx
  # is not on the code path; test_helper.exs says why), the interpreter
  # started once before them, and the aliases they share.
  use ExUnit.CaseTemplate

  using do
    quote do
      @moduletag :python

      alias TensorBlob.{Python, Tensor}
      alias TensorBlob.Test.{Lifetime, PythonVM}
    end
  end

  setup_all do
    TensorBlob.Test.PythonVM.start!()
    :ok
  end
end
