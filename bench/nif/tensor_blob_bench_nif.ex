# The benchmarks' baselines (bench/nif/tensor_blob_bench_nif.c): a NIF
# library of their own, which `make bench` builds (TENSOR_BLOB_BENCH_NIF:
# its path without .so; default build/tensor_blob_bench_nif), so that
# the library users load carries no benchmark code.
defmodule :tensor_blob_bench_nif do
  @on_load :load

  def load do
    path =
      System.get_env("TENSOR_BLOB_BENCH_NIF") ||
        Path.expand("../../build/tensor_blob_bench_nif", __DIR__)

    case :erlang.load_nif(String.to_charlist(path), 0) do
      :ok ->
        :ok

      {:error, {reason, text}} ->
        IO.puts(:stderr, "cannot load #{path}.so (#{reason}: #{text}); build it with make bench-nif")
        :abort
    end
  end

  @doc "(X) -> X: a NIF call that does nothing."
  def identity(_term), do: :erlang.nif_error(:not_loaded)

  @doc "A new resource of one word: the floor of a call that makes a tensor."
  def bare_resource, do: :erlang.nif_error(:not_loaded)

  @doc "A consumer's take: the address of a managed tensor from priv/include/tensor_blob.h's bridge."
  def take(_tensor), do: :erlang.nif_error(:not_loaded)

  @doc "A consumer's release: the deleter of take/1's managed tensor, called once."
  def release(_address), do: :erlang.nif_error(:not_loaded)

  @doc "Nanoseconds for n exports and deleters through the bridge, in a C loop inside one call."
  def bridge_loop(_tensor, _n), do: :erlang.nif_error(:not_loaded)

  @doc """
  Nanoseconds per round of the parts of an export and its deleter, each
  alone in a C loop of n: a %TensorBlob.Tensor{}'s fields read, a resource
  term to its object, a malloc and free, an atomic add and subtract, two
  compare-and-swaps.
  """
  def floors(_tensor, _n), do: :erlang.nif_error(:not_loaded)

  @doc "Least ns per export and deleter through tensor_blob's exchange API table over terms, loops of n, best of rounds."
  def exchange_loop(_tensor, _n, _rounds), do: :erlang.nif_error(:not_loaded)
end
