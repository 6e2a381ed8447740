%% @doc Zero-copy tensor exchange: the Erlang API.
%%
%% Tensors are resource references holding one libtorch tensor each. A blob
%% is a map describing memory:
%%
%%   #{ptr, shape, strides, dtype, device, element_size, byte_size,
%%     alignment, owner}
%%
%% to_blob/1 describes a tensor's memory (owner => the tensor); from_blob/1,2
%% views described memory as a tensor, keeping the owner alive until
%% libtorch frees the storage (a view inside one of our tensors shares its
%% storage; any other owner term is pinned). to_dlpack/1,2 and from_dlpack/1,2 exchange tensors
%% as DLPack managed tensors (see the DLPack section below). Bad input
%% raises error({badarg, Message}); failures that are not the caller's raise
%% error({tensor_blob, Message}).
-module(tensor_blob).

-include_lib("kernel/include/file.hrl").

-export([to_blob/1, to_blob/2, from_blob/1, from_blob/2, blob_view/2,
         from_binary/3, from_binary/4, to_binary/1, to_binary/2, zeros/2, write/2,
         narrow/4, transpose/3, to_device/2,
         shape/1, strides/1, dtype/1, device/1, memory/1, pinned/1, describe/1,
         to_dlpack/1, to_dlpack/2, from_dlpack/1, from_dlpack/2,
         consume_dlpack/1, dlpack_version/1,
         stats/0, dtypes/0, nx_type/1, torch_version/0,
         cuda_info/0, cuda_synchronize/1, cuda_memory/1, dlpack_info/1,
         ipc_zeros/2, ipc_export/1, ipc_name/1, ipc_open/3, ipc_reclaim/0,
         ipc_torch_zeros/2, ipc_torch_export/1, ipc_torch_open/3,
         cuda_torch_open/3, cuda_torch_export/1, cuda_torch_pending/1,
         node_pack/2, node_pack/3, node_unpack/1, node_unpack/2, node_learn_pad/2, host_id/0]).

%% For the Erlang shell's and Elixir's rendering of errors (error_info).
-export([format_error/2, error_message/2]).

%% The Elixir facade's to_blob, with no option map to build and match.
-export([to_blob_struct/3, blob_fields/1]).

%% An owner term that from_blob pins: none asks for an unpinned view;
%% undefined and nil (and no owner key) name no owner, which is refused.
%% What to_dlpack accepts as a tensor: the reference, or the Elixir struct
%% (which the C bridge also reads).
-define(IS_TENSOR_TERM(T), (is_reference(T) orelse (is_map(T) andalso is_map_key('__struct__', T) andalso
                                                   map_get('__struct__', T) =:= 'Elixir.TensorBlob.Tensor'))).

-define(PINNABLE(Owner), (Owner =/= none andalso Owner =/= undefined andalso Owner =/= nil)).

%% A NIF call. The NIF raises error({Kind, {message, Segments}})
%% (c_src/beam/tb_raise.h): it never renders a term, for it cannot know who is
%% calling. Here that becomes error({Kind, Message}), rendered the Erlang
%% way, with the segments kept in the stacktrace's error_info, from which
%% the Elixir facade renders the Elixir way (see Errors below). Nothing is
%% done on success.
-define(NIF(Call),
        try Call
        catch error:{Kind__, {message, _} = Cause__}:Stack__ -> nif_error(Kind__, Cause__, Stack__)
        end).

%% A NIF call whose badarg is re-raised as "unknown dtype" (listing the
%% valid ones) when Dtype is not a dtype: the one dtype table, in C, decides.
-define(DTYPE_CHECKED(Dtype, Call),
        try Call
        catch error:{Kind__, {message, _} = Cause__}:Stack__ -> dtype_error(Dtype, Kind__, Cause__, Stack__)
        end).

-export_type([tensor/0, blob/0, spec/0, dtype/0, shape/0, device/0,
              capsule/0, dlpack_version/0]).

%% A DLPack capsule: a resource owning one exported managed tensor.
-type capsule() :: reference().
-type dlpack_version() :: versioned | legacy.

-type tensor() :: reference().
-type shape() :: tuple().
-type device() :: cpu | {cuda, non_neg_integer()}.
-type dtype() :: atom() | {atom(), pos_integer()}.
%% A blob; to_blob/2 with the struct option tags it with '__struct__' (the
%% Elixir facade's %TensorBlob.Blob{}).
-type blob() :: #{ptr := non_neg_integer(), shape := shape(), strides := [non_neg_integer()],
                  dtype := atom(), device := device(), element_size := pos_integer(),
                  byte_size := non_neg_integer(), alignment := pos_integer(), owner := term(),
                  '__struct__' => atom()}.
-type spec() :: #{ptr := non_neg_integer(), shape := shape(), dtype := dtype(),
                  strides => [non_neg_integer()] | undefined | nil,
                  device => device() | undefined | nil, owner => term(), atom() => term()}.

%% @doc The blob describing T's memory; the blob's owner is T.
-spec to_blob(tensor()) -> blob().
to_blob(T) when is_reference(T) ->
    blob(?NIF(tensor_blob_nif:blob_fields(T)), T);
to_blob(T) ->
    not_a_tensor(T).

%% @doc Like to_blob/1. Options: owner (the term the blob names as its
%% owner, by default T), struct (tag the map as that struct; the Elixir
%% facade uses it).
-spec to_blob(tensor(), #{owner => term(), struct => atom()}) -> blob().
to_blob(T, _Opts) when not is_reference(T) ->
    not_a_tensor(T);
to_blob(T, Opts) when is_map(Opts) ->
    check_options(Opts, [owner, struct]),
    Owner = maps:get(owner, Opts, T),
    case maps:get(struct, Opts, undefined) of
        undefined -> blob(?NIF(tensor_blob_nif:blob_fields(T)), Owner);
        Struct when is_atom(Struct) -> to_blob_struct(T, Owner, Struct);
        Struct -> badarg(["struct: expected a module name (an atom), got ", {term, Struct}])
    end;
to_blob(_T, Opts) ->
    badarg(["options: expected a map, got ", {term, Opts}]).

%% @hidden to_blob(T, #{owner => Owner, struct => Struct}) for the Elixir
%% facade, whose every call gives both.
-spec to_blob_struct(tensor(), term(), atom()) -> blob().
to_blob_struct(T, Owner, Struct) when is_reference(T) ->
    %% blob/2's map with '__struct__' in the literal: added afterwards, the
    %% key would merge a new map, the cost the literal avoids.
    {Ptr, Shape, Strides, Dtype, Device, ElementSize, ByteSize, Alignment} = ?NIF(tensor_blob_nif:blob_fields(T)),
    #{'__struct__' => Struct, ptr => Ptr, shape => Shape, strides => Strides, dtype => Dtype, device => Device,
      element_size => ElementSize, byte_size => ByteSize, alignment => Alignment, owner => Owner};
to_blob_struct(T, _Owner, _Struct) ->
    not_a_tensor(T).

%% @hidden The values of T's blob, as a tuple: {Ptr, Shape, Strides, Dtype,
%% Device, ElementSize, ByteSize, Alignment}. For the Elixir facade, which
%% reads a tensor's layout in one call.
-spec blob_fields(tensor()) -> {non_neg_integer(), shape(), [non_neg_integer()], atom(), device(),
                                pos_integer(), non_neg_integer(), pos_integer()}.
blob_fields(T) when is_reference(T) ->
    ?NIF(tensor_blob_nif:blob_fields(T));
blob_fields(T) ->
    not_a_tensor(T).

%% The map of a blob's fields. Built here, with literal keys, it costs a
%% copy of the values; the NIF would have to sort and check its keys.
blob({Ptr, Shape, Strides, Dtype, Device, ElementSize, ByteSize, Alignment}, Owner) ->
    #{ptr => Ptr, shape => Shape, strides => Strides, dtype => Dtype, device => Device,
      element_size => ElementSize, byte_size => ByteSize, alignment => Alignment, owner => Owner}.

