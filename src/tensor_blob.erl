%% @doc Zero-copy tensor exchange: the Erlang API.
%%
%% Tensors are resource references holding one libtorch tensor each. A blob is a map describing
%% memory:
%%
%%   #{ptr, shape, strides, dtype, device, element_size, byte_size, alignment, owner}
%%
%% to_blob/1 describes a tensor's memory (owner => the tensor); from_blob/1,2 views described memory
%% as a tensor, keeping the owner alive until libtorch frees the storage (a view inside one of our
%% tensors shares its storage; any other owner term is pinned). to_dlpack/1,2 and from_dlpack/1,2
%% exchange tensors as DLPack managed tensors (see to_dlpack/2 and from_dlpack/2). Bad input raises
%% error({badarg, Message}); failures that are not the caller's raise error({tensor_blob, Message}).
%% Where the telemetry library is loaded, every copy and transfer is a [tensor_blob, copy] or
%% [tensor_blob, transfer] span: start, stop and exception events (guides/telemetry.md). Tensors
%% shared with other OS processes (shared memory, CUDA IPC) are tensor_blob_ipc's; safetensors files
%% are tensor_blob_safetensors'.
-module(tensor_blob).

-export([to_blob/1, to_blob/2, from_blob/1, from_blob/2,
         from_binary/3, from_binary/4, to_binary/1, to_binary/2, zeros/2, write/2,
         narrow/4, transpose/3, to_device/2, copy/1,
         shape/1, strides/1, dtype/1, device/1, memory/1, pinned/1, describe/1, overlaps/2,
         to_dlpack/1, to_dlpack/2, from_dlpack/1, from_dlpack/2,
         consume_dlpack/1, dlpack_version/1,
         stats/0, dtypes/0, nx_type/1, torch_version/0, tables/0, dtype_info/1,
         cuda_info/0, cuda_synchronize/1, cuda_memory/1, dlpack_info/1,
         node_pack/2, node_pack/3, node_unpack/1, node_unpack/2, node_learn_pad/2, host_id/0, same_host/1,
         shm_identity/0]).

%% For the Erlang shell's and Elixir's rendering of errors (error_info).
-export([format_error/2, error_reason/1]).

-include("tensor_blob_internal.hrl").

-import(tensor_blob_error, [not_a_tensor/1]).

-export_type([dtype_info/0, device_info/0, storage_info/0, safetensors_dtype_info/0, memory/0]).
-export_type([tensor/0, blob/0, spec/0, dtype/0, shape/0, device/0,
              capsule/0, dlpack_version/0]).

%% A type's doc follows its declaration (edoc's rule for types).
-type capsule() :: reference().
%% A DLPack capsule: a resource owning one exported managed tensor (to_dlpack/2).
-type dlpack_version() :: versioned | legacy.
%% The DLPack ABI a capsule holds: versioned (DLPack 1.x, DLManagedTensorVersioned) or legacy
%% (DLManagedTensor).

-type tensor() :: reference().
%% A tensor: a resource reference holding one libtorch tensor.
-type shape() :: tuple().
%% A tensor's shape: a tuple of sizes, one per dimension ({} for a scalar).
-type device() :: cpu | {cuda, non_neg_integer()}.
%% A device: one term per row of the device table (tables/0), an indexed device type with its index.
%% Every spec here and in the Elixir facade (TensorBlob.Tensor.device()) names this type.
-type dtype() :: atom() | {atom(), pos_integer()}.
%% A dtype: a name of the dtype table (dtypes/0) or one of its aliases, or an Nx type such as
%% {f, 32}.
-type dtype_info() :: #{name := atom(), element_size := pos_integer(),
                        dlpack := {non_neg_integer(), pos_integer(), pos_integer()},
                        kind := bool | uint | int | float | bfloat | complex | float8 | float4, bits := pos_integer(),
                        nx := {atom(), pos_integer()} | nil, aliases := [atom()], since := binary(),
                        available := boolean(), safetensors := binary() | nil}.
