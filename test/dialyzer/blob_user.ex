defmodule TensorBlob.DialyzerScratch do
  @moduledoc false
  # A user's module, compiled and analysed only by `make dialyzer`: code
  # that dialyzer must accept with zero warnings.

  alias TensorBlob.{Blob, BlobView, Tensor}

  @spec ptr_of(Tensor.t()) :: non_neg_integer()
  def ptr_of(t) do
    %Blob{ptr: p} = TensorBlob.to_blob(t)
    p
  end

  @spec pinned_view(Tensor.t()) :: Tensor.t()
  def pinned_view(t) do
    %BlobView{tensor: view} = TensorBlob.from_blob(TensorBlob.to_blob(t))
    view
  end

  @spec unpinned_view(Blob.t()) :: Tensor.t()
  def unpinned_view(blob) do
    %BlobView{tensor: view, owner: :none} = TensorBlob.from_blob(blob, owner: :none)
    view
  end

  # What from_blob/2 returns goes to every function that takes a tensor.
  @spec view_facts(Blob.t()) :: {binary(), tuple(), Blob.t(), Tensor.t()}
  def view_facts(blob) do
    view = TensorBlob.from_blob(blob, owner: :none)
    {Tensor.to_binary(view), Tensor.shape(view), TensorBlob.to_blob(view), Tensor.transpose(view, 0, 0)}
  end

  @spec capsule_version(Tensor.t()) :: :versioned | :legacy
  def capsule_version(t) do
    %TensorBlob.DLPack{version: version} = TensorBlob.DLPack.export(t)
    version
  end

  @spec shared(Tensor.t()) :: binary()
  def shared(t) do
    %TensorBlob.IPC.Handle{handle: name} = TensorBlob.IPC.export(t)
    name
  end
end