%% @doc A tensor over the memory Spec describes, keeping its owner alive:
%% the spec's owner key (a blob from to_blob/1 names its tensor) is kept
%% until the last tensor using this memory is freed. A view inside one of
%% our tensors shares that tensor's storage (memory/1 answers as the tensor
%% does); any other owner term is pinned (memory/1 says pinned). A spec that
%% describes one of our tensors exactly (its blob, unchanged) gives that
%% tensor back.
%%
%% A spec with no owner (absent, undefined or nil) raises badarg: give the
%% term that keeps the memory alive (`#{owner => Term}' in the spec or the
%% options), or ask for an unpinned view explicitly with `owner => none':
%% then nothing is pinned and the caller answers for the memory (memory/1
%% says unpinned).
-spec from_blob(spec()) -> tensor().
from_blob(Spec) ->
    element(1, view(Spec, spec_owner(Spec))).

%% @doc Like from_blob/1, with options: owner (the term to keep alive, in
%% place of the spec's owner; none: keep nothing, the caller answers for the
%% memory).
-spec from_blob(spec(), #{owner => term()}) -> tensor().
from_blob(Spec, Opts) ->
    element(1, blob_view(Spec, Opts)).

%% @doc from_blob/2, returning the tensor together with the owner it keeps,
%% or none for an unpinned view (what the Elixir facade turns into a
%% BlobView or a bare tensor). The owner decision is made here only.
-spec blob_view(spec(), #{owner => term()}) -> {tensor(), Owner :: term()}.
blob_view(Spec, #{owner := Owner} = Opts) when map_size(Opts) =:= 1 ->
    view(Spec, Owner);
blob_view(Spec, Opts) when Opts =:= #{} ->
    view(Spec, spec_owner(Spec));
blob_view(Spec, Opts) when is_map(Opts) ->
    check_options(Opts, [owner]),
    view(Spec, spec_owner(Spec));
blob_view(_Spec, Opts) ->
    badarg(["options: expected a map, got ", {term, Opts}]).

spec_owner(#{owner := Owner}) -> Owner;
spec_owner(_) -> undefined.

%% A blob, or a spec with all its keys: matched here, in one pass over the
%% map, where the NIF would look each key up.
view(#{ptr := Ptr, shape := Shape, dtype := Dtype, strides := Strides, device := Device} = Spec, Owner)
  when ?PINNABLE(Owner) ->
    {?DTYPE_CHECKED({spec, Spec}, tensor_blob_nif:from_blob_fields(Ptr, Shape, Dtype, Strides, Device, Owner, true)),
     Owner};
view(Spec, Owner) when ?PINNABLE(Owner) ->
    {?DTYPE_CHECKED({spec, Spec}, tensor_blob_nif:from_blob(Spec, Owner, true)), Owner};
view(Spec, none) ->
    {?DTYPE_CHECKED({spec, Spec}, tensor_blob_nif:from_blob(Spec, undefined, false)), none};
view(Spec, _NoOwner) when is_map(Spec) ->
    badarg(["owner: the spec names no owner. To pin the term that keeps the memory alive, pass ",
            {code, "owner => Term", "owner: term"},
            "; to ask for an unpinned view, for which the caller answers, pass ",
            {code, "owner => none", "owner: :none"}]);
view(Spec, _NoOwner) ->
    %% Not a map: the NIF says what a spec is.
    {?NIF(tensor_blob_nif:from_blob(Spec, undefined, false)), none}.

%% @doc A new tensor holding a copy of Binary's bytes (row-major).
-spec from_binary(binary(), dtype(), shape()) -> tensor().
from_binary(Binary, Dtype, Shape) ->
    ?DTYPE_CHECKED(Dtype, tensor_blob_nif:from_binary(Binary, Dtype, Shape)).

%% @doc from_binary/3, or with #{copy => false} a read-only tensor over
%% Binary's own bytes: no copy, and the tensor pins the binary. write/2
%% refuses it, and views of it, for a binary is immutable. A binary of 64
%% bytes or less lives on a process heap: the pin holds a copy of it, and
%% the tensor views that copy (read-only all the same). Bytes not aligned to
%% the element size (a part of a larger binary may start anywhere) raise
%% badarg; #{copy => if_needed} views the bytes when they are aligned and
%% copies them (into an owned tensor) when they are not.
-spec from_binary(binary(), dtype(), shape(), #{copy => boolean() | if_needed}) -> tensor().
from_binary(Binary, Dtype, Shape, #{copy := false} = Opts) when map_size(Opts) =:= 1 ->
    ?DTYPE_CHECKED(Dtype, tensor_blob_nif:from_binary_view(Binary, Dtype, Shape, false));
from_binary(Binary, Dtype, Shape, #{copy := if_needed} = Opts) when map_size(Opts) =:= 1 ->
    ?DTYPE_CHECKED(Dtype, tensor_blob_nif:from_binary_view(Binary, Dtype, Shape, true));
from_binary(Binary, Dtype, Shape, Opts) ->
    check_copy_option(Opts),
    from_binary(Binary, Dtype, Shape).

%% @doc A copy of T's elements as row-major bytes, whatever its strides.
-spec to_binary(tensor()) -> binary().
to_binary(T) when is_reference(T) ->
    ?NIF(tensor_blob_nif:to_binary(T));
to_binary(T) ->
    not_a_tensor(T).

%% @doc to_binary/1, or with #{copy => false} a binary over T's own memory:
%% no copy, and the binary keeps the memory alive. T must be a contiguous CPU
%% tensor. While such a binary lives, write/2 refuses to write any tensor
%% whose memory overlaps it (a binary is immutable). Memory written by other
%% means (a DLPack consumer, foreign code) shows through the binary. A
%% tensor viewing a binary's bytes (from_binary/4, copy false) gives that
%% binary back, or the part of it its elements occupy.
%%
%% Memory in a shared-memory region is refused: another program can shrink
%% the region, and a read of the binary would then kill the VM (SIGBUS),
%% unless #{unsafe_shared_memory => true} accepts that risk. With
%% #{copy => if_needed}, a view where one can be made (a contiguous CPU
%% tensor, not in a region unless unsafe_shared_memory), a copy otherwise.
-spec to_binary(tensor(), #{copy => boolean() | if_needed, unsafe_shared_memory => boolean()}) -> binary().
to_binary(T, _Opts) when not is_reference(T) ->
    not_a_tensor(T);
to_binary(T, #{copy := false} = Opts) when map_size(Opts) =:= 1 ->
    ?NIF(tensor_blob_nif:to_binary_view(T, false, false));
to_binary(T, Opts) when is_map(Opts) ->
    check_options(Opts, [copy, unsafe_shared_memory]),
    Unguarded = case maps:get(unsafe_shared_memory, Opts, false) of
                    U when is_boolean(U) -> U;
                    U -> badarg(["unsafe_shared_memory: expected a boolean, got ", {term, U}])
                end,
    case maps:get(copy, Opts, true) of
        true -> to_binary(T);
        false -> ?NIF(tensor_blob_nif:to_binary_view(T, Unguarded, false));
        if_needed ->
            case ?NIF(tensor_blob_nif:to_binary_view(T, Unguarded, true)) of
                false -> to_binary(T);
                Binary -> Binary
            end;
        Other -> badarg(["copy: expected a boolean or ", {term, if_needed}, ", got ", {term, Other}])
    end;
to_binary(_T, Opts) ->
    badarg(["options: expected a map, got ", {term, Opts}]).

check_copy_option(Opts) when is_map(Opts) ->
    check_options(Opts, [copy]),
    case maps:get(copy, Opts, true) of
        true -> ok;
        Other -> badarg(["copy: expected a boolean or ", {term, if_needed}, ", got ", {term, Other}])
    end;
check_copy_option(Opts) ->
    badarg(["options: expected a map, got ", {term, Opts}]).

-spec zeros(shape(), dtype()) -> tensor().
zeros(Shape, Dtype) ->
    ?DTYPE_CHECKED(Dtype, tensor_blob_nif:zeros(Shape, Dtype)).

%% @doc Overwrites T's elements in place with Binary (row-major order), so
%% every view of the same memory sees the new values. Returns T.
-spec write(tensor(), binary()) -> tensor().
write(T, Binary) when is_reference(T) ->
    ?NIF(tensor_blob_nif:write(T, Binary));
write(T, _Binary) ->
    not_a_tensor(T).

%% @doc A copy of T on Device (cpu or {cuda, Index}): the explicit copy
%% between the host and a GPU. Always a new tensor, even on the same device.
-spec to_device(tensor(), device()) -> tensor().
to_device(T, Device) when is_reference(T) -> ?NIF(tensor_blob_nif:to_device(T, Device));
to_device(T, _Device) -> not_a_tensor(T).

%% @doc A view of Length elements of dimension Dim from Start; shares memory.
-spec narrow(tensor(), non_neg_integer(), non_neg_integer(), non_neg_integer()) -> tensor().
narrow(T, Dim, Start, Length) when is_reference(T) ->
    ?NIF(tensor_blob_nif:narrow(T, Dim, Start, Length));
narrow(T, _Dim, _Start, _Length) ->
    not_a_tensor(T).

%% @doc A view with dimensions Dim0 and Dim1 swapped; shares memory.
-spec transpose(tensor(), non_neg_integer(), non_neg_integer()) -> tensor().
transpose(T, Dim0, Dim1) when is_reference(T) ->
    ?NIF(tensor_blob_nif:transpose(T, Dim0, Dim1));
transpose(T, _Dim0, _Dim1) ->
    not_a_tensor(T).

-spec shape(tensor()) -> shape().
shape(T) when is_reference(T) -> ?NIF(tensor_blob_nif:shape(T));
shape(T) -> not_a_tensor(T).

%% @doc Element strides.
-spec strides(tensor()) -> [non_neg_integer()].
strides(T) when is_reference(T) -> ?NIF(tensor_blob_nif:strides(T));
strides(T) -> not_a_tensor(T).

-spec dtype(tensor()) -> atom().
dtype(T) when is_reference(T) -> ?NIF(tensor_blob_nif:dtype(T));
dtype(T) -> not_a_tensor(T).

-spec device(tensor()) -> device().
device(T) when is_reference(T) -> ?NIF(tensor_blob_nif:device(T));
device(T) -> not_a_tensor(T).

%% @doc What T's memory is, and who keeps it alive: owned (libtorch allocated
%% it), pinned (a view that keeps an owner term alive; a view inside one of
%% our tensors shares its storage and answers as it does), unpinned (a
%% view the caller answers for), dlpack (a DLPack import: the producer's
%% memory, released through its deleter), binary (a view of a binary's
%% bytes), ipc (a mapping of a shared-memory region, or of
%% a CUDA IPC handle). Slices and transposes
%% answer as the tensor they view.
-spec memory(tensor()) -> owned | pinned | unpinned | dlpack | binary | ipc.
memory(T) when is_reference(T) -> ?NIF(tensor_blob_nif:memory(T));
memory(T) -> not_a_tensor(T).

%% @doc true when T views memory whose owner it keeps alive: a pinned owner,
%% a DLPack producer, or a binary.
-spec pinned(tensor()) -> boolean().
pinned(T) -> lists:member(memory(T), [pinned, dlpack, binary]).

%% @doc What T is, for the shell, where a tensor prints as a bare reference:
%% its dtype, shape, device and memory kind (see memory/1). For example
%% `tensor_blob:describe(tensor_blob:zeros({2, 3}, float32))' gives
%% `#{device => cpu, dtype => float32, memory => owned, shape => {2,3}}'.
-spec describe(tensor()) -> #{dtype := atom(), shape := shape(), device := device(),
                              memory := owned | pinned | unpinned | dlpack | binary | ipc}.
describe(T) when is_reference(T) ->
    #{dtype => dtype(T), shape => shape(T), device => device(T), memory => memory(T)};
describe(T) ->
    not_a_tensor(T).

%% @doc Live tensors, live pins, live DLPack exports (capsules: exported
%% managed tensors whose deleter has not run yet, consumed or not) and live
%% binaries from to_binary(T, #{copy => false}), for leak checks.
-spec stats() -> #{tensors := non_neg_integer(), pins := non_neg_integer(),
                   capsules := non_neg_integer(), binaries := non_neg_integer()}.
stats() -> tensor_blob_nif:stats().

%% @doc The canonical dtypes the linked libtorch can hold.
-spec dtypes() -> [atom()].
dtypes() -> tensor_blob_nif:dtypes().

%% @doc The Nx type {Kind, Bits} of a dtype (from the one dtype table), or
%% nil when Nx has none (bool, complex32).
-spec nx_type(dtype()) -> {atom(), pos_integer()} | nil.
nx_type(Dtype) -> ?DTYPE_CHECKED(Dtype, tensor_blob_nif:nx_type(Dtype)).


%% @doc What this build knows of CUDA: built (compiled with TB_CUDA=1),
%% runtime (libcudart was found at load), runtime_path (its file), devices
%% (GPUs the runtime sees), libtorch (the linked libtorch has CUDA),
%% ipc_mappings (CUDA IPC handles opened by this build and not yet closed:
%% the deleter of the last tensor over one closes it).
-spec cuda_info() -> #{built := boolean(), runtime := boolean(), devices := non_neg_integer(),
                       libtorch := boolean(), runtime_path := binary() | nil,
                       ipc_mappings := non_neg_integer()}.
cuda_info() -> ?NIF(tensor_blob_nif:cuda_info()).

%% @doc What the CUDA runtime says the memory at Ptr is, without touching
%% it: cpu (ordinary host memory), cuda_host (page-locked host memory), cuda
%% (device memory), cuda_managed (managed memory), or unknown (no runtime,
%% driver or GPU, or the runtime cannot place it).
-spec cuda_memory(non_neg_integer()) -> cpu | cuda_host | cuda | cuda_managed | unknown.
cuda_memory(Ptr) -> ?NIF(tensor_blob_nif:cuda_memory(Ptr)).

%% @doc Waits until the CUDA device has finished its queued work.
-spec cuda_synchronize(non_neg_integer()) -> ok.
cuda_synchronize(Index) -> ?NIF(tensor_blob_nif:cuda_synchronize(Index)).

%% @doc The metadata of a capsule's managed tensor (device, device_type, ptr,
%% shape, strides, dtype, read_only), read without consuming it and without
%% touching the memory: CUDA capsules included, whatever this build can
%% import. device_type is DLPack's (cpu, cuda, cuda_host for kDLCUDAHost,
%% cuda_managed for kDLCUDAManaged); device is where libtorch sees it once
%% imported (cpu for page-locked host memory, {cuda, I} for managed memory).
-spec dlpack_info(capsule()) -> map().
dlpack_info(Capsule) -> ?NIF(tensor_blob_nif:dlpack_info(Capsule)).

%% @doc A tensor of zeros in a new POSIX shared-memory region (created with
%% owner-only permissions), which ipc_export/1 shares without a copy.
-spec ipc_zeros(shape(), dtype()) -> tensor().
ipc_zeros(Shape, Dtype) -> ?DTYPE_CHECKED(Dtype, tensor_blob_nif:ipc_zeros(Shape, Dtype)).

%% @doc Removes the shared-memory names of creators that are gone; returns
%% how many. A creator is judged alive by a lock it holds on a file in the
%% same /dev/shm, never by its pid. A reaper process removes a dead VM's
%% names within moments; this covers what it could not (a VM that was its
%% PID namespace's init takes its reaper with it). Done at load too.
-spec ipc_reclaim() -> non_neg_integer().
ipc_reclaim() -> ?NIF(tensor_blob_nif:ipc_reclaim()).

%% @doc A handle another OS process opens with ipc_open/3. The keys follow
%% Nx's %Nx.Pointer{kind: ipc}.
%%
%% A CPU tensor: handle is the name of a POSIX shared-memory region and
%% address is undefined. A tensor made by ipc_zeros/2 or ipc_open/3 (whole,
%% contiguous) is shared as it is; any other CPU tensor is copied once into
%% a new region. The name lives while the handle's tensor is reachable here:
%% open it elsewhere before dropping the handle (an open mapping stays valid
%% after that).
%%
%% A CUDA tensor: handle is the cudaIpcMemHandle_t of its allocation (64
%% bytes when the tensor starts at the allocation's base, as Torchx's
%% handles do; otherwise 72: the handle, then the tensor's byte offset in
%% the allocation, unsigned 64-bit little-endian), and address is the
%% device index. No copy, unless the tensor is not contiguous (then a
%% contiguous copy on the device is shared: the handle's tensor). The work
%% libtorch queued on the memory is finished first. Keep the handle's
%% tensor reachable here until every opener has dropped its tensors: the
%% memory returns to libtorch's allocator when it is freed here, and an
%% opener would then read whatever is put there next. A handle opens only
%% in another OS process.
-spec ipc_export(tensor()) -> #{kind := ipc, handle := binary(), address := undefined | non_neg_integer(),
                                data_size := non_neg_integer(), tensor := tensor()}.
ipc_export(T) when not is_reference(T) ->
    not_a_tensor(T);
ipc_export(T) ->
    case device(T) of
        cpu -> ipc_export_region(T);
        {cuda, _} -> ipc_export_cuda(T)
    end.

ipc_export_cuda(T) ->
    {Handle, Device, Size, Shared} = ?NIF(tensor_blob_nif:cuda_ipc_export(T)),
    #{kind => ipc, handle => Handle, address => Device, data_size => Size, tensor => Shared}.

ipc_export_region(T) ->
    Shared = case ipc_name(T) of
                 nil ->
                     S = ipc_zeros(shape(T), dtype(T)),
                     _ = write(S, to_binary(T)),
                     S;
                 _ ->
                     T
             end,
    {Name, Size} = ipc_name(Shared),
    #{kind => ipc, handle => Name, address => undefined, data_size => Size, tensor => Shared}.

%% @doc {Name, ByteSize} when T is a whole region (made by ipc_zeros/2 or
%% ipc_open/3, contiguous, from its start): what ipc_export/1 shares without
%% a copy. nil otherwise. Nothing is created or copied.
-spec ipc_name(tensor()) -> {binary(), non_neg_integer()} | nil.
ipc_name(T) -> ?NIF(tensor_blob_nif:ipc_name(T)).

%% @doc A tensor over the memory a handle names (a handle map, an Nx pointer
%% map with kind ipc, or a region's name), in another OS process (a CPU
%% region opens in this one too). Writes are seen by every process that
%% mapped it.
%%
%% With an integer address, the handle is a CUDA IPC handle of that device
%% (see ipc_export/1): the tensor is a CUDA tensor over the exporter's
%% device memory, from the handle's offset, which must hold Shape of Dtype.
%% Its memory is ipc (memory/1); the last tensor over it closes the mapping
%% (cudaIpcCloseMemHandle, once). A build or machine without CUDA (TB_CUDA=0,
%% a libtorch without CUDA, no runtime or GPU) raises a tensor_blob error
%% saying which; a CUDA handle is never read as a region's name.
-spec ipc_open(map() | binary(), dtype(), shape()) -> tensor().
ipc_open(#{kind := ipc, address := Device} = Handle, Dtype, Shape) when is_integer(Device) ->
    ?DTYPE_CHECKED(Dtype, tensor_blob_nif:cuda_ipc_open(maps:get(handle, Handle, undefined), Device, Dtype, Shape));
ipc_open(#{kind := ipc, handle := Name}, Dtype, Shape) ->
    ipc_open(Name, Dtype, Shape);
ipc_open(#{} = Handle, _Dtype, _Shape) ->
    badarg(["handle: expected an IPC handle (kind ipc, handle), got ", {term, Handle}]);
ipc_open(<<"/torch_", _/binary>> = Name, Dtype, Shape) ->
    ipc_torch_open(Name, Dtype, Shape);
ipc_open(<<"torch_", _/binary>> = Name, Dtype, Shape) ->
    ipc_torch_open(Name, Dtype, Shape);
ipc_open(Name, Dtype, Shape) ->
    ?DTYPE_CHECKED(Dtype, tensor_blob_nif:ipc_open(Name, Dtype, Shape)).

%% @doc A tensor of zeros in a new region of PyTorch's CPU sharing format
%% (the file_system strategy: a 64-byte header holding a reference count,
%% then the data), named "/torch_tensor_blob.PID.N.SALT" and created
%% with owner-only permissions. This tensor holds one reference.
-spec ipc_torch_zeros(shape(), dtype()) -> tensor().
ipc_torch_zeros(Shape, Dtype) -> ?DTYPE_CHECKED(Dtype, tensor_blob_nif:torch_shm_zeros(Shape, Dtype)).

%% @doc A handle a PyTorch process opens with
%% torch.UntypedStorage._new_shared_filename_cpu(b"", Handle, DataSize) (what
%% torch.multiprocessing's rebuild_storage_filename calls), and another VM
%% with ipc_open/3. A tensor made by ipc_torch_zeros/2 or by ipc_open/3 of a
%% PyTorch region (whole, contiguous) is shared as it is; any other CPU
%% tensor is copied once into a new region. The handle's tensor holds one
%% reference in the region's header until it is freed; each opener holds its
%% own, and whoever drops the last one removes the name, in any order.
-spec ipc_torch_export(tensor()) -> #{kind := ipc, handle := binary(), address := undefined,
                                      data_size := non_neg_integer(), tensor := tensor()}.
ipc_torch_export(T) when not is_reference(T) ->
    not_a_tensor(T);
ipc_torch_export(T) ->
    Shared = case torch_shm_name(T) of
                 nil ->
                     S = ipc_torch_zeros(shape(T), dtype(T)),
                     _ = write(S, node_binary(T)),
                     S;
                 _ ->
                     T
             end,
    {Name, Size} = torch_shm_name(Shared),
    #{kind => ipc, handle => Name, address => undefined, data_size => Size, tensor => Shared}.

torch_shm_name(T) -> ?NIF(tensor_blob_nif:torch_shm_name(T)).

%% @doc A tensor over the data of a region in PyTorch's CPU sharing format,
%% as PyTorch's own openers map it: the data after the 64-byte header, and
%% one reference taken in the header until the last tensor over the mapping
%% (slices included) is freed; the holder that drops the count to zero
%% removes the name, as PyTorch does. PyTorch's regions are named
%% "/torch_PID_N_K" (the second element of what
%% storage._share_filename_cpu_() returns); ipc_open/3 opens every name that
%% starts with torch_ this way. A region whose count is already zero (its
%% last user is removing it) is refused.
-spec ipc_torch_open(binary(), dtype(), shape()) -> tensor().
ipc_torch_open(Name, Dtype, Shape) ->
    ?DTYPE_CHECKED(Dtype, tensor_blob_nif:torch_shm_open(Name, Dtype, Shape)).

%% @doc A CUDA tensor over a storage PyTorch shared with
%% torch.multiprocessing: Share holds the eight fields of
%% storage._share_cuda_(), by name (device, handle, storage_size_bytes,
%% storage_offset_bytes, ref_counter_handle, ref_counter_offset,
%% event_handle, event_sync_required; the handle's bytes are 64, or 66 in
%% PyTorch 2.4 and later), and Dtype and Shape say what the storage's bytes
%% are, from its start (a tensor at a storage offset is a narrow/4 of it).
%%
%% As PyTorch's own receivers do: when event_sync_required, libtorch's
%% current stream of the device waits on the producer's event first; the
%% caching allocator's block is mapped (cudaIpcOpenMemHandle) and the
%% tensor starts storage_offset_bytes into it. The producer counted this
%% receiver in the counter file when it shared (the counter is 1): opening
%% takes no count, checks that one is there (a share opens once), and holds
%% the file mapped; when the last tensor over the storage is freed, the
%% work queued on it is waited for, the block unmapped and the counter
%% dropped by one (never below zero), so that the producer may free it.
%% A build or machine without CUDA raises a tensor_blob error saying which,
%% after the fields are checked.
-spec cuda_torch_open(map(), dtype(), shape()) -> tensor().
cuda_torch_open(#{device := Device, handle := Handle, storage_size_bytes := Size,
                  storage_offset_bytes := Offset, ref_counter_handle := Counter,
                  ref_counter_offset := Slot, event_handle := Event,
                  event_sync_required := Sync}, Dtype, Shape) ->
    ?DTYPE_CHECKED(Dtype, tensor_blob_nif:cuda_torch_open(Device, Handle, Size, Offset, Counter, Slot,
                                                          Event, Sync, Dtype, Shape));
cuda_torch_open(Share, _Dtype, _Shape) ->
    badarg(["share: expected the fields of storage._share_cuda_() as a map (device, handle, "
            "storage_size_bytes, storage_offset_bytes, ref_counter_handle, ref_counter_offset, "
            "event_handle, event_sync_required), got ", {term, Share}]).

%% @doc T, a CUDA tensor, in PyTorch's CUDA sharing format: the eight fields
%% that torch.UntypedStorage._new_shared_cuda(device, handle,
%% storage_size_bytes, storage_offset_bytes, ref_counter_handle,
%% ref_counter_offset, event_handle, event_sync_required) takes (what
%% torch.multiprocessing.reductions.rebuild_cuda_tensor calls), and tensor
%% and counter, which this process keeps.
%%
%% handle is the 64-byte cudaIpcMemHandle_t of T's allocation (every
%% PyTorch reads that form) and storage_offset_bytes T's offset in it;
%% storage_size_bytes covers T's elements, row-major (a contiguous copy on
%% the device is shared when T is not contiguous: tensor). The work
%% libtorch queued on the memory is finished before this returns, so
%% event_sync_required is false (PyTorch's own fallback when it runs out of
%% events) and event_handle zeros. The counter file is a region of
%% PyTorch's file_system format whose first counter is 1, the receiver's;
%% the receiver drops it to 0 when it frees its storage. Keep tensor and
%% counter reachable until cuda_torch_pending/1 says 0: the memory returns
%% to libtorch's allocator when tensor is freed here. The file is removed
%% when the last of counter and the receiver's mapping lets it go.
-spec cuda_torch_export(tensor()) -> #{device := non_neg_integer(), handle := binary(),
                                       storage_size_bytes := non_neg_integer(),
                                       storage_offset_bytes := non_neg_integer(),
                                       ref_counter_handle := binary(), ref_counter_offset := 0,
                                       event_handle := binary(), event_sync_required := false,
                                       tensor := tensor(), counter := tensor()}.
cuda_torch_export(T) when not is_reference(T) ->
    not_a_tensor(T);
cuda_torch_export(T) ->
    {Handle, Device, Size, Shared} = ?NIF(tensor_blob_nif:cuda_ipc_export(T)),
    {Raw, Offset} = case Handle of
                        <<R:64/binary>> -> {R, 0};
                        <<R:64/binary, O:64/little-unsigned>> -> {R, O}
                    end,
    Counter = cuda_torch_counter(),
    {Name, _} = torch_shm_name(Counter),
    #{device => Device, handle => Raw, storage_size_bytes => Size, storage_offset_bytes => Offset,
      ref_counter_handle => Name, ref_counter_offset => 0, event_handle => <<0:512>>,
      event_sync_required => false, tensor => Shared, counter => Counter}.

%% A counter file as PyTorch's producers make one (CUDA_IPC_REF_COUNTER_FILE_SIZE
%% int64 counters after the header), its first counter the receiver's 1.
cuda_torch_counter() ->
    Slots = 10000,
    Counter = ipc_torch_zeros({Slots}, int64),
    _ = write(Counter, <<1:64/native-signed, 0:((Slots - 1) * 64)>>),
    Counter.

%% @doc How many receivers of an export of cuda_torch_export/1 still hold
%% it: 1 until the receiver frees its storage, then 0.
-spec cuda_torch_pending(#{counter := tensor(), ref_counter_offset := non_neg_integer()}) -> integer().
cuda_torch_pending(#{counter := Counter, ref_counter_offset := Slot}) ->
    <<_:Slot/binary-unit:64, N:64/native-signed, _/binary>> = to_binary(Counter),
    N.

%% @doc A plain term that carries T to Node, where node_unpack/1 makes it
%% a tensor again: send it by any means (a message, erpc). A tensor is a
%% resource of the OS process that made it; on any other node it is only a
%% dead reference, so it never travels as itself.
%%
%% When Node runs on this host (it sees the same /dev/shm: host_id/0), T's
%% memory travels as a shared-memory region in PyTorch's format, which both
%% nodes map: no copy when T was made by ipc_torch_zeros/2 (or opened from
%% such a region), one copy into a new region otherwise. Elsewhere, T's
%% bytes travel as one binary: a view of T's memory when it is a contiguous
%% CPU tensor (no copy here), and the distribution carries it as it carries
%% any binary. Opts: #{via => region | binary} forces a path (region only
%% for a node on this host).
%%
%% Lifetime: the packed term holds the sender's tensor. Keep it (or T) on
%% this node until Node has unpacked it; from then on each node holds its
%% own reference to the region, and either may drop first: the last one
%% removes the name.
-spec node_pack(tensor(), node()) -> map().
node_pack(T, Node) -> node_pack(T, Node, #{}).

-spec node_pack(tensor(), node(), #{via => region | binary}) -> map().
node_pack(T, _Node, _Opts) when not is_reference(T) ->
    not_a_tensor(T);
node_pack(T, Node, Opts) when is_atom(Node), is_map(Opts) ->
    Via = case Opts of
              #{via := V} when V =:= region; V =:= binary -> V;
              #{via := V} -> badarg(["options: via must be region or binary, got ", {term, V}]);
              #{} -> default_via(T, Node)
          end,
    Base = #{'__tensor_blob_node__' => 1, dtype => dtype(T), shape => shape(T)},
    case Via of
        region ->
            case {same_host(Node), device(T)} of
                {false, _} -> badarg(["options: via region needs a node on this host; ", {term, Node}, " is not"]);
                {true, cpu} -> ok;
                {true, Device} -> badarg(["tensor: via region shares CPU memory; this tensor is on ", {term, Device}])
            end,
            #{handle := Name, tensor := Shared} = ipc_torch_export(T),
            Base#{via => region, handle => Name, tensor => Shared};
        binary ->
            %% The pad goes before the bytes in the message (a tuple keeps
            %% its order): see node_learn_pad/2.
            Pad = persistent_term:get({?MODULE, node_pad, Node}, 0),
            Base#{via => binary, binary => {binary:copy(<<0>>, Pad), node_binary(T)}, from => node()}
    end;
node_pack(_T, Node, Opts) ->
    badarg(["node: expected a node name (an atom) and an option map, got ", {term, Node}, " and ", {term, Opts}]).

default_via(T, Node) ->
    case device(T) =:= cpu andalso same_host(Node) of
        true -> region;
        false -> binary
    end.

%% T's bytes: a view when T is a contiguous CPU tensor, else a copy.
node_binary(T) ->
    try
        to_binary(T, #{copy => false})
    catch
        error:{badarg, _} -> to_binary(T) %% not contiguous, or not on the CPU: one copy
    end.

%% @doc The tensor a packed term (node_pack/2) carries, on the node it was
%% sent to: a mapping of the same region (it holds its own reference), or
%% a read-only view of the binary the distribution delivered. That binary
%% lies inside the buffer the message arrived in, where what comes before it
%% in the message puts it: when it is not aligned for the dtype, it is
%% copied once into a new tensor (memory/1 says owned), and the sender is
%% told the pad that lands the next one on this path aligned (a view). With
%% #{copy => true} it is always copied, into a writable tensor.
-spec node_unpack(map()) -> tensor().
node_unpack(Packed) -> node_unpack(Packed, #{}).

-spec node_unpack(map(), #{copy => boolean()}) -> tensor().
node_unpack(#{'__tensor_blob_node__' := 1, via := region, handle := Name, dtype := Dtype, shape := Shape}, _Opts) ->
    ipc_torch_open(Name, Dtype, Shape);
node_unpack(#{'__tensor_blob_node__' := 1, via := binary, binary := {Pad, Bin}, dtype := Dtype, shape := Shape} = P,
            Opts) when is_binary(Pad), is_binary(Bin) ->
    case Opts of
        #{copy := true} ->
            from_binary(Bin, Dtype, Shape);
        _ ->
            T = from_binary(Bin, Dtype, Shape, #{copy => if_needed}),
            ok = case memory(T) of
                     owned -> node_misaligned(P, byte_size(Pad), Bin);
                     _ -> ok
                 end,
            T
    end;
node_unpack(Other, _Opts) ->
    badarg(["packed: expected what ", {code, "tensor_blob:node_pack/2", "TensorBlob.Nodes.pack/2"}, " made, got ",
            {term, Other}]).

%% Where the distribution puts a binary's bytes in the buffer a message
%% arrives in depends on what the message holds before them (its header,
%% the control message, the terms ahead), which stays the same from one
%% message to the next on one path (erpc, a send), but is not known to the
%% sender. So node_pack/3 puts a pad before the bytes, and a receiver that
%% had to copy them tells the sender the pad that would have landed them on
%% a multiple of ?NODE_ALIGN: from the next message on that path, the
%% receiver's tensor views them. Only for bytes that make up most of the
%% message (the distribution copies a small binary into its own buffer).
-define(NODE_ALIGN, 64).
-define(NODE_LEARN_BYTES, 1048576).

node_misaligned(#{from := From}, PadBytes, Bin) when is_atom(From), From =/= node(),
                                                      byte_size(Bin) >= ?NODE_LEARN_BYTES ->
    #{ptr := Ptr} = to_blob(from_binary(Bin, uint8, {byte_size(Bin)}, #{copy => false})),
    Pad = (PadBytes + ?NODE_ALIGN - Ptr rem ?NODE_ALIGN) rem ?NODE_ALIGN,
    erpc:cast(From, ?MODULE, node_learn_pad, [node(), Pad]);
node_misaligned(_, _, _) ->
    ok.

%% @private On the sender: the pad that lands the bytes of node_pack/3's
%% binary aligned on Node. Written only when it changes.
-spec node_learn_pad(node(), 0..63) -> ok.
node_learn_pad(Node, Pad) when is_atom(Node), is_integer(Pad), Pad >= 0, Pad < ?NODE_ALIGN ->
    Key = {?MODULE, node_pad, Node},
    case persistent_term:get(Key, 0) of
        Pad -> ok;
        _ -> persistent_term:put(Key, Pad)
    end.

%% @doc What makes two nodes share shared memory: this host's boot id and
%% the identity of its /dev/shm (containers on one host have their own).
-spec host_id() -> {binary(), integer(), integer()}.
host_id() ->
    Boot = case file:read_file("/proc/sys/kernel/random/boot_id") of
               {ok, B} -> string:trim(B);
               {error, _} -> <<>>
           end,
    case file:read_file_info("/dev/shm", [raw]) of
        {ok, #file_info{major_device = Dev, inode = Ino}} -> {Boot, Dev, Ino};
        {error, _} -> {Boot, 0, 0}
    end.

same_host(Node) when Node =:= node() ->
    true;
same_host(Node) ->
    Local = host_id(),
    case Local of
        {<<>>, _, _} -> false;
        _ -> try erpc:call(Node, tensor_blob, host_id, []) =:= Local catch _:_ -> false end
    end.

-spec torch_version() -> binary().
torch_version() -> tensor_blob_nif:torch_version().

%%--------------------------------------------------------------------
%% DLPack
%%
%% to_dlpack/1,2 returns a capsule: a resource that owns one
%% DLManagedTensorVersioned (or, with version => legacy, a DLManagedTensor)
%% holding a strong libtorch reference to T. The capsule calls the managed
%% tensor's deleter when it is garbage-collected, unless it was consumed:
%% consume_dlpack/1 disarms it and returns the address for a consumer, which
%% then owes the deleter one call. from_dlpack/1,2 imports a capsule
%% (consuming it) or an address; the producer's deleter runs exactly once,
%% when libtorch frees the imported storage. An address is trusted: a forged
%% or freed one cannot be detected.
%%--------------------------------------------------------------------

%% @doc Exports T as a versioned DLPack managed tensor (DLPack 1.3).
-spec to_dlpack(tensor()) -> capsule().
to_dlpack(T) when ?IS_TENSOR_TERM(T) ->
    ?NIF(tensor_blob_nif:to_dlpack(T, versioned, false, undefined));
to_dlpack(T) ->
    not_a_tensor(T).

%% @doc Like to_dlpack/1, with options:
%%   max_version: the newest DLPack version the consumer reads, negotiated
%%     as Python's __dlpack__ does: {1, _} gives a versioned tensor, {0, _}
%%     or legacy a legacy one, and {Major, _} with Major > 1 raises (this
%%     library speaks 1.x only). Absent: versioned.
%%   version: versioned | legacy, said directly.
%%   read_only: true sets the READ_ONLY flag (versioned only; a legacy
%%     tensor cannot carry it). A read-only DLPack import is always
%%     exported read-only.
%%   stream: the consumer's CUDA stream, as the array API's
%%     __dlpack__(stream=...) takes it: a cudaStream_t as an integer, 1 for
%%     the legacy default stream, 2 for the per-thread default stream, -1
%%     for no synchronization (0 is refused as ambiguous). The consumer's
%%     stream is made to wait (cudaStreamWaitEvent) for an event recorded on
%%     libtorch's current stream of the tensor's device, so work the
%%     consumer queues there sees the data. Absent: the consumer uses the
%%     legacy default stream, which is libtorch's default stream, so
%%     nothing is done unless libtorch's current stream is another one. A
%%     CPU tensor takes no stream.
-spec to_dlpack(tensor(), #{max_version => {non_neg_integer(), non_neg_integer()} | legacy,
                            version => dlpack_version(), read_only => boolean(),
                            stream => integer()}) -> capsule().
to_dlpack(T, _Opts) when not ?IS_TENSOR_TERM(T) ->
    not_a_tensor(T);
to_dlpack(T, Opts) when is_map(Opts) ->
    check_options(Opts, [max_version, version, read_only, stream]),
    Version = export_version(maps:get(version, Opts, undefined),
                             negotiate(maps:get(max_version, Opts, undefined))),
    ?NIF(tensor_blob_nif:to_dlpack(T, Version, boolean_option(read_only, Opts), stream_option(Opts)));
to_dlpack(_T, Opts) ->
    badarg(["options: expected a map, got ", {term, Opts}]).

%% @doc A tensor over the memory of a DLPack capsule or managed tensor
%% address. A capsule is consumed, whether the import succeeds or not.
%% An address is read as a DLManagedTensorVersioned.
-spec from_dlpack(capsule() | non_neg_integer()) -> tensor().
from_dlpack(Source) ->
    ?NIF(tensor_blob_nif:from_dlpack(Source, undefined, false, undefined)).

%% @doc Like from_dlpack/1, with options:
%%   version: versioned | legacy, how to read an address (a capsule knows).
%%   read_only: true makes the tensor read-only even without the flag.
%%   stream: the producer's CUDA stream, where its last writes to the
%%     memory were queued (an integer, as to_dlpack/2 takes it). A kDLCUDA
%%     or kDLCUDAManaged tensor: libtorch's current stream of the device
%%     waits for it (an event recorded there). A kDLCUDAHost tensor (read
%%     by the host): the call waits until the stream's work is done. -1:
%%     no synchronization. Absent: the producer made the data ready for the
%%     legacy default stream (the array API's default), and for host memory
%%     finished writing it; nothing is waited for. A kDLCPU tensor takes no
%%     stream. With a stream the import runs on a dirty I/O scheduler.
%% kDLCPU and kDLCUDAHost (page-locked host memory) tensors become CPU tensors;
%% kDLCUDA and kDLCUDAManaged tensors become CUDA tensors of their device
%% (where the linked libtorch has CUDA), after the CUDA runtime confirms
%% what the memory is.
%% The tensor is read-only (write/2 refuses it, and so for its slices) when
%% the managed tensor has the READ_ONLY flag. When an address holds a
%% DLPack tensor this build cannot hold (a CUDA tensor, an unsupported
%% dtype), its deleter is called and the call raises; when it does not look
%% like a DLPack tensor at all, nothing in it is called.
-spec from_dlpack(capsule() | non_neg_integer(),
                  #{version => dlpack_version(), read_only => boolean()}) -> tensor().
from_dlpack(Source, Opts) when is_map(Opts) ->
    check_options(Opts, [version, read_only, stream]),
    Version = case maps:get(version, Opts, undefined) of
                  V when V =:= versioned; V =:= legacy; V =:= undefined -> V;
                  Other -> badarg(["version: expected versioned or legacy, got ", {term, Other}])
              end,
    ?NIF(tensor_blob_nif:from_dlpack(Source, Version, boolean_option(read_only, Opts), stream_option(Opts)));
from_dlpack(_Source, Opts) ->
    badarg(["options: expected a map, got ", {term, Opts}]).

%% @doc Disarms a capsule and returns the address of its managed tensor;
%% the caller now owes its deleter one call (from_dlpack/2 of the address
%% does that). A second consume raises.
-spec consume_dlpack(capsule()) -> non_neg_integer().
consume_dlpack(Capsule) ->
    ?NIF(tensor_blob_nif:consume_dlpack(Capsule)).

%% @doc Whether a capsule holds a versioned or a legacy managed tensor.
-spec dlpack_version(capsule()) -> dlpack_version().
dlpack_version(Capsule) ->
    ?NIF(tensor_blob_nif:dlpack_version(Capsule)).

%% What a consumer's max_version allows.
negotiate(undefined) -> undefined;
negotiate(nil) -> undefined;
negotiate(legacy) -> legacy;
negotiate({0, Minor}) when is_integer(Minor), Minor >= 0 -> legacy;
negotiate({1, Minor}) when is_integer(Minor), Minor >= 0 -> versioned;
negotiate({Major, Minor} = V) when is_integer(Major), Major > 1, is_integer(Minor), Minor >= 0 ->
    raise(tensor_blob, ["max_version: ", {term, V}, ": this library exports DLPack 1.3 and legacy tensors only; "
                        "a consumer of major version ", integer_to_binary(Major), " cannot be given either"]);
negotiate(Other) ->
    badarg(["max_version: expected {Major, Minor} (non-negative integers) or legacy, got ", {term, Other}]).

export_version(undefined, undefined) -> versioned;
export_version(undefined, Negotiated) -> Negotiated;
export_version(V, undefined) when V =:= versioned; V =:= legacy -> V;
export_version(V, V) -> V;
export_version(V, Negotiated) when V =:= versioned; V =:= legacy ->
    badarg(["version: ", {term, V}, " contradicts max_version, which allows ", {term, Negotiated}, " only"]);
export_version(V, _) ->
    badarg(["version: expected versioned or legacy, got ", {term, V}]).

%% A stream: an integer, checked in C (its meaning depends on the device).
stream_option(Opts) ->
    case maps:get(stream, Opts, undefined) of
        S when is_integer(S) -> S;
        S when S =:= undefined; S =:= nil -> undefined;
        Other -> badarg(["stream: expected an integer (a cudaStream_t, 1 or 2 for the default streams, "
                         "-1 for no synchronization), got ", {term, Other}])
    end.

boolean_option(Key, Opts) ->
    case maps:get(Key, Opts, false) of
        B when is_boolean(B) -> B;
        Other -> badarg([atom_to_binary(Key), ": expected a boolean, got ", {term, Other}])
    end.

check_options(Opts, Known) ->
    case maps:keys(maps:without(Known, Opts)) of
        [] -> ok;
        Unknown -> badarg(["options: unknown option(s) ", {term, Unknown}, "; known: ", {term, Known}])
    end.

%%--------------------------------------------------------------------
%% Errors
%%
%% A message is built once, as segments (c_src/beam/tb_raise.h): text (a string
%% or a binary), {term, Term} (printed as the caller's language prints
%% terms) and {code, Erlang, Elixir} (code, spelled in each language). Each
%% facade renders the segments its own way: this module the Erlang way into
%% error({Kind, Message}), keeping the segments in the stacktrace's
%% error_info, from which the Elixir facade renders them the Elixir way.
%%
%% A term is cut down first (prune/1) to a bounded tree that both renderers
%% print in full, so that any term, however large or deep, is rendered in
%% bounded time: at most ?TERM_ITEMS elements of a list, tuple or map, at
%% most ?TERM_DEPTH levels, at most ?TERM_NODES terms in all. A pruned term
%% is one of:
%%   {whole, Term}              Term, all of it
%%   elided                     a term not shown (...)
%%   {list, [Node], Tail}       Tail: [] (the end), more (elements not
%%                              shown) or {tail, Node} (an improper tail)
%%   {tuple, [Node], More}      More: true when elements are not shown
%%   {map, [{Node, Node}], More}
%%--------------------------------------------------------------------

-type segment() :: unicode:chardata() | {term, term()} | {code, unicode:chardata(), unicode:chardata()}.
-type pruned() :: {whole, term()} | elided | {list, [pruned()], [] | more | {tail, pruned()}}
                | {tuple, [pruned()], boolean()} | {map, [{pruned(), pruned()}], boolean()}.
-type cause() :: {message, [binary() | {term, pruned()} | {code, binary(), binary()}]}.

-define(TERM_ITEMS, 50).
-define(TERM_DEPTH, 20).
-define(TERM_NODES, 400).
%% The Erlang rendering of the terms of one message stays near this many
%% characters: io_lib trims what is left (as `...').
-define(MESSAGE_CHARS, 1024).

-spec badarg([segment()]) -> no_return().
badarg(Message) ->
    raise(badarg, Message).

%% Raises error({Kind, Message}), Message rendered the Erlang way, with the
%% segments as the error's cause (error_info).
-spec raise(badarg | tensor_blob, [segment()]) -> no_return().
raise(Kind, Message) ->
    Cause = cause(Message),
    erlang:error({Kind, erlang_message(Cause)}, none, [{error_info, error_info(Cause)}]).

%% An error the NIF raised, with its segments: rendered, and re-raised with
%% the NIF's own stacktrace, whose top frame (the NIF call) now carries the
%% cause as raise/2's errors do, and the arity in place of the arguments:
%% an argument may be any term, and a huge or deep one in a stacktrace
%% costs whoever formats or normalizes it (Elixir's rescue does). A
%% reference of another node where a tensor was expected says so.
-spec nif_error(badarg | tensor_blob, {message, [segment()]}, erlang:stacktrace()) -> no_return().
nif_error(badarg, {message, Message}, Stack) ->
    case [R || {term, R} <- Message, is_reference(R), node(R) =/= node()] of
        [Ref | _] -> nif_raise(badarg, other_node(Ref), Stack);
        [] -> nif_raise(badarg, Message, Stack)
    end;
nif_error(Kind, {message, Message}, Stack) ->
    nif_raise(Kind, Message, Stack).

-spec nif_raise(badarg | tensor_blob, [segment()], erlang:stacktrace()) -> no_return().
nif_raise(Kind, Message, [{M, F, Args, Location} | Stack]) ->
    Cause = cause(Message),
    Arity = if is_list(Args) -> length(Args); true -> Args end,
    erlang:raise(error, {Kind, erlang_message(Cause)},
                 [{M, F, Arity, [{error_info, error_info(Cause)} | Location]} | Stack]).

error_info(Cause) ->
    #{module => ?MODULE, cause => Cause}.

-spec cause([segment()]) -> cause().
cause(Message) ->
    {message, [segment(S) || S <- Message]}.

segment({term, Term}) -> {term, prune(Term)};
segment({code, Erlang, Elixir}) -> {code, unicode:characters_to_binary(Erlang), unicode:characters_to_binary(Elixir)};
segment(Text) -> unicode:characters_to_binary(Text).

%% Term cut down to a tree of bounded size (see Errors above); the work is
%% bounded by that size, whatever Term is.
-spec prune(term()) -> pruned().
prune(Term) ->
    element(1, prune(Term, ?TERM_DEPTH, ?TERM_NODES)).

%% {Pruned, NodesLeft}
prune(Term, Depth, Nodes) ->
    case is_container(Term) of
        false -> {{whole, Term}, Nodes - 1};
        true when Depth =< 0; Nodes =< 0 -> {elided, Nodes};
        true -> prune_container(Term, Depth - 1, Nodes - 1)
    end.

is_container(T) ->
    (is_list(T) andalso T =/= []) orelse (is_tuple(T) andalso tuple_size(T) > 0)
        orelse (is_map(T) andalso map_size(T) > 0).

prune_container(List, Depth, Nodes) when is_list(List) ->
    prune_list(List, List, 0, Depth, Nodes, []);
prune_container(Tuple, Depth, Nodes) when is_tuple(Tuple) ->
    Shown = min(tuple_size(Tuple), ?TERM_ITEMS),
    {Items, Left} = prune_items([element(I, Tuple) || I <- lists:seq(1, Shown)], Depth, Nodes, []),
    More = length(Items) < tuple_size(Tuple),
    {whole_or({tuple, Items, More}, Tuple, not More andalso all_whole(Items)), Left};
prune_container(Map, Depth, Nodes) ->
    {Pairs, Left} = prune_pairs(maps:next(maps:iterator(Map)), 0, Depth, Nodes, []),
    More = length(Pairs) < map_size(Map),
    {whole_or({map, Pairs, More}, Map, not More andalso all_whole([N || {K, V} <- Pairs, N <- [K, V]])), Left}.

%% An element not shown ends the elements shown: the rest is one elision.
prune_list(Whole, [H | T], Count, Depth, Nodes, Acc) when Count < ?TERM_ITEMS, Nodes > 0 ->
    case prune(H, Depth, Nodes) of
        {elided, Left} -> {{list, lists:reverse(Acc), more}, Left};
        {Node, Left} -> prune_list(Whole, T, Count + 1, Depth, Left, [Node | Acc])
    end;
prune_list(_Whole, [_ | _], _Count, _Depth, Nodes, Acc) ->
    {{list, lists:reverse(Acc), more}, Nodes};
prune_list(Whole, Tail, _Count, Depth, Nodes, Acc) ->
    {TailNode, Left} = case Tail of
                           [] -> {[], Nodes};
                           _ -> {Node, L} = prune(Tail, Depth, Nodes), {{tail, Node}, L}
                       end,
    Items = lists:reverse(Acc),
    Complete = all_whole(Items) andalso (TailNode =:= [] orelse all_whole([element(2, TailNode)])),
    {whole_or({list, Items, TailNode}, Whole, Complete), Left}.

prune_items([H | T], Depth, Nodes, Acc) when Nodes > 0 ->
    case prune(H, Depth, Nodes) of
        {elided, Left} -> {lists:reverse(Acc), Left};
        {Node, Left} -> prune_items(T, Depth, Left, [Node | Acc])
    end;
prune_items(_, _Depth, Nodes, Acc) ->
    {lists:reverse(Acc), Nodes}.

%% A value not shown is shown as an elision after its key; a key not shown
%% ends the pairs shown.
prune_pairs({K, V, Next}, Count, Depth, Nodes, Acc) when Count < ?TERM_ITEMS, Nodes > 0 ->
    case prune(K, Depth, Nodes) of
        {elided, Left} ->
            {lists:reverse(Acc), Left};
        {KeyNode, Left1} ->
            case prune(V, Depth, Left1) of
                {elided, Left2} -> {lists:reverse(Acc, [{KeyNode, elided}]), Left2};
                {ValueNode, Left2} -> prune_pairs(maps:next(Next), Count + 1, Depth, Left2, [{KeyNode, ValueNode} | Acc])
            end
    end;
prune_pairs(_, _Count, _Depth, Nodes, Acc) ->
    {lists:reverse(Acc), Nodes}.

all_whole(Nodes) ->
    lists:all(fun({whole, _}) -> true; (_) -> false end, Nodes).

whole_or(_Cut, Term, true) -> {whole, Term};
whole_or(Cut, _Term, false) -> Cut.

%% The message the Erlang way: terms printed as io_lib prints them, on one
%% line, within ?MESSAGE_CHARS characters in all.
-spec erlang_message(cause()) -> binary().
erlang_message({message, Segments}) ->
    {Text, _} = lists:mapfoldl(fun erlang_segment/2, ?MESSAGE_CHARS, Segments),
    unicode:characters_to_binary(Text).

erlang_segment({term, Node}, Chars) -> erlang_term(Node, Chars);
erlang_segment({code, Erlang, _Elixir}, Chars) -> {Erlang, Chars};
erlang_segment(Text, Chars) -> {Text, Chars}.

%% {Text, CharsLeft}
erlang_term(elided, Chars) ->
    {"...", Chars - 3};
erlang_term(_Node, Chars) when Chars =< 0 ->
    {"...", Chars};
erlang_term({whole, Term}, Chars) ->
    Text = unicode:characters_to_binary(io_lib:format("~0tp", [Term], [{chars_limit, Chars}])),
    {Text, Chars - string:length(Text)};
erlang_term({list, Items, Tail}, Chars) ->
    {Shown, Left, Cut} = erlang_items(Items, Chars - 2),
    {TailText, Left2} = case Tail of
                            _ when Cut; Tail =:= more -> {more_text(Shown, true, "|"), Left - 4};
                            [] -> {"", Left};
                            {tail, Node} -> {T, L} = erlang_term(Node, Left - 1), {["|", T], L}
                        end,
    {["[", lists:join(",", Shown), TailText, "]"], Left2};
erlang_term({tuple, Items, More}, Chars) ->
    {Shown, Left, Cut} = erlang_items(Items, Chars - 2),
    {["{", lists:join(",", Shown), more_text(Shown, More orelse Cut, ","), "}"], Left - 4};
erlang_term({map, Pairs, More}, Chars) ->
    {Shown, Left, Cut} = erlang_items(Pairs, Chars - 3),
    {["#{", lists:join(",", Shown), more_text(Shown, More orelse Cut, ","), "}"], Left - 4};
erlang_term({Key, Value}, Chars) ->
    %% A map's pair.
    {KeyText, Left} = erlang_term(Key, Chars),
    {ValueText, Left2} = erlang_term(Value, Left - 4),
    {[KeyText, " => ", ValueText], Left2}.

%% {Texts, CharsLeft, Cut}: the items that fit in Chars; Cut when some did
%% not.
erlang_items(Items, Chars) ->
    erlang_items(Items, Chars, []).

erlang_items([], Chars, Acc) ->
    {lists:reverse(Acc), Chars, false};
erlang_items(_Items, Chars, Acc) when Chars =< 0 ->
    {lists:reverse(Acc), Chars, true};
erlang_items([Item | Rest], Chars, Acc) ->
    {Text, Left} = erlang_term(Item, Chars),
    erlang_items(Rest, Left - 1, [Text | Acc]).

more_text(_Shown, false, _Separator) -> "";
more_text([], true, _Separator) -> "...";
more_text(_Shown, true, Separator) -> [Separator, "..."].

%% @private The error_info callback of erl_error (the Erlang shell): the
%% message, as the general explanation.
-spec format_error(term(), erlang:stacktrace()) -> #{general => unicode:chardata()}.
format_error({_Kind, Message}, _Stack) when is_binary(Message) ->
    #{general => Message};
format_error(_Reason, _Stack) ->
    #{}.

%% @private The segments of an error raised by this module or by the NIF
%% through it (from the top frame's error_info), its terms pruned, or none:
%% what the Elixir facade renders.
-spec error_message(term(), erlang:stacktrace()) -> [binary() | {term, pruned()} | {code, binary(), binary()}] | none.
error_message({Kind, Message}, [{_, _, _, Info} | _]) when is_atom(Kind), is_binary(Message), is_list(Info) ->
    case proplists:get_value(error_info, Info) of
        #{module := ?MODULE, cause := {message, Segments}} -> Segments;
        _ -> none
    end;
error_message(_Reason, _Stack) ->
    none.

%% A reference made on another node, where a tensor was expected: a
%% tensor that was sent as it is.
other_node(Ref) ->
    ["tensor: ", {term, Ref}, " is a reference made on node ", {term, node(Ref)},
     ": a tensor belongs to the node (the OS process) that made it, and reaches any other only as a dead "
     "reference. Move it with ", {code, "tensor_blob:node_pack/2", "TensorBlob.Nodes.pack/2"},
     " on the sending node and ", {code, "tensor_blob:node_unpack/1", "TensorBlob.Nodes.unpack/1"}, " on this one"].

%% A term given where a tensor is expected: say what it is and what to do.
-spec not_a_tensor(term()) -> no_return().
not_a_tensor(#{'__struct__' := 'Elixir.Nx.Tensor'} = T) ->
    badarg(["tensor: expected a tensor, got an Nx tensor: convert it with ",
            {code, "'Elixir.TensorBlob.Nx':from_nx/2", "TensorBlob.Nx.from_nx/2"},
            " first (a view where the backend allows, else a copy). Got: ", {term, T}]);
not_a_tensor(#{'__struct__' := 'Elixir.TensorBlob.BlobView'} = T) ->
    badarg(["tensor: expected a tensor, got a blob view: its tensor is ",
            {code, "maps:get(tensor, View)", "view.tensor"}, ". Got: ", {term, T}]);
not_a_tensor(#{'__struct__' := 'Elixir.TensorBlob.Blob'} = T) ->
    badarg(["tensor: expected a tensor, got a blob: view its memory with ",
            {code, "tensor_blob:from_blob/1", "TensorBlob.from_blob/2"}, ". Got: ", {term, T}]);
not_a_tensor(#{'__struct__' := 'Elixir.TensorBlob.DLPack'} = T) ->
    badarg(["tensor: expected a tensor, got a DLPack capsule: import it with ",
            {code, "tensor_blob:from_dlpack/1", "TensorBlob.DLPack.import/2"}, ". Got: ", {term, T}]);
not_a_tensor(T) ->
    badarg(["tensor: expected a tensor, got ", {term, T}]).

%% After an error from a NIF given Dtype (or a spec holding one): when it
%% is a badarg and Dtype is not a dtype at all, raise a message listing the
%% valid ones; otherwise the NIF's own error stands.
-spec dtype_error(term(), badarg | tensor_blob, {message, [segment()]}, erlang:stacktrace()) ->
          no_return().
dtype_error({spec, #{dtype := Dtype}}, Kind, Cause, Stack) ->
    dtype_error(Dtype, Kind, Cause, Stack);
dtype_error({spec, _}, Kind, Cause, Stack) ->
    nif_error(Kind, Cause, Stack);
dtype_error(_Dtype, tensor_blob, Cause, Stack) ->
    nif_error(tensor_blob, Cause, Stack);
dtype_error(Dtype, badarg, Cause, Stack) ->
    try tensor_blob_nif:nx_type(Dtype) of
        _ -> nif_error(badarg, Cause, Stack)
    catch
        error:{badarg, _} ->
            badarg(["dtype: unknown dtype ", {term, Dtype}, "; expected one of ", {term, tensor_blob_nif:dtypes()},
                    " (those this libtorch holds), an ExTorch name (such as ", {term, float}, " or ", {term, long},
                    ") or an Nx type (such as ", {term, {f, 32}}, " or ", {term, f32}, ")"])
    end.