%% A row of the dtype table: its canonical name, its elements (kind and bits), its DLPack
%% {Code, Bits, Lanes}, its Nx type, its other names, the libtorch release that brought it,
%% whether the linked libtorch holds it, and its safetensors name.
-type safetensors_dtype_info() :: #{name := binary(), bits := pos_integer(), dtype := atom() | nil}.
%% A dtype of the safetensors format: its name, the bits of one value (F4 and F6 are packed), and
%% the dtype of the table that holds its values (nil where none does: open/2 of
%% tensor_blob_safetensors then gives its bytes or leaves it out, on request).
-type device_info() :: #{name := atom(), dlpack := integer(), indexed := boolean()}.
%% A row of the device table: a device type, its DLPack code, whether its devices are numbered.
-type memory() :: owned | pinned | unpinned | dlpack | binary | ipc | file.
%% What memory/1 answers: one atom per row of the storage kind table (tables/0's storage).
-type storage_info() :: #{name := atom(), memory := memory(), keeps_owner := boolean(), region := boolean()}.
%% A row of the storage kind table: a kind, what memory/1 answers for it, whether it keeps its
%% owner alive (pinned/1), whether it is a named shared-memory region.
-type blob() :: #{ptr := non_neg_integer(), shape := shape(), strides := [non_neg_integer()],
                  dtype := atom(), device := device(), element_size := pos_integer(),
                  byte_size := non_neg_integer(), alignment := pos_integer(), owner := term(),
                  '__struct__' => atom()}.
%% A blob: what to_blob/1 says of a tensor's memory (strides in elements, sizes in bytes); to_blob/2
%% with the struct option tags it with '__struct__' (the Elixir facade's %TensorBlob.Blob{}).
-type spec() :: #{ptr := non_neg_integer(), shape := shape(), dtype := dtype(),
                  strides => [non_neg_integer()] | undefined | nil,
                  device => device() | undefined | nil, owner => term(), atom() => term()}.
%% What from_blob/1,2 takes: a blob, or a map with at least ptr, shape and dtype (strides default to
%% row-major, device to cpu); owner is the term that keeps the memory alive.

%% @doc The blob describing T's memory; the blob's owner is T.
-spec to_blob(tensor()) -> blob().
to_blob(T) when is_reference(T) -> tensor_blob_tensor:blob(?NIF(tensor_blob_nif:blob_fields(T)), T);
to_blob(T) -> not_a_tensor(T).

