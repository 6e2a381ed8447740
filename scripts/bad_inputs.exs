# The catalogue of bad inputs (test/BAD_INPUTS.md): each call, the
# exception it raises and its message, as this build answers today.
#   mix run scripts/bad_inputs.exs test/BAD_INPUTS.md          writes it
#   mix run scripts/bad_inputs.exs --check test/BAD_INPUTS.md  fails if stale
# (make bad-inputs, make bad-inputs-check). What changes from run to run
# (addresses, references, region tokens) is written as a placeholder, so
# the file changes only when a message does. The check compares only on the
# libtorch the file was made with (libtorch words some messages itself).
alias TensorBlob.{DLPack, Tensor}

t = Tensor.zeros({2, 3}, :float32)
b = TensorBlob.to_blob(t)
consumed = DLPack.export(t)
_ = DLPack.consume(consumed)
nest = fn n, wrap, term -> Enum.reduce(1..n, term, fn _, acc -> wrap.(acc) end) end
deep = nest.(1_000_000, &[&1], [])
wide = nest.(40, &List.duplicate(&1, 40), 0)

import Bitwise
huge = 1 <<< 200_000
fifty_mb = :binary.copy("k", 50_000_000)

view = fn shape, strides ->
  case TensorBlob.from_blob(%{ptr: b.ptr, shape: shape, strides: strides, dtype: :float32}, owner: t) do
    %TensorBlob.BlobView{tensor: v} -> v
    v -> v
  end
end

# Views of a tensor of 16 elements.
wide16 = Tensor.zeros({16}, :float32)

wide_view = fn shape, strides ->
  %{ptr: ptr} = TensorBlob.to_blob(wide16)

  case TensorBlob.from_blob(%{ptr: ptr, shape: shape, strides: strides, dtype: :float32}, owner: wide16) do
    %TensorBlob.BlobView{tensor: v} -> v
    v -> v
  end
end

broadcast = view.({4}, [0])
windows = view.({2, 2}, [1, 1])
twice = DLPack.consume(DLPack.export(t))
_imported_once = DLPack.import(twice)
packed = TensorBlob.Nodes.pack(t, node(), via: :binary)

# A region whose last holder is gone before the unpack.
gone =
  Task.async(fn ->
    Map.delete(TensorBlob.Nodes.pack(Tensor.zeros({2}, :float32), node(), via: :region, keep: 0), :tensor)
  end)
  |> Task.await()

Process.sleep(100)
:erlang.garbage_collect()
Process.sleep(100)

# The fields of a PyTorch CUDA share (storage._share_cuda_()), with changes.
torch_share = fn changes ->
  Map.merge(
    %{
      device: 0,
      handle: <<0::512>>,
      storage_size_bytes: 64,
      storage_offset_bytes: 0,
      ref_counter_handle: "/torch_1_2_3",
      ref_counter_offset: 0,
      event_handle: <<0::512>>,
      event_sync_required: false
    },
    changes
  )
end

# A file planted under a fresh name in /dev/shm (by kind: "mkfifo" or
# "link") for the length of one call, then removed.
planted = fn kind, call ->
  name = "tb_planted_#{System.unique_integer([:positive])}"
  path = "/dev/shm/" <> name
  dest = if kind == "link", do: "/dev/shm/" <> "tb_planted_" <> name, else: nil

  try do
    if kind == "link", do: File.ln_s!(dest, path), else: {_, 0} = System.cmd("mkfifo", [path])
    File.rm("/dev/shm/torch_" <> name)
    if kind == "mkfifo", do: {_, 0} = System.cmd("mkfifo", ["/dev/shm/torch_" <> name])
    call.(name)
  after
    File.rm(path)
    File.rm("/dev/shm/torch_" <> name)
  end
end

# A fresh VM (the library's code on its path, erl's Args and the OS
# variables Env added) that evaluates Eval, which prints MESSAGE:<text> of
# the error it expects: that text, the priv folder written PRIV.
fresh_vm_message = fn args, env, eval ->
  ebin = :code.which(:tensor_blob) |> Path.dirname()
  priv = :code.priv_dir(:tensor_blob) |> to_string()

  {out, 0} =
    System.cmd(System.find_executable("erl"), ["-noshell", "-pa", ebin | args] ++ ["-eval", eval],
      env: env,
      stderr_to_stdout: true
    )

  [_, message] = Regex.run(~r/MESSAGE:(.*)/, out)
  String.replace(message, priv, "PRIV")
