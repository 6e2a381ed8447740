# make demo: a zero-copy exchange, step by step.
alias TensorBlob.{BlobView, Tensor}

floats = fn list -> for x <- list, into: <<>>, do: <<x::float-32-native>> end
read = fn t -> for <<x::float-32-native <- Tensor.to_binary(t)>>, do: x end

IO.puts("tensor_blob demo (libtorch #{TensorBlob.torch_version()})\n")

t = Tensor.from_binary(floats.([1, 2, 3, 4, 5, 6]), :float32, {2, 3})
IO.puts("1. a tensor:            #{inspect(t)}  #{inspect(read.(t))}")

blob = TensorBlob.to_blob(t)
IO.puts("2. its blob:            #{inspect(blob, pretty: true, width: 100)}")

%BlobView{tensor: view} = TensorBlob.from_blob(blob)
same = TensorBlob.to_blob(view).ptr == blob.ptr
IO.puts("3. a view over it:      #{inspect(view)}  same memory: #{same}")

Tensor.write!(view, floats.([10, 20, 30, 40, 50, 60]))
IO.puts("4. written via view:    original now reads #{inspect(read.(t))}")

# The owner and the struct live only in a process that exits; we keep a
# slice of the view. The view and the slice share the owner's libtorch
# storage, whose reference count keeps the memory.
parent = self()

spawn(fn ->
  owner = Tensor.from_binary(floats.(Enum.to_list(1..12)), :float32, {3, 4})
  %BlobView{tensor: v} = TensorBlob.from_blob(TensorBlob.to_blob(owner))
  send(parent, {:slice, Tensor.narrow(v, 0, 1, 2)})
end)

slice = receive do: ({:slice, s} -> s)
# Churn memory so freed blocks get reused, then force garbage collection.
Enum.each(1..1000, fn _ -> Tensor.zeros({12}, :float32) end)
Process.sleep(50)
for pid <- Process.list(), do: :erlang.garbage_collect(pid)
stats = TensorBlob.stats()
IO.puts("5. after owner + struct dropped and a forced GC, the slice reads #{inspect(read.(slice))}")
IO.puts("   live while the slice is held: #{inspect(stats)} (the slice shares the dropped owner's storage: no pin)")

tr = Tensor.transpose(t, 0, 1)
tblob = TensorBlob.to_blob(tr)

IO.puts(
  "6. a transposed layout: shape #{inspect(tblob.shape)} strides #{inspect(tblob.strides)} " <>
    "same pointer: #{tblob.ptr == blob.ptr}"
)

%BlobView{tensor: tv} = TensorBlob.from_blob(tblob)
IO.puts("   viewed back, row-major: #{inspect(read.(tv))}")

%BlobView{tensor: bare} = TensorBlob.from_blob(%{ptr: blob.ptr, shape: {6}, dtype: :float32}, owner: :none)
IO.puts("7. owner: :none:        #{inspect(bare)} (the caller answers for the memory)")