%% @doc Like to_blob/1. Options: owner (the blob's owner, by default T), struct (its struct tag).
-spec to_blob(tensor(), #{owner => term(), struct => atom()}) -> blob().
to_blob(T, Opts) -> tensor_blob_tensor:to_blob(T, Opts).

%% @doc A tensor over the memory Spec describes, keeping its owner alive: the spec's owner key (a
%% blob from to_blob/1 names its tensor) is kept until the last tensor using this memory is freed. A
%% view inside one of our tensors shares that tensor's storage (memory/1 answers as the tensor
%% does); any other owner term is pinned (memory/1 says pinned). A spec that describes one of our
%% tensors exactly (its blob, unchanged) gives that tensor back.
%%
%% A spec with no owner (absent, undefined or nil) raises badarg, offering the safe ways first: the
%% term the memory belongs to (`#{owner => Term}' in the spec or the options), or a copy
%% (from_binary/3). Last, and unsafe: `owner => none', an unpinned view the caller answers for
%% (memory/1 says unpinned): reading it after the memory is freed kills the VM.
-spec from_blob(spec()) -> tensor().
from_blob(Spec) -> tensor_blob_tensor:from_blob(Spec).

%% @doc Like from_blob/1; option owner: the term to keep alive, in place of the spec's (or none).
-spec from_blob(spec(), #{owner => term()}) -> tensor().
from_blob(Spec, Opts) -> element(1, tensor_blob_tensor:blob_view(Spec, Opts)).

%% @doc A new tensor holding a copy of Binary's bytes (row-major).
-spec from_binary(binary(), dtype(), shape()) -> tensor().
from_binary(Binary, Dtype, Shape) -> ?SPANS(from_binary, 3, tensor_blob_tensor:from_binary(Binary, Dtype, Shape)).

%% @doc from_binary/3, or with #{copy => false} a read-only tensor over Binary's own bytes: no copy,
%% and the tensor pins the binary. write/2 refuses it, and views of it, for a binary is immutable. A
%% binary of 64 bytes or less lives on a process heap: the pin holds a copy of it, and the tensor
%% views that copy (read-only all the same). Bytes not aligned to the element size (a part of a
%% larger binary may start anywhere) raise badarg; #{copy => if_needed} views the bytes when they
%% are aligned and copies them (into an owned tensor) when they are not.
-spec from_binary(binary(), dtype(), shape(), #{copy => boolean() | if_needed}) -> tensor().
from_binary(Binary, Dtype, Shape, Opts) ->
    ?SPANS(from_binary, 4, tensor_blob_tensor:from_binary(Binary, Dtype, Shape, Opts)).

%% @doc A copy of T's elements as row-major bytes, whatever its strides.
-spec to_binary(tensor()) -> binary().
to_binary(T) when is_reference(T) ->
    ?SPANS(to_binary, 1, tensor_blob_tensor:copy_to_binary(T, {?MODULE, to_binary, 1}, requested));
to_binary(T) -> not_a_tensor(T).

%% @doc to_binary/1, or with #{copy => false} a binary over T's own memory: no copy, and the binary
%% keeps the memory alive. T must be a contiguous CPU tensor. While such a binary lives, write/2
%% refuses to write any tensor whose memory overlaps it (a binary is immutable). Memory written by
%% other means (a DLPack consumer, foreign code) shows through the binary. A tensor viewing a
%% binary's bytes (from_binary/4, copy false) gives that binary back, or the part of it its elements
%% occupy.
%%
%% Memory in a shared-memory region is refused: another program can shrink the region, and a read of
%% the binary would then kill the VM (SIGBUS), unless #{unsafe_shared_memory => true} accepts that
%% risk. With #{copy => if_needed}, a view where one can be made (a contiguous CPU tensor, not in a
%% region unless unsafe_shared_memory), a copy otherwise.
-spec to_binary(tensor(), #{copy => boolean() | if_needed, unsafe_shared_memory => boolean()}) -> binary().
to_binary(T, Opts) -> ?SPANS(to_binary, 2, tensor_blob_tensor:to_binary(T, Opts)).

%% @doc A new tensor whose every byte is 0: zeros of every dtype (float8_e8m0fnu has no zero; its 0 byte is 2^-127).
-spec zeros(shape(), dtype()) -> tensor().
zeros(Shape, Dtype) -> ?DTYPE_CHECKED(Dtype, tensor_blob_nif:zeros(Shape, Dtype)).

%% @doc Overwrites T's elements in place with Binary (row-major order), so every view of the same
%% memory sees the new values. Returns T. Raises badarg on a view whose elements share memory (a
%% stride of 0, sliding windows, strides such as [2, 3] over {4, 3}, where {3, 0} and {0, 2} meet),
%% and on a layout where that is not settled within a bounded search (write a contiguous copy).
-spec write(tensor(), binary()) -> tensor().
write(T, Binary) -> ?SPANS(write, 2, tensor_blob_tensor:write(T, Binary)).

%% @doc A copy of T on Device (cpu or {cuda, Index}): the explicit copy between the host and a GPU.
%% Always a new tensor, even on the same device.
-spec to_device(tensor(), device()) -> tensor().
to_device(T, Device) -> ?SPANS(to_device, 2, tensor_blob_tensor:to_device(T, Device)).

%% @doc A copy of T on its own device: a new tensor that owns its memory, contiguous and writable,
%% whatever T's memory was (a view of a binary, a read-only import, a region, a mapped file).
-spec copy(tensor()) -> tensor().
copy(T) when is_reference(T) -> ?SPANS(copy, 1, tensor_blob_tensor:to_device(T, device(T)));
copy(T) -> not_a_tensor(T).

%% @doc A view of Length elements of dimension Dim from Start; shares memory.
-spec narrow(tensor(), non_neg_integer(), non_neg_integer(), non_neg_integer()) -> tensor().
narrow(T, Dim, Start, Length) when is_reference(T) -> ?NIF(tensor_blob_nif:narrow(T, Dim, Start, Length));
narrow(T, _Dim, _Start, _Length) -> not_a_tensor(T).

%% @doc A view with dimensions Dim0 and Dim1 swapped; shares memory.
-spec transpose(tensor(), non_neg_integer(), non_neg_integer()) -> tensor().
transpose(T, Dim0, Dim1) when is_reference(T) -> ?NIF(tensor_blob_nif:transpose(T, Dim0, Dim1));
transpose(T, _Dim0, _Dim1) -> not_a_tensor(T).

%% @doc T's dimensions, as a tuple ({} for a scalar).
-spec shape(tensor()) -> shape().
shape(T) when is_reference(T) -> ?NIF(tensor_blob_nif:shape(T));
shape(T) -> not_a_tensor(T).

%% @doc Element strides.
-spec strides(tensor()) -> [non_neg_integer()].
strides(T) when is_reference(T) -> ?NIF(tensor_blob_nif:strides(T));
strides(T) -> not_a_tensor(T).

%% @doc T's canonical dtype atom.
-spec dtype(tensor()) -> atom().
dtype(T) when is_reference(T) -> ?NIF(tensor_blob_nif:dtype(T));
dtype(T) -> not_a_tensor(T).

%% @doc Where T's memory is: cpu, or {cuda, Index} for a GPU's.
-spec device(tensor()) -> device().
device(T) when is_reference(T) -> ?NIF(tensor_blob_nif:device(T));
device(T) -> not_a_tensor(T).

%% @doc What T's memory is, and who keeps it alive: owned (libtorch allocated it), pinned (a view
%% that keeps an owner term alive; a view inside one of our tensors shares its storage and answers
%% as it does), unpinned (a view the caller answers for), dlpack (a DLPack import: the producer's
%% memory, released through its deleter), binary (a view of a binary's bytes), ipc (a mapping of a
%% shared-memory region, or of a CUDA IPC handle), file (a private mapping of a file: safetensors).
%% Slices and transposes answer as the tensor they view.
-spec memory(tensor()) -> memory().
memory(T) when is_reference(T) -> ?NIF(tensor_blob_nif:memory(T));
memory(T) -> not_a_tensor(T).

%% @doc true when T keeps its memory's owner alive: pinned, dlpack or binary (see tables/0).
-spec pinned(tensor()) -> boolean().
pinned(T) -> tensor_blob_tables:keeps_owner(memory(T)).

%% @doc true when the bytes A's elements span (from its first element to its last) and B's overlap:
%% a write through one may change what the other reads. Regions compare by their file, so two
%% mappings of one region overlap; a tensor with no elements overlaps nothing.
-spec overlaps(tensor(), tensor()) -> boolean().
overlaps(A, B) -> ?NIF(tensor_blob_nif:overlaps(A, B)).

%% @doc What T is, for the shell, where a tensor prints as a bare reference: its dtype, shape,
%% device and memory kind (see memory/1). For example
%% `tensor_blob:describe(tensor_blob:zeros({2, 3}, float32))' gives
%% `#{device => cpu, dtype => float32, memory => owned, shape => {2,3}}'.
-spec describe(tensor()) -> #{dtype := atom(), shape := shape(), device := device(),
                              memory := memory()}.
describe(T) when is_reference(T) ->
    #{dtype => dtype(T), shape => shape(T), device => device(T), memory => memory(T)};
describe(T) -> not_a_tensor(T).

%% @doc Live tensors, pins, DLPack exports (capsules whose deleter has not run, consumed or not),
%% binaries of to_binary(T, #{copy => false}) and imports with defer_release, for leak checks.
-spec stats() -> #{tensors := non_neg_integer(), pins := non_neg_integer(), capsules := non_neg_integer(),
                   binaries := non_neg_integer(), deferred := non_neg_integer()}.
stats() -> tensor_blob_nif:stats().

%% @doc The canonical dtypes the linked libtorch can hold.
-spec dtypes() -> [atom()].
dtypes() -> tensor_blob_nif:dtypes().

%% @doc The library's dtype, device, storage kind, error-reason and safetensors dtype tables, in table order: every
%% dtype it knows (`available' says whether the linked libtorch holds it), every device type, every
%% kind of memory, every reason an error may carry (error_reason/1), and every dtype of the
%% safetensors format (with the dtype that holds its values, or nil). The C tables are the one
%% source of truth; Inspect, the guides' tables, pinned/1 and the tests derive from this answer.
-spec tables() -> #{dtypes := [dtype_info()], devices := [device_info()], storage := [storage_info()],
                    reasons := [atom()], safetensors := [safetensors_dtype_info()]}.
tables() -> tensor_blob_tables:tables().

%% @doc The row of tables() of a canonical dtype.
-spec dtype_info(atom()) -> dtype_info().
dtype_info(Name) -> tensor_blob_tables:dtype_info(Name).

%% @doc The Nx type {Kind, Bits} of a dtype (from the one dtype table), or nil when Nx has none
%% (bool, complex32).
-spec nx_type(dtype()) -> {atom(), pos_integer()} | nil.
nx_type(Dtype) -> ?DTYPE_CHECKED(Dtype, tensor_blob_nif:nx_type(Dtype)).

%% @doc What this build knows of CUDA: built (compiled with TB_CUDA=1), runtime (libcudart was found
%% at load), runtime_path (its file), devices (GPUs the runtime sees), libtorch (the linked libtorch
%% has CUDA), ipc_mappings (CUDA IPC handles opened by this build and not yet closed: the deleter of
%% the last tensor over one closes it).
-spec cuda_info() -> #{built := boolean(), runtime := boolean(), devices := non_neg_integer(),
                       libtorch := boolean(), runtime_path := binary() | nil,
                       ipc_mappings := non_neg_integer()}.
cuda_info() -> ?NIF(tensor_blob_nif:cuda_info()).

%% @doc What the CUDA runtime says the memory at Ptr is, without touching it: cpu (ordinary host
%% memory), cuda_host (page-locked host memory), cuda (device memory), cuda_managed (managed
%% memory), or unknown (no runtime, driver or GPU, or the runtime cannot place it).
-spec cuda_memory(non_neg_integer()) -> cpu | cuda_host | cuda | cuda_managed | unknown.
cuda_memory(Ptr) -> ?NIF(tensor_blob_nif:cuda_memory(Ptr)).

%% @doc Waits until the CUDA device has finished its queued work.
-spec cuda_synchronize(non_neg_integer()) -> ok.
cuda_synchronize(Index) -> ?NIF(tensor_blob_nif:cuda_synchronize(Index)).

%% @doc The metadata of a capsule's managed tensor (device, device_type, ptr, shape, strides, dtype,
%% read_only), read without consuming it and without touching the memory: CUDA capsules included,
%% whatever this build can import. device_type is DLPack's (cpu, cuda, cuda_host for kDLCUDAHost,
%% cuda_managed for kDLCUDAManaged); device is where libtorch sees it once imported (cpu for
%% page-locked host memory, {cuda, I} for managed memory).
-spec dlpack_info(capsule()) -> map().
dlpack_info(Capsule) -> ?NIF(tensor_blob_nif:dlpack_info(Capsule)).

%% @doc A plain term that carries T to Node, where node_unpack/1 makes it a tensor again: send it by
%% any means. A tensor is a resource of the OS process that made it; on any other node it is only a
%% dead reference, so it never travels as itself. A region: T's memory as a shared-memory region in
%% PyTorch's format, which both nodes map (only to a node that can open this node's shared memory,
%% same_host/1: the same host, /dev/shm and user): no copy when T was made by
%% tensor_blob_ipc:torch_zeros/2 (or opened from such a region), one copy into a new region
%% otherwise (T is left as it was). A file,
%% for a tensor of a mapped safetensors file (or a view of one) whose pages hold the file's bytes:
%% its name, version and offset, which the receiver maps (refused there when the name holds another
%% version). A binary: T's bytes as one binary, a view of T's memory when it is a contiguous CPU
%% tensor (no copy here; T is frozen while that binary lives on this node), which the distribution
%% carries as it carries any binary. By default the one that costs less end to end: a region to a
%% node that can open it, for a CPU tensor that already is one from 32 KiB, a file for a file's
%% tensor from 128 KiB, for any other CPU tensor a region from 64 MiB; a binary otherwise.
%% same_host/1's answer for Node is remembered until Node's connection goes down. Opts: via =>
%% region | binary | file forces a path; keep: see below.
%%
%% Lifetime: a region's name lives while some tensor over it does. The packed term holds the
%% sender's tensor (its tensor key), and a keeper process of this node holds it too, until the first
%% node_unpack/1 of the term (wherever it runs) or Keep milliseconds, whichever comes first: so the
%% process that packed may end at once (a term returned by erpc:call, or a gen_server reply), and
%% the receiver still finds the region. After the unpack each node holds its own reference, and
%% either may drop first: the last one removes the name. A term unpacked later than Keep after pack,
%% with the sender's tensor gone, finds no region, and says so.
-spec node_pack(tensor(), node()) -> map().
node_pack(T, Node) -> ?SPANS(node_pack, 2, node_pack(T, Node, #{})).

%% @doc node_pack/2, with options: via => region | file (a region; a mapped file's tensor as its
%% file; to a node that can open this node's shared memory) or via => binary forces the path; keep
%% => Milliseconds (default: the node_keep setting, guides/configuration.md) bounds how long this
%% node keeps a region alive for a receiver that has not unpacked it yet.
-spec node_pack(tensor(), node(), #{via => region | binary | file, keep => non_neg_integer()}) -> map().
node_pack(T, Node, Opts) -> ?SPANS(node_pack, 3, tensor_blob_nodes:node_pack(T, Node, Opts)).

%% @doc The tensor a packed term (node_pack/2) carries, on the node it was sent to: a mapping of the
%% same region (it holds its own reference), of the same file (refused, reason gone, when its name
%% holds another version now), or a read-only view of the binary the distribution delivered. That
%% binary lies inside the buffer the message arrived in, where what comes before it in the message
%% puts it: when it is not aligned for the dtype, it is copied once into a new tensor (memory/1 says
%% owned), and the sender is told the pad that lands the next one on this path aligned (a view).
%% With #{copy => true} the result is always a private, writable copy, whichever way the data came
%% (a region is mapped only while it is copied).
-spec node_unpack(map()) -> tensor().
node_unpack(Packed) -> ?SPANS(node_unpack, 1, node_unpack(Packed, #{})).

%% @doc node_unpack/1, with options: copy => true copies the received binary into a writable tensor.
-spec node_unpack(map(), #{copy => boolean()}) -> tensor().
node_unpack(Packed, Opts) -> ?SPANS(node_unpack, 2, tensor_blob_nodes:node_unpack(Packed, Opts)).

%% @doc The node protocol: another node's node_pack/3 tells this one, the sender, the pad that lands
%% its binaries' bytes aligned on Node. Written only when it changes.
-spec node_learn_pad(node(), 0..63) -> ok.
node_learn_pad(Node, Pad) -> tensor_blob_nodes:node_learn_pad(Node, Pad).

%% @doc What makes two nodes share shared memory: this host's boot id and the identity of its
%% /dev/shm (containers on one host have their own). See same_host/1, which also asks for the same
%% user.
-spec host_id() -> {binary(), integer(), integer()}.
host_id() -> tensor_blob_nodes:host_id().

%% @doc The node protocol: what another node's same_host/1 compares with its own, host_id/0 and
%% this VM's effective user (a region is its creator's, mode 0600).
-spec shm_identity() -> {{binary(), integer(), integer()}, integer()}.
shm_identity() -> tensor_blob_nodes:shm_identity().

%% @doc Whether Node can open the shared memory this node makes, which is what node_pack/2 asks
%% before it sends a region: the same host (a boot id both can read), the same /dev/shm, and the
%% same effective user (regions are mode 0600). False for a node that cannot be reached, or when no
%% boot id can be read here.
-spec same_host(node()) -> boolean().
same_host(Node) -> tensor_blob_nodes:same_host(Node).

%% @doc The version of the linked libtorch, such as `<<"2.6.0">>'.
-spec torch_version() -> binary().
torch_version() -> tensor_blob_nif:torch_version().

%% @doc Exports T as a versioned DLPack managed tensor (DLPack 1.3).
-spec to_dlpack(tensor()) -> capsule().
to_dlpack(T) when ?IS_TENSOR_TERM(T) -> ?NIF(tensor_blob_nif:to_dlpack(T, versioned, false, undefined));
to_dlpack(T) -> not_a_tensor(T).

%% @doc Like to_dlpack/1, with options:
%%   max_version: the newest DLPack version the consumer reads, negotiated as Python's __dlpack__
%%     does: {1, _} gives a versioned tensor, {0, _} or legacy a legacy one, and {Major, _} with
%%     Major > 1 raises (this library speaks 1.x only). Absent: versioned.
%%   version: versioned | legacy, said directly.
%%   read_only: true sets the READ_ONLY flag (versioned only; a legacy tensor cannot carry it). A
%%     read-only DLPack import is always exported read-only.
%%   stream: the consumer's CUDA stream, as the array API's __dlpack__(stream=...) takes it: a
%%     cudaStream_t as an integer, 1 for the legacy default stream, 2 for the per-thread default
%%     stream, -1 for no synchronization (0 is refused as ambiguous). The consumer's stream is made
%%     to wait (cudaStreamWaitEvent) for an event recorded on libtorch's current stream of the
%%     tensor's device, so work the consumer queues there sees the data. Absent: the consumer uses
%%     the legacy default stream, which is libtorch's default stream, so nothing is done unless
%%     libtorch's current stream is another one. A CPU tensor takes no stream.
-spec to_dlpack(tensor(), #{max_version => {non_neg_integer(), non_neg_integer()} | legacy,
                            version => dlpack_version(), read_only => boolean(),
                            stream => integer()}) -> capsule().
to_dlpack(T, Opts) -> tensor_blob_dlpack:to_dlpack(T, Opts).

%% @doc A tensor over the memory of a DLPack capsule or managed tensor address. A capsule is
%% consumed, whether the import succeeds or not. An address must be one this library handed out
%% and that no import took yet (see from_dlpack/2 for others); it is read as what it was handed
%% out as (versioned or legacy).
-spec from_dlpack(capsule() | non_neg_integer()) -> tensor().
from_dlpack(Source) -> ?NIF(tensor_blob_nif:from_dlpack(Source, undefined, false, undefined, false)).

%% @doc Like from_dlpack/1, with options:
%%   version: versioned | legacy, how to read an address of another producer (default
%%     versioned). A capsule knows its own, and so does an address this library handed out: a
%%     version that is not what it holds raises badarg, and the address stays for a later import.
%%   read_only: true makes the tensor read-only even without the flag.
%%   unsafe_address: true imports an address of another producer (a foreign NIF, a C library):
%%     nothing can tell a live managed tensor from a freed one, or one already imported, whose
%%     deleter would then run twice. The caller answers for it. Without it, only addresses this
%%     library handed out and still holds are imported, once each.
%%   stream: the producer's CUDA stream, where its last writes to the memory were queued (an
%%     integer, as to_dlpack/2 takes it). A kDLCUDA or kDLCUDAManaged tensor: libtorch's current
%%     stream of the device waits for it (an event recorded there). A kDLCUDAHost tensor (read by
%%     the host): the call waits until the stream's work is done. -1: no synchronization. Absent:
%%     the producer made the data ready for the legacy default stream (the array API's default), and
%%     for host memory finished writing it; nothing is waited for. A kDLCPU tensor takes no stream.
%%     With a stream the import runs on a dirty I/O scheduler.
%%   defer_release: true runs the producer's deleter off the schedulers (Python's takes the GIL).
%% kDLCPU and kDLCUDAHost (page-locked host memory) tensors become CPU tensors; kDLCUDA and
%% kDLCUDAManaged tensors become CUDA tensors of their device (where the linked libtorch has CUDA),
%% after the CUDA runtime confirms what the memory is. The tensor is read-only (write/2 refuses it,
%% and so for its slices) when the managed tensor has the READ_ONLY flag. When an address holds a
%% DLPack tensor this build cannot hold (a CUDA tensor, an unsupported dtype), its deleter is called
%% and the call raises; when it does not look like a DLPack tensor at all, nothing in it is called.
-spec from_dlpack(capsule() | non_neg_integer(),
                  #{version => dlpack_version(), read_only => boolean(), stream => integer(),
                    unsafe_address => boolean(), defer_release => boolean()}) -> tensor().