end

# The foreign NIF library of the test suites (make foreign-nif): a real
# NIF library that is not tensor_blob's.
foreign_nif = System.get_env("FOREIGN_TENSOR_NIF") || "build/foreign_tensor_nif"

# A file of the working directory holding data, given to fun, then removed
# (its name, relative, is what the message shows).
with_file = fn name, data, fun ->
  File.write!(name, data)

  try do
    fun.(name)
  after
    File.rm(name)
  end
end

cases = [
  {"spec not a map", fn -> TensorBlob.from_blob(:nope) end},
  {"spec with no owner", fn -> TensorBlob.from_blob(%{ptr: b.ptr, shape: {6}, dtype: :float32}) end},
  {"blob with owner: nil", fn -> TensorBlob.from_blob(%{b | owner: nil}) end},
  {"missing ptr", fn -> TensorBlob.from_blob(Map.delete(b, :ptr)) end},
  {"missing shape", fn -> TensorBlob.from_blob(Map.delete(b, :shape)) end},
  {"missing dtype", fn -> TensorBlob.from_blob(Map.delete(b, :dtype)) end},
  {"ptr negative", fn -> TensorBlob.from_blob(%{b | ptr: -8}) end},
  {"ptr not an integer", fn -> TensorBlob.from_blob(%{b | ptr: "0x10"}) end},
  {"null ptr with elements", fn -> TensorBlob.from_blob(%{b | ptr: 0, owner: :none}) end},
  {"misaligned ptr", fn -> TensorBlob.from_blob(%{b | ptr: b.ptr + 2}) end},
  {"shape not a tuple", fn -> TensorBlob.from_blob(%{b | shape: [2, 3]}) end},
  {"negative dimension", fn -> TensorBlob.from_blob(%{b | shape: {2, -3}}) end},
  {"non-integer dimension", fn -> TensorBlob.from_blob(%{b | shape: {2, 1.5}}) end},
  {"element count past 64 bits", fn -> TensorBlob.from_blob(%{b | shape: {0x7FFFFFFFFFFFFFFF, 3}, strides: nil}) end},
  {"65 dimensions", fn -> TensorBlob.from_blob(%{b | shape: Tuple.duplicate(1, 65), strides: nil}) end},
  {"strides of the wrong length", fn -> TensorBlob.from_blob(%{b | strides: [1]}) end},
  {"strides not a list", fn -> TensorBlob.from_blob(%{b | strides: {3, 1}}) end},
  {"negative stride", fn -> TensorBlob.from_blob(%{b | strides: [3, -1]}) end},
  {"extent past 64 bits", fn -> TensorBlob.from_blob(%{b | strides: [0x7FFFFFFFFFFFFFFF, 1], owner: :none}) end},
  {"extent outside a tensor owner", fn -> TensorBlob.from_blob(%{b | shape: {3, 3}, strides: nil}) end},
  {"extent outside a binary owner", fn -> TensorBlob.from_blob(b, owner: :binary.copy(<<0>>, 1000)) end},
  {"small (heap) binary owner", fn -> TensorBlob.from_blob(b, owner: <<1, 2, 3>>) end},
  {"unknown dtype", fn -> TensorBlob.from_blob(%{b | dtype: :float33}) end},
  {"Nx sub-byte type", fn -> TensorBlob.from_blob(%{b | dtype: {:u, 4}}) end},
  {"dtype libtorch 1.13 lacks", fn -> Tensor.zeros({2}, :float8_e5m2) end},
  {"unknown device", fn -> TensorBlob.from_blob(%{b | device: :gpu}) end},
  {"negative CUDA index", fn -> TensorBlob.from_blob(%{b | device: {:cuda, -1}}) end},
  {"CUDA blob (no CUDA in this build)", fn -> TensorBlob.from_blob(%{b | device: {:cuda, 0}}) end},
  {"unknown from_blob option", fn -> TensorBlob.from_blob(b, pin: true) end},
  {"not a tensor", fn -> Tensor.shape(make_ref()) end},
  {"an Nx tensor where a tensor is expected",
   fn -> TensorBlob.to_blob(%{__struct__: Nx.Tensor, shape: {2}, type: {:f, 32}}) end},
  {"dtype given as a string", fn -> Tensor.zeros({2}, "float32") end},
  {"from_binary: wrong byte count", fn -> Tensor.from_binary(<<1, 2, 3>>, :float32, {1}) end},
  {"from_binary: not a binary", fn -> Tensor.from_binary([1, 2], :uint8, {2}) end},
  {"narrow: dim out of range", fn -> Tensor.narrow(t, 2, 0, 1) end},
  {"narrow: start out of range", fn -> Tensor.narrow(t, 1, 4, 1) end},
  {"narrow: length out of range", fn -> Tensor.narrow(t, 1, 1, 3) end},
  {"narrow a scalar", fn -> Tensor.narrow(Tensor.zeros({}, :int8), 0, 0, 1) end},
  {"transpose: dim out of range", fn -> Tensor.transpose(t, 0, 5) end},
  {"write!: wrong byte count", fn -> Tensor.write!(t, <<0, 0>>) end},
  {"write! a read-only import", fn -> Tensor.write!(DLPack.import(DLPack.export(t, read_only: true)), <<0::192>>) end},
  {"DLPack: consume twice", fn -> DLPack.consume(consumed) end},
  {"DLPack: import a consumed capsule", fn -> DLPack.import(consumed) end},
  {"DLPack: max_version {2, 0}", fn -> DLPack.export(t, max_version: {2, 0}) end},
  {"DLPack: legacy read-only export", fn -> DLPack.export(t, version: :legacy, read_only: true) end},
  {"Python: bind a library that is not loaded",
   fn -> :tensor_blob_python.python_bind("/nonexistent/libpython3.so") end},
  {"Python: bind a library that is no Python", fn -> :tensor_blob_python.python_bind("libc.so.6") end},
  {"Python: bind by address", fn -> :tensor_blob_python.python_bind(%{"PyCapsule_New" => 4096}) end},
  {"strides that overflow when sliced, with a dimension of 0",
   fn -> TensorBlob.from_blob(%{ptr: b.ptr, shape: {2, 0}, strides: [2 ** 63 - 1, 1], dtype: :float32}, owner: t) end},
  {"ptr + extent wraps the address space",
   fn -> TensorBlob.from_blob(%{ptr: 2 ** 64 - 16, shape: {8}, dtype: :float32}, owner: :none) end},
  {"to_blob: a struct name that is no atom", fn -> :tensor_blob.to_blob(Tensor.ref(t), %{struct: 2}) end},
  {"write! a binary's bytes through a wrapped owner",
   fn ->
     ro = Tensor.from_binary(:binary.copy(<<1>>, 256), :uint8, {256}, copy: false)
     %{tensor: v} = TensorBlob.from_blob(Map.delete(TensorBlob.to_blob(ro), :owner), owner: {ro})
     Tensor.write!(v, :binary.copy(<<0>>, 256))
   end},
  {"write! a second mapping of a region a binary shows",
   fn ->
     r = TensorBlob.IPC.zeros({64}, :uint8)
     _bin = Tensor.to_binary(r, copy: false, unsafe_shared_memory: true)
     second = TensorBlob.IPC.open(TensorBlob.IPC.export(r), :uint8, {64})
     Tensor.write!(second, :binary.copy(<<1>>, 64))
   end},
  {"to_device: unknown device", fn -> Tensor.to_device(t, :gpu) end},
  {"IPC: not a shared-memory name", fn -> TensorBlob.IPC.open("a/b", :uint8, {1}) end},
  {"shape holding an atom", fn -> Tensor.zeros({2, :a}, :float32) end},
  {"to_binary(copy: false) of a non-contiguous tensor",
   fn -> t |> Tensor.transpose(0, 1) |> Tensor.to_binary(copy: false) end},
  {"a huge term, printed with limits", fn -> TensorBlob.from_blob(%{b | ptr: Enum.to_list(1..100_000)}) end},
  {"to_binary(copy: false) of a shared-memory region",
   fn -> TensorBlob.IPC.zeros({64}, :uint8) |> Tensor.to_binary(copy: false) end},
  {"to_binary: unsafe_shared_memory not a boolean",
   fn -> TensorBlob.IPC.zeros({64}, :uint8) |> Tensor.to_binary(copy: false, unsafe_shared_memory: :yes) end},
  {"to_binary of a region another program shrank",
   fn ->
     r = TensorBlob.IPC.zeros({64}, :uint8)
     File.write!("/dev/shm" <> TensorBlob.IPC.export(r).handle, "")
     Tensor.to_binary(r)
   end},
  {"IPC: a PyTorch region that is gone", fn -> TensorBlob.IPC.open("/torch_1_2_3", :float32, {4}) end},
  {"IPC: a PyTorch region smaller than the shape",
   fn ->
     h = TensorBlob.IPC.export_torch(TensorBlob.IPC.torch_zeros({2}, :float32))
     TensorBlob.IPC.open(h.handle, :float32, {3})
   end},
  {"CUDA share: a handle of PyTorch's expandable segments",
   fn -> TensorBlob.CUDA.open_torch_share(torch_share.(%{handle: <<2, ?e>> <> <<0::512>>}), :float32, {4}) end},
  {"CUDA share: a handle of the wrong size",
   fn -> TensorBlob.CUDA.open_torch_share(torch_share.(%{handle: <<0::520>>}), :float32, {4}) end},
  {"CUDA share: a field missing",
   fn -> TensorBlob.CUDA.open_torch_share(Map.delete(torch_share.(%{}), :event_handle), :float32, {4}) end},
  {"CUDA share: a shape larger than the storage",
   fn -> TensorBlob.CUDA.open_torch_share(torch_share.(%{}), :float32, {17}) end},
  {"CUDA share: a well-formed share (no CUDA here)",
   fn -> TensorBlob.CUDA.open_torch_share(torch_share.(%{}), :float32, {16}) end},
  {"CUDA share: exporting a CPU tensor", fn -> TensorBlob.CUDA.export_torch_share(t) end},
  {"a tensor made on another node",
   fn ->
     # A reference as it arrives from node peer1@machine (same name length as nonode@nohost).
     ext = :erlang.term_to_binary(make_ref())
     [before, rest] = :binary.split(ext, "nonode@nohost")
     Tensor.shape(Tensor.wrap(:erlang.binary_to_term(before <> "peer1@machine" <> rest)))
   end},
  {"Nodes: an unknown path", fn -> TensorBlob.Nodes.pack(t, node(), via: :pigeon) end},
  {"Nodes: unpacking what pack did not make", fn -> TensorBlob.Nodes.unpack(%{via: :region}) end},
  {"a million-deep list as a spec, printed cut down", fn -> TensorBlob.from_blob(deep) end},
  {"a million-deep list as a shape", fn -> Tensor.zeros(deep, :float32) end},
  {"a million-deep list as an IPC handle", fn -> TensorBlob.IPC.open(deep, :uint8, {1}) end},
  {"a million-deep list, Erlang API", fn -> :tensor_blob.zeros(deep, :float32) end},
  {"a tree of shared subterms 40 wide and 40 deep as a dtype", fn -> Tensor.zeros({1}, wide) end},
  {"2^62 float32 elements with stride 0 (bytes past 64 bits)",
   fn -> TensorBlob.from_blob(%{ptr: b.ptr, shape: {2 ** 62}, strides: [0], dtype: :float32}, owner: t) end},
  {"2^61 float64 elements with stride 0",
   fn -> TensorBlob.from_blob(%{ptr: b.ptr, shape: {2 ** 61}, strides: [0], dtype: :float64}, owner: t) end},
  {"2^60 complex128 elements with stride 0",
   fn -> TensorBlob.from_blob(%{ptr: b.ptr, shape: {2 ** 60}, strides: [0], dtype: :complex128}, owner: t) end},
  {"62 dimensions of 2 with stride 0, float32",
   fn ->
     TensorBlob.from_blob(%{ptr: b.ptr, shape: Tuple.duplicate(2, 62), strides: List.duplicate(0, 62), dtype: :float32},
       owner: t
     )
   end},
  {"DLPack: a CPU capsule imported with stream 0 (left armed)", fn -> DLPack.import(DLPack.export(t), stream: 0) end},
  {"DLPack: a CPU capsule imported with stream 1 (left armed)", fn -> DLPack.import(DLPack.export(t), stream: 1) end},
  {"DLPack: a CPU capsule imported with stream 2 (left armed)", fn -> DLPack.import(DLPack.export(t), stream: 2) end},
  {"DLPack: a CPU capsule imported with stream -1 (left armed)", fn -> DLPack.import(DLPack.export(t), stream: -1) end},
  {"a 200,000-bit integer as a dimension", fn -> Tensor.zeros({huge}, :float32) end},
  {"a 200,000-bit integer as ptr", fn -> TensorBlob.from_blob(%{b | ptr: huge}) end},
  {"a 200,000-bit integer as a stride", fn -> TensorBlob.from_blob(%{b | strides: [huge, 1]}) end},
  {"a negative 200,000-bit integer as narrow's start", fn -> Tensor.narrow(t, 0, -huge, 1) end},
  {"a 200,000-bit integer as a CUDA index", fn -> Tensor.to_device(t, {:cuda, huge}) end},
  {"a 200,000-bit integer as an option value", fn -> Tensor.to_binary(t, copy: huge) end},
  {"a 50 MB binary as an option key", fn -> Tensor.to_binary(t, [{:copy, true}, {fifty_mb, 1}]) end},
  {"a 50 MB binary as an option value", fn -> Tensor.to_binary(t, copy: fifty_mb) end},
  {"write! through a view with stride 0", fn -> Tensor.write!(broadcast, :binary.copy(<<0::32>>, 4)) end},
  {"write! through a view whose rows overlap", fn -> Tensor.write!(windows, :binary.copy(<<0::32>>, 4)) end},
  {"DLPack: an address imported twice", fn -> DLPack.import(twice) end},
  {"DLPack: an address no import may take (another producer's, without unsafe_address)", fn -> DLPack.import(4096) end},
  {"DLPack: unsafe_address not a boolean", fn -> DLPack.import(4096, unsafe_address: 1) end},
  {"Nodes: unpack with copy not a boolean", fn -> TensorBlob.Nodes.unpack(packed, copy: :yes) end},
  {"Nodes: pack with a negative keep", fn -> TensorBlob.Nodes.pack(t, node(), keep: -1) end},
  {"Nodes: via region to a node that cannot be reached",
   fn -> TensorBlob.Nodes.pack(t, :"nowhere@127.0.0.1", via: :region) end},
  {"Nodes: a region unpacked after the sender freed it (keep: 0)", fn -> TensorBlob.Nodes.unpack(gone) end},
  {"Nodes: same_host? of a string", fn -> TensorBlob.Nodes.same_host?("peer") end},
  {"IPC: a FIFO under a region's name (planted by another program)",
   fn -> planted.("mkfifo", fn name -> TensorBlob.IPC.open(name, :uint8, {1}) end) end},
  {"IPC: a symbolic link under a region's name",
   fn -> planted.("link", fn name -> TensorBlob.IPC.open(name, :uint8, {1}) end) end},
  {"IPC: a FIFO under a PyTorch region's name",
   fn -> planted.("mkfifo", fn name -> TensorBlob.IPC.open("torch_" <> name, :uint8, {1}) end) end},
  {"Nodes: a forged packed term naming a plain region",
   fn ->
     plain = TensorBlob.IPC.export(TensorBlob.IPC.zeros({128}, :uint8)).handle
     TensorBlob.Nodes.unpack(%{__tensor_blob_node__: 1, via: :region, handle: plain, dtype: :uint8, shape: {64}})
   end},
  {"Nodes: a forged packed term naming a Python block",
   fn ->
     TensorBlob.Nodes.unpack(%{
       __tensor_blob_node__: 1,
       via: :region,
       handle: "/psm_0123abcd",
       dtype: :uint8,
       shape: {64}
     })
   end},
  {"write! through a view whose elements meet by a combination of strides ({4, 3}, strides [2, 3])",
   fn -> Tensor.write!(wide_view.({4, 3}, [2, 3]), :binary.copy(<<0::32>>, 12)) end},
  {"write! through a view whose elements meet by a combination of strides ({2, 2, 2}, strides [1, 4, 5])",
   fn -> Tensor.write!(wide_view.({2, 2, 2}, [1, 4, 5]), :binary.copy(<<0::32>>, 8)) end},
  {"DLPack: a legacy address this library handed out, imported as versioned",
   fn -> t |> DLPack.export(version: :legacy) |> DLPack.consume() |> DLPack.import(version: :versioned) end},
  {"IPC: a PyTorch region whose header count is INT_MIN (forged)",
   fn ->
     h = TensorBlob.IPC.export_torch(TensorBlob.IPC.torch_zeros({2}, :float32))
     {:ok, f} = :file.open("/dev/shm" <> h.handle, [:read, :write, :raw, :binary])
     :ok = :file.pwrite(f, 0, <<-2_147_483_648::signed-native-32>>)

     try do
       TensorBlob.IPC.open(h.handle, :float32, {2})
     after
       :ok = :file.pwrite(f, 0, <<1::signed-native-32>>)
       :file.close(f)
     end
   end},
  {"Nodes: a packed term of a format this build does not know",
   fn -> TensorBlob.Nodes.unpack(%{packed | __tensor_blob_node__: 2}) end},
  {"IPC.open/1: a JSON line whose handle is a 5 MB string",
   fn ->
     TensorBlob.IPC.open(~s({"handle": "#{String.duplicate("a", 5_000_000)}", "dtype": "float32", "shape": [3]}))
   end},
  {"IPC.open/1: a map whose shape is an improper list",
   fn -> TensorBlob.IPC.open(%{handle: "/torch_1_2_3", dtype: :float32, shape: [2 | 3]}) end},
  {"IPC.open/1: a JSON line without a dtype",
   fn -> TensorBlob.IPC.open(~s({"handle": "/torch_1_2_3", "shape": [2]})) end},
  {"IPC.open/1: a dtype the library does not know",
   fn -> TensorBlob.IPC.open(~s({"handle": "/torch_1_2_3", "dtype": "float31", "shape": [2]})) end},
  {"IPC.open/1: a data_size that is a string",
   fn ->
     TensorBlob.IPC.open(%{"handle" => "/torch_1_2_3", "dtype" => "float32", "shape" => [2], "data_size" => "8"})
   end},
  {"IPC.open/1: a data_size smaller than the shape",
   fn -> TensorBlob.IPC.open(~s({"handle": "/torch_1_2_3", "dtype": "float32", "shape": [4], "data_size": 8})) end},
  {"IPC.open/1: neither a map nor a line", fn -> TensorBlob.IPC.open({:handle, "/torch_1_2_3"}) end},
  {"from_blob: a spec with string keys (a decoded JSON map)",
   fn -> TensorBlob.from_blob(%{"ptr" => b.ptr, "shape" => [6], "dtype" => "float32", "owner" => t}) end},
  {"a freed tensor's reference (read back from term_to_binary after its process exited)",
   fn ->
     ext = Task.async(fn -> :erlang.term_to_binary(Tensor.zeros({2}, :float32).ref) end) |> Task.await()
     Tensor.shape(Tensor.wrap(:erlang.binary_to_term(ext)))
   end},
  {"Nodes: pack to a node named by a string", fn -> TensorBlob.Nodes.pack(t, "nodeb@vm") end},
  {"bool: a byte other than 0 and 1", fn -> Tensor.from_binary(<<0, 1, 2>>, :bool, {3}) end},
  {"bool: a view of a byte other than 0 and 1", fn -> Tensor.from_binary(<<0, 1, 2>>, :bool, {3}, copy: false) end},
  {"bool: write of a byte other than 0 and 1", fn -> Tensor.write!(Tensor.zeros({3}, :bool), <<0, 1, 2>>) end},
  {"TENSOR_BLOB_NIF naming no file (a fresh VM's first call)",
   fn ->
     # The library loads once per VM: a fresh one, given the variable,
     # makes its first call; the message it raises is raised here.
     eval = ~S"""
     try tensor_blob:stats() of _ -> halt(1)
     catch error:{tensor_blob, M} -> io:format("MESSAGE:~ts~n", [M]), halt(0)
     end.
     """

     raise TensorBlob.Error, fresh_vm_message.([], [{"TENSOR_BLOB_NIF", "nowhere/tensor_blob_nif"}], eval)
   end},
  {"IPC.open/1: a JSON line that names a field twice (decoders differ on its value)",
   fn -> TensorBlob.IPC.open(~s({"handle": "/torch_1_2_3", "dtype": "float32", "shape": [2], "dtype": "float64"})) end},
  {"Nodes: pack with no keep, the application environment's node_keep bad",
   fn ->
     Application.put_env(:tensor_blob, :node_keep, :soon)

     try do
       TensorBlob.Nodes.pack(t, node(), via: :region)
     after
       Application.delete_env(:tensor_blob, :node_keep)
     end
   end},
  {"Nodes: pack with no keep, erl's argument -tensor_blob node_keep 5x (a fresh VM)",
   fn ->
     eval = ~S"""
     try tensor_blob:node_pack(tensor_blob:zeros({2}, float32), node(), #{via => region}) of _ -> halt(1)
     catch error:{badarg, M} -> io:format("MESSAGE:~ts~n", [M]), halt(0)
     end.
     """

     raise ArgumentError, fresh_vm_message.(["-tensor_blob", "node_keep", "5x"], [], eval)
   end},
  {"Nodes: via region to a node named downs (a name the library once kept a row under)",
   fn -> TensorBlob.Nodes.pack(t, :downs, via: :region) end},
  {"write! a tensor the binary of a packed term shows (Nodes.pack from 32 KiB, via binary)",
   fn ->
     big = Tensor.zeros({8192}, :float32)
     packed = TensorBlob.Nodes.pack(big, node(), via: :binary)
     Tensor.write!(big, :binary.copy(<<0>>, 32768))
     packed
   end},
  {"TENSOR_BLOB_NIF naming another NIF library (a fresh VM's first call)",
   fn ->
     eval = ~S"""
     try tensor_blob:stats() of _ -> halt(1)
     catch error:{tensor_blob, M} -> io:format("MESSAGE:~ts~n", [M]), halt(0)
     end.
     """

     message = fresh_vm_message.([], [{"TENSOR_BLOB_NIF", foreign_nif}], eval)
     raise TensorBlob.Error, String.replace(message, foreign_nif, "FOREIGN_NIF")
   end},
  {"SafeTensors.open of a directory", fn -> TensorBlob.SafeTensors.open("/") end},
  {"SafeTensors.open of a device", fn -> TensorBlob.SafeTensors.open("/dev/null") end},
  {"SafeTensors.open of no file", fn -> TensorBlob.SafeTensors.open("/nonexistent.safetensors") end},
  {"SafeTensors.open: path not a file name", fn -> TensorBlob.SafeTensors.open({:a}) end},
  {"SafeTensors.open: only not a list", fn -> TensorBlob.SafeTensors.open("/", only: :w) end},
  {"SafeTensors.open: unknown option", fn -> TensorBlob.SafeTensors.open("/", lazy: true) end},
  {"SafeTensors.open: unsupported not refuse, skip or bytes",
   fn -> TensorBlob.SafeTensors.open("/", unsupported: :maybe) end},
  {"SafeTensors.open of a JSON file (an index named otherwise)",
   fn -> with_file.("bad_input_index.txt", ~s({"weight_map": {}}), &TensorBlob.SafeTensors.open/1) end},
  {"SafeTensors.open of a text file",
   fn -> with_file.("bad_input_notes.txt", "not a safetensors file\n", &TensorBlob.SafeTensors.open/1) end},
  {"SafeTensors.open of a truncated file",
   fn ->
     header = ~s({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})

     with_file.(
       "bad_input_cut.safetensors",
       [<<byte_size(header)::little-64>>, header, <<0::64>>],
       &TensorBlob.SafeTensors.open/1
     )
   end},
  {"SafeTensors.open of F6 values, without unsupported:",
   fn ->
     header = ~s({"s":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[0,3]}})

     with_file.(
       "bad_input_f6.safetensors",
       [<<byte_size(header)::little-64>>, header, <<1, 2, 3>>],
       &TensorBlob.SafeTensors.open/1
     )
   end},
  {"SafeTensors.info of no file", fn -> TensorBlob.SafeTensors.info("/nonexistent.safetensors") end},
  {"SafeTensors.write of a dtype the format lacks",
   fn -> TensorBlob.SafeTensors.write("/nonexistent/x.safetensors", %{"c" => Tensor.zeros({1}, :complex128)}) end},
  {"SafeTensors.write: metadata not strings",
   fn -> TensorBlob.SafeTensors.write("/nonexistent/x.safetensors", %{"c" => t}, %{"k" => 1}) end},
  {"SafeTensors.write: not a tensor", fn -> TensorBlob.SafeTensors.write("/nonexistent/x.safetensors", %{"c" => 1}) end}
]

