defmodule TensorBlob.ErrorsTest do
  # What an error carries as data in Elixir: a TensorBlob.Error its
  # `reason` and `argument`, an ArgumentError the same in its stacktrace
  # (`:tensor_blob.error_reason/1`), beside a message rendered the Elixir
  # way. The reasons are the rows of the library's reason table.
  use ExUnit.Case, async: true

  import Bitwise

  alias TensorBlob.{DLPack, IPC, Tensor}

  defp reasons, do: TensorBlob.tables().reasons

  import TensorBlob.Test.Raised, only: [raised: 1]

  test "the reason table is a list of distinct atoms" do
    assert reasons() != []
    assert Enum.all?(reasons(), &is_atom/1)
    assert Enum.uniq(reasons()) == reasons()
  end

  test "an ArgumentError from the NIF carries its reason and argument in its stacktrace" do
    {e, data} = raised(fn -> Tensor.zeros({-1}, :float32) end)
    assert %ArgumentError{message: "shape: dimension 0 must be a non-negative 64-bit integer, got -1 in {-1}"} = e
    assert data == %{reason: :bad_shape, argument: :shape}
    assert data.reason in reasons()

    {e, data} = raised(fn -> Tensor.to_binary(Tensor.transpose(Tensor.zeros({2, 3}, :float32), 0, 1), copy: false) end)
    assert e.message =~ "copy: true"
    assert data == %{reason: :not_contiguous, argument: :tensor}
  end

  test "an ArgumentError of the Erlang facade's own carries its reason and argument" do
    {e, data} = raised(fn -> Tensor.to_binary(Tensor.zeros({1}, :float32), copy: :maybe) end)
    assert %ArgumentError{message: "copy: expected a boolean or :if_needed, got :maybe"} = e
    assert data == %{reason: :bad_value, argument: :copy}

    {_e, data} = raised(fn -> Tensor.shape(:not_a_tensor) end)
    assert data == %{reason: :not_a_tensor, argument: :tensor}
  end

  test "an ArgumentError of the Elixir facade's own carries its reason and argument" do
    {e, data} = raised(fn -> DLPack.export(Tensor.zeros({1}, :float32), [1]) end)

    assert %ArgumentError{message: "options: expected a keyword list (a proper list of {atom, value} pairs), got [1]"} =
             e

    assert data == %{reason: :bad_option, argument: :options}
    assert data.reason in reasons()
  end

  test "a TensorBlob.Error holds its reason and argument" do
    # 1 PiB does not fit in shared memory.
    {e, data} = raised(fn -> IPC.zeros({1 <<< 48}, :float32) end)
    assert %TensorBlob.Error{reason: :no_memory, argument: :shape} = e
    assert e.message =~ "does not fit in /dev/shm"
    assert e.message =~ "needs #{4 <<< 48} bytes"
    assert data == %{reason: :no_memory, argument: :shape}

    # 4 PiB cannot be allocated: said as such, not in libtorch's words.
    assert %TensorBlob.Error{reason: :no_memory, argument: :shape} =
             assert_raise(TensorBlob.Error, fn -> Tensor.zeros({1 <<< 40, 1 <<< 10}, :float32) end)

    assert Enum.all?([:no_memory, :libtorch], &(&1 in reasons()))
  end

  # Every dtype the linked libtorch holds, from the dtype table.
  defp available_dtypes, do: for(%{available: true} = row <- TensorBlob.tables().dtypes, do: row)

  test "an allocation that cannot be made raises no_memory naming the shape, the dtype and the bytes, for every dtype" do
    assert available_dtypes() != []

    for %{name: dtype, element_size: size} <- available_dtypes() do
      # 1 EiB: more than any address space holds, whatever the machine.
      shape = {2, div(1 <<< 60, 2 * size)}
      bytes = 1 <<< 60

      {e, data} = raised(fn -> Tensor.zeros(shape, dtype) end)
      assert %TensorBlob.Error{reason: :no_memory, argument: :shape} = e, inspect({dtype, e})
      assert data == %{reason: :no_memory, argument: :shape}

      assert e.message ==
               "shape: #{inspect(shape)} of #{dtype} needs #{bytes} bytes, and zeros could not allocate them (out of memory)"

      refute e.message =~ ".cpp"

      # The Erlang API says the same.
      assert {:tensor_blob, message} = catch_error(:tensor_blob.zeros(shape, dtype))
      assert message =~ "needs #{bytes} bytes"
    end
  end

  test "a shape whose byte count overflows 64 bits is refused as a bad shape, for every dtype" do
    for %{name: dtype, element_size: size} <- available_dtypes() do
      # Its elements times the element size exceed 2^63.
      shape = {2, div(1 <<< 62, size) + 1}
      {e, data} = raised(fn -> Tensor.zeros(shape, dtype) end)
      assert %ArgumentError{} = e
      assert data == %{reason: :bad_shape, argument: :shape}, inspect({dtype, e})
      assert e.message =~ ~r/^shape: .*overflows 64 bits/
    end
  end

  test "an error that is not the library's has no reason" do
    {_e, data} = raised(fn -> :ets.lookup(:tensor_blob_errors_no_such_table, :key) end)
    assert data == :none
  end
end