from_dlpack(Source, Opts) -> tensor_blob_dlpack:from_dlpack(Source, Opts).

%% @doc Disarms a capsule and returns the address of its managed tensor; the caller now owes its
%% deleter one call (from_dlpack/2 of the address does that). A second consume raises.
-spec consume_dlpack(capsule()) -> non_neg_integer().
consume_dlpack(Capsule) -> ?NIF(tensor_blob_nif:consume_dlpack(Capsule)).

%% @doc Whether a capsule holds a versioned or a legacy managed tensor.
-spec dlpack_version(capsule()) -> dlpack_version().
dlpack_version(Capsule) -> ?NIF(tensor_blob_nif:dlpack_version(Capsule)).

%% Errors: built as segments and rendered by tensor_blob_error; an error's error_info names this
%% module, whose format_error/2 the shell calls.

%% @doc erl_error's error_info callback (the shell): the reason {Kind, Message}, whole and once.
-spec format_error(term(), erlang:stacktrace()) -> #{reason => unicode:chardata()}.
format_error(Reason, Stack) -> tensor_blob_error:format_error(Reason, Stack).

%% @doc What an error this library raised carries as data, read from its stacktrace: its reason (a
%% row of tables()'s reasons) and the argument it is about (an atom, or none); none for anyone
%% else's error. Decide on these, never on the message's text: in `catch error:{badarg, _}:Stack',
%% match `#{reason := no_region}' against `tensor_blob:error_reason(Stack)'.
-spec error_reason(erlang:stacktrace()) -> #{reason := atom(), argument := atom()} | none.
error_reason(Stack) -> tensor_blob_error:error_reason(Stack).