{check?, path} =
  case System.argv() do
    ["--check", path] -> {true, path}
    [path] -> {false, path}
    _ -> raise ArgumentError, "usage: mix run scripts/bad_inputs.exs [--check] test/BAD_INPUTS.md"
  end

# Addresses (12 to 17 digits: the deterministic large numbers of the cases
# are 2^60 and more) and their alignment, references, region tokens and planted names vary by run.
normalize = fn message ->
  message
  |> String.replace(~r/\b\d{12,17}\b/, "ADDR")
  |> String.replace(~r/alignment: \d+/, "alignment: ALIGN")
  |> String.replace(~r/#Reference<[\d.]+>/, "#Reference<...>")
  |> String.replace(~r/tensor_blob\.\d+-[0-9a-f]{16}\.\d+/, "tensor_blob.TOKEN.N")
  |> String.replace(~r/tb_planted_\d+/, "tb_planted_N")
end

torch = TensorBlob.torch_version()

rows =
  for {{label, fun}, i} <- Enum.with_index(cases, 1) do
    {kind, message} =
      try do
        fun.()
        {"NOTHING (a bug)", ""}
      rescue
        e -> {inspect(e.__struct__), Exception.message(e)}
      end

    "| #{i} | #{label} | #{kind} | `#{message |> normalize.() |> String.replace("|", "\\|")}` |\n"
  end

text =
  IO.iodata_to_binary([
    "# Bad inputs and the errors they get\n\n",
    "Generated by `make bad-inputs` (`mix run scripts/bad_inputs.exs test/BAD_INPUTS.md`) against libtorch #{torch}; ",
    "`make test` fails when it is stale. Addresses are written ADDR (their alignment ALIGN), references `#Reference<...>`, region tokens TOKEN. ",
    "Each case is also asserted in the test suites (ExUnit, EUnit, PropEr for random malformed specs). ",
    "Messages show terms as Elixir prints them; the Erlang API (`tensor_blob`) raises the same messages ",
    "with Erlang's rendering (`{2,a}`, `<<\"0x10\">>`, `\#{copy => true}`), case 49 for one.\n\n",
    "| # | input | raises | message |\n",
    "|---|---|---|---|\n",
    rows,
    "\n#{length(cases)} cases.\n"
  ])

if check? do
  old = File.read!(path)

  case Regex.run(~r/against libtorch (\S+?);/, old) do
    [_, ^torch] ->
      if old == text do
        IO.puts("bad-inputs-check: #{path} is current (#{length(cases)} cases)")
      else
        new_path = Path.join(System.tmp_dir!(), "BAD_INPUTS.md")
        File.write!(new_path, text)
        IO.puts(:stderr, "bad-inputs-check: #{path} is stale: `make bad-inputs` rewrites it (new text in #{new_path})")
        System.halt(1)
      end

    found ->
      made = if found, do: Enum.at(found, 1), else: "an unknown libtorch"
      IO.puts("bad-inputs-check: skipped: #{path} was made against libtorch #{made}, this build links #{torch}")
  end
else
  File.write!(path, text)
end
