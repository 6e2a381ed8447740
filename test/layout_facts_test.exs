defmodule TensorBlob.LayoutFactsTest do
  # Facts that more than one layer states in its own language, each checked
  # against the NIF's answer: the row-major strides of a shape (the Elixir
  # facade's and the Python module's against the C library's, which
  # from_blob applies to a spec without strides) and what a tensor term is
  # (the Erlang API's guard against the NIF's reading of one).
  use ExUnit.Case, async: true

  alias TensorBlob.{BlobView, Tensor}

  @shapes [{}, {0}, {1}, {5}, {2, 3}, {3, 0, 5}, {0, 0}, {4, 1, 2, 1}, {1, 1, 1}, {7, 1}, {2, 3, 4, 5, 6}]

  # The C library's row-major strides: a view without strides over a tensor
  # that holds every element.
  defp c_strides(shape) do
    elements = shape |> Tuple.to_list() |> Enum.product()
    base = Tensor.zeros({max(elements, 1)}, :uint8)
    %{ptr: ptr} = TensorBlob.to_blob(base)
    TensorBlob.from_blob(%{ptr: ptr, shape: shape, dtype: :uint8}, owner: base) |> Tensor.strides()
  end

  test "the Elixir facade's row-major strides are the C library's" do
    for shape <- @shapes do
      assert Tensor.row_major_strides(shape) == c_strides(shape), inspect(shape)
    end
  end

  @tag :python_module
  test "the Python module's row-major strides are the C library's" do
    # The shapes as Python literals (a 1-tuple needs its comma), the strides
    # back one line each.
    shapes = Enum.map_join(@shapes, ", ", fn shape -> "(#{shape |> Tuple.to_list() |> Enum.map_join(&"#{&1}, ")})" end)

    code = """
    import sys
    sys.path.insert(0, sys.argv[1])
    import tensor_blob
    for shape in [#{shapes}]:
        print(" ".join(str(s) for s in tensor_blob._row_major_strides(shape)))
    """

    {out, 0} = System.cmd(TensorBlob.Test.Doors.python(), ["-c", code, Path.expand("priv/python")])

    python =
      out
      |> String.split("\n")
      |> Enum.drop(-1)
      |> Enum.map(fn line -> line |> String.split() |> Enum.map(&String.to_integer/1) end)

    assert python == Enum.map(@shapes, &c_strides/1)
  end

  test "a tensor term is the same to the Erlang API as to the NIF" do
    t = Tensor.zeros({2}, :float32)
    %Tensor{ref: ref} = t

    terms = [
      ref,
      t,
      %BlobView{tensor: t, owner: t},
      %BlobView{tensor: ref, owner: t},
      %{__struct__: BlobView},
      %{__struct__: Tensor, ref: :nope},
      %{__struct__: Some.Other, ref: ref},
      %{ref: ref},
      {ref},
      make_ref()
    ]

    for term <- terms do
      nif = accepted?(fn -> :tensor_blob_nif.shape(term) end)
      erlang = accepted?(fn -> :tensor_blob.to_dlpack(term) end)
      assert nif == erlang, "#{inspect(term)}: the NIF says #{nif}, the Erlang API #{erlang}"
    end
  end

  # false where the call refuses its argument as no tensor.
  defp accepted?(call) do
    call.()
    true
  catch
    # The NIF's own error, as the Erlang API receives it.
    :error, {_, %{reason: :not_a_tensor}} ->
      false

    :error, error ->
      case :tensor_blob.error_reason(__STACKTRACE__) do
        %{reason: :not_a_tensor} -> false
        _ -> :erlang.raise(:error, error, __STACKTRACE__)
      end
  end
end
