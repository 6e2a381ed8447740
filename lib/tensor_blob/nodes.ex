defmodule TensorBlob.Nodes do
  @moduledoc """
  Moving tensors between nodes.

  A tensor is a resource of the OS process that made it: sent to another
  node as it is, it arrives as a dead reference, and every function there
  raises `ArgumentError` saying so. `pack/2` turns a tensor into a plain
  term to send by any means; `unpack/1`, on the receiving node, makes it a
  tensor again.

  Three paths. A region: to a node that can open this node's shared memory
  (`same_host?/1`: the same host, `/dev/shm` and user), the memory as a
  shared-memory region that both nodes map: no copy of the data when the
  tensor was made by `TensorBlob.IPC.torch_zeros/2`, one copy into a new
  region otherwise (the tensor is left as it was). A file: to such a node,
  a tensor of a file opened by `TensorBlob.SafeTensors.open/2` (or a view
  of one) travels as the file's name, its version (device, inode, size,
  modification time) and the offset in it, and the receiver maps that
  file: both read the same pages of the page cache. A binary: the bytes as
  one binary, a view of the tensor's memory when it is a contiguous CPU
  tensor, which the distribution sends as it sends any binary, and which
  the receiver views without a copy when it arrives aligned for the dtype
  (else one copy). `pack/2` takes the one that costs less (see `pack/3`).
  Where the bytes land depends on what precedes them in the message, the
  same from one message to the next on one path (erpc, a send): a receiver
  that had to copy tells the sender the pad to put before the bytes, so
  that from the next message on that path they land aligned.

  Lifetime: the packed term holds the sender's tensor, and so does a
  keeper process on the sending node, until the first `unpack/1` of the
  term or `keep:` milliseconds (30 s by default), whichever comes first:
  the process that packed may end at once (a reply to `:erpc.call/4` or
  `GenServer.call/3`). After the unpack each node holds its own reference
  to the region, and either may drop its tensors first. A file's packed
  term holds nothing of the sender: the receiver maps the file, whose
  mapping its tensor keeps, whether the sender's tensors live or not.
  """

  import TensorBlob.Raise

  alias TensorBlob.Tensor

  @typedoc "What `pack/2` makes: a plain map, safe to send to another node."
  @type packed :: map()

  @doc """
  A term that carries `tensor` to `node`. `via: :region`, `via: :file` or
  `via: :binary` forces a path (`:region` and `:file` only to a node for
  which `same_host?/1` holds). By default the path that costs less end to
  end (pack, send, unpack, as measured in guides/nodes.md): to a node for
  which `same_host?/1` holds, a region for a CPU tensor that already is
  one (made by `TensorBlob.IPC.torch_zeros/2`) from 32 KiB, the file for a
  tensor of a mapped file from 128 KiB, and for any other CPU
  tensor from 64 MiB; a binary for anything else (a region's name, keeper
  and mapping cost more than a small tensor's bytes). The node's
  `same_host?/1` answer is asked once and remembered until its connection
  goes down. `keep:` (milliseconds; default: the `node_keep` setting, 30000 unless
  configured, guides/configuration.md) bounds how long the
  sending node keeps a region alive for a receiver that has not unpacked
  yet.

  A file's tensor travels as its file only while the sender's pages under
  it are the file's: one written on this node (a private copy of those
  pages) goes as a copy, and so does one whose file name now holds another
  file (`write/3` renamed a new one over it); `via: :file` raises then
  (reason `:unsafe`, or `:gone`).
  """
  @spec pack(Tensor.input(), node(), via: :region | :file | :binary, keep: non_neg_integer()) :: packed()
  def pack(tensor, node, opts \\ []) do
    reported({__MODULE__, :pack, if(opts == [], do: 2, else: 3)},
      do: :tensor_blob.node_pack(Tensor.ref(tensor), node, :tensor_blob_options.keywords(opts))
    )
  end

  @doc """
  The tensor a packed term carries, on the node it was sent to: a mapping
  of the same region, a new mapping of the same file (`TensorBlob.Error`
  with reason `:gone` when the file's name holds another version of it
  now: the bytes could differ from the sender's), or a read-only view of the received binary. The
  binary lies inside the buffer the message arrived in, where what precedes
  it in the message puts it: when its address is not aligned for the dtype,
  it is copied once into a new tensor (`Tensor.memory/1` says `:owned`),
  and the sender learns the pad that aligns the next one on this path.
  `copy: true` always gives a private writable copy, whichever way the
  data came (a region is mapped only while it is copied).
  """
  @spec unpack(packed(), copy: boolean()) :: Tensor.t()
  def unpack(packed, opts \\ []) do
    reported({__MODULE__, :unpack, if(opts == [], do: 1, else: 2)},
      do: Tensor.wrap(:tensor_blob.node_unpack(packed, :tensor_blob_options.keywords(opts)))
    )
  end

  @doc """
  Whether `node` can open the shared memory this node makes (what `pack/2`
  asks): the same host and `/dev/shm`, and the same effective user
  (regions are mode 0600). `false` for a node that cannot be reached. A
  node's answer is remembered until its connection goes down.
  """
  @spec same_host?(node()) :: boolean()
  def same_host?(node), do: translating(do: :tensor_blob.same_host(node))
end
