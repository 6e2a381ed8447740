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
%% error({tensor_blob, Message}). Where the telemetry library is loaded,
%% every copy and transfer emits a [tensor_blob, copy] or
%% [tensor_blob, transfer] event (guides/telemetry.md).
-module(tensor_blob).

-include_lib("kernel/include/file.hrl").

-export([to_blob/1, to_blob/2, from_blob/1, from_blob/2, blob_view/2,
         from_binary/3, from_binary/4, to_binary/1, to_binary/2, zeros/2, write/2,
         narrow/4, transpose/3, to_device/2,
         shape/1, strides/1, dtype/1, device/1, memory/1, pinned/1, describe/1,
         to_dlpack/1, to_dlpack/2, from_dlpack/1, from_dlpack/2,
         consume_dlpack/1, dlpack_version/1,
         stats/0, dtypes/0, nx_type/1, torch_version/0, tables/0, dtype_info/1,
         cuda_info/0, cuda_synchronize/1, cuda_memory/1, dlpack_info/1,
         ipc_zeros/2, ipc_export/1, ipc_name/1, ipc_open/3, ipc_reclaim/0,
         ipc_torch_zeros/2, ipc_torch_export/1, ipc_torch_open/3,
         cuda_torch_open/3, cuda_torch_export/1, cuda_torch_pending/1,
         node_pack/2, node_pack/3, node_unpack/1, node_unpack/2, node_learn_pad/2, host_id/0, same_host/1,
         shm_identity/0]).

%% For the Erlang shell's and Elixir's rendering of errors (error_info).
-export([format_error/2, error_message/2, prune/1, big_integer_text/2]).

%% The Elixir facade's to_blob, with no option map to build and match.
-export([to_blob_struct/3, blob_fields/1]).

%% Copies and views that report telemetry events in the caller's name
%% (TensorBlob.Nx).
-export([copy_from_binary/5, copy_to_binary/3, binary_of/3, data_bytes/1]).

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

-export_type([dtype_info/0, device_info/0]).
-export_type([tensor/0, blob/0, spec/0, dtype/0, shape/0, device/0,
              capsule/0, dlpack_version/0]).

%% A DLPack capsule: a resource owning one exported managed tensor.
-type capsule() :: reference().
-type dlpack_version() :: versioned | legacy.

-type tensor() :: reference().
-type shape() :: tuple().
%% A device: one term per row of the device table (tables/0), an indexed
%% device type with its index. Every spec here and in the Elixir facade
%% (TensorBlob.Tensor.device()) names this type.
-type device() :: cpu | {cuda, non_neg_integer()}.
-type dtype() :: atom() | {atom(), pos_integer()}.
%% A row of the dtype table: its canonical name, what its elements are
%% (kind and bits), its DLPack {Code, Bits, Lanes}, its Nx type, the other
%% names it is known by, the libtorch release that brought it, and whether
%% the linked libtorch holds it.
-type dtype_info() :: #{name := atom(), element_size := pos_integer(),
                        dlpack := {non_neg_integer(), pos_integer(), pos_integer()},
                        kind := bool | uint | int | float | bfloat | complex | float8, bits := pos_integer(),
                        nx := {atom(), pos_integer()} | nil, aliases := [atom()], since := binary(),
                        available := boolean()}.
%% A row of the device table: a device type, its DLPack device code, and
%% whether its devices are numbered ({cuda, 0}) or not (cpu).
-type device_info() :: #{name := atom(), dlpack := integer(), indexed := boolean()}.
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

%% @doc to_blob(T, #{owner => Owner, struct => Struct}), the blob tagged as
%% the struct Struct (for the Elixir facade, whose every call gives both:
%% TensorBlob.to_blob/1 names the tensor as the owner and the Blob struct).
-spec to_blob_struct(tensor(), term(), atom()) -> blob().
to_blob_struct(T, Owner, Struct) when is_reference(T) ->
    %% blob/2's map with '__struct__' in the literal: added afterwards, the
    %% key would merge a new map, the cost the literal avoids.
    {Ptr, Shape, Strides, Dtype, Device, ElementSize, ByteSize, Alignment} = ?NIF(tensor_blob_nif:blob_fields(T)),
    #{'__struct__' => Struct, ptr => Ptr, shape => Shape, strides => Strides, dtype => Dtype, device => Device,
      element_size => ElementSize, byte_size => ByteSize, alignment => Alignment, owner => Owner};
to_blob_struct(T, _Owner, _Struct) ->
    not_a_tensor(T).

%% @doc The values of T's blob, as a tuple: {Ptr, Shape, Strides, Dtype,
%% Device, ElementSize, ByteSize, Alignment}, with no map to build: a
%% tensor's whole layout in one call (the Elixir facade reads it so).
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
    copy_from_binary(Binary, Dtype, Shape, {?MODULE, from_binary, 3}, requested).

%% @doc from_binary/3, reported (where telemetry is loaded) as a
%% [tensor_blob, copy] event made by Function ({Module, Name, Arity}) for
%% Reason (guides/telemetry.md): for code that copies in its caller's name,
%% as TensorBlob.Nx does.
-spec copy_from_binary(binary(), dtype(), shape(), {module(), atom(), arity()},
                       tensor_blob_telemetry:reason()) -> tensor().
copy_from_binary(Binary, Dtype, Shape, Function, Reason) ->
    Start = tensor_blob_telemetry:start(copy),
    T = ?DTYPE_CHECKED(Dtype, tensor_blob_nif:from_binary(Binary, Dtype, Shape)),
    tensor_blob_telemetry:copy(Start, Function, Reason, byte_size(Binary), T),
    T.

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
    Start = tensor_blob_telemetry:start(copy),
    T = ?DTYPE_CHECKED(Dtype, tensor_blob_nif:from_binary_view(Binary, Dtype, Shape, true)),
    %% Misaligned bytes were copied into an owned tensor.
    _ = Start =:= undefined orelse memory(T) =/= owned orelse
        tensor_blob_telemetry:copy(Start, {?MODULE, from_binary, 4}, misaligned, byte_size(Binary), T) =:= ok,
    T;
from_binary(Binary, Dtype, Shape, Opts) ->
    check_copy_option(Opts),
    from_binary(Binary, Dtype, Shape).

%% @doc A copy of T's elements as row-major bytes, whatever its strides.
-spec to_binary(tensor()) -> binary().
to_binary(T) when is_reference(T) ->
    copy_to_binary(T, {?MODULE, to_binary, 1}, requested);
to_binary(T) ->
    not_a_tensor(T).

%% @doc to_binary/1, reported (where telemetry is loaded) as a
%% [tensor_blob, copy] event made by Function for Reason, as
%% copy_from_binary/5.
-spec copy_to_binary(tensor(), {module(), atom(), arity()}, tensor_blob_telemetry:reason()) -> binary().
copy_to_binary(T, Function, Reason) ->
    case tensor_blob_telemetry:start(copy) of
        undefined ->
            ?NIF(tensor_blob_nif:to_binary(T));
        Start ->
            Binary = ?NIF(tensor_blob_nif:to_binary(T)),
            tensor_blob_telemetry:copy(Start, Function, Reason, byte_size(Binary), T),
            Binary
    end.

%% @doc {Binary, Copied}: a view of T's bytes where one can be made
%% (to_binary/2, copy if_needed, unsafe_shared_memory Unguarded), else a
%% copy, reported as made by Function for the reason no view could be:
%% not_contiguous, device or shared_memory.
-spec binary_of(tensor(), boolean(), {module(), atom(), arity()}) -> {binary(), boolean()}.
binary_of(T, Unguarded, Function) ->
    case ?NIF(tensor_blob_nif:to_binary_view(T, Unguarded, true)) of
        Reason when is_atom(Reason) -> {copy_to_binary(T, Function, Reason), true};
        Binary -> {Binary, false}
    end.

%% @doc The bytes T's elements take: the product of its shape and its
%% element size (what a [tensor_blob, transfer] event reports).
-spec data_bytes(tensor()) -> non_neg_integer().
data_bytes(T) ->
    element(1, transfer_facts(T)).

%% {Bytes, Dtype, Shape} of T, in one NIF call.
transfer_facts(T) ->
    {_, Shape, _, Dtype, _, ElementSize, _, _} = ?NIF(tensor_blob_nif:blob_fields(T)),
    {lists:foldl(fun(D, N) -> D * N end, ElementSize, tuple_to_list(Shape)), Dtype, Shape}.

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
        true -> copy_to_binary(T, {?MODULE, to_binary, 2}, requested);
        false -> ?NIF(tensor_blob_nif:to_binary_view(T, Unguarded, false));
        if_needed -> element(1, binary_of(T, Unguarded, {?MODULE, to_binary, 2}));
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

%% @doc A new tensor of zeros.
-spec zeros(shape(), dtype()) -> tensor().
zeros(Shape, Dtype) ->
    ?DTYPE_CHECKED(Dtype, tensor_blob_nif:zeros(Shape, Dtype)).

%% @doc Overwrites T's elements in place with Binary (row-major order), so
%% every view of the same memory sees the new values. Returns T. Raises
%% badarg on a view whose elements share memory (a stride of 0, sliding
%% windows, strides such as [2, 3] over {4, 3}, where {3, 0} and {0, 2}
%% meet), and on a layout where that is not settled within a bounded
%% search (write a contiguous copy instead).
-spec write(tensor(), binary()) -> tensor().
write(T, Binary) when is_reference(T), is_binary(Binary) ->
    case tensor_blob_telemetry:start(copy) of
        undefined ->
            ?NIF(tensor_blob_nif:write(T, Binary));
        Start ->
            T = ?NIF(tensor_blob_nif:write(T, Binary)),
            tensor_blob_telemetry:copy(Start, {?MODULE, write, 2}, requested, byte_size(Binary), T),
            T
    end;
write(T, Other) when is_reference(T) ->
    badarg(["binary: expected a binary, got ", {term, Other}]);
write(T, _Binary) ->
    not_a_tensor(T).

%% @doc A copy of T on Device (cpu or {cuda, Index}): the explicit copy
%% between the host and a GPU. Always a new tensor, even on the same device.
-spec to_device(tensor(), device()) -> tensor().
to_device(T, Device) when is_reference(T) ->
    Start = tensor_blob_telemetry:start(copy),
    Copy = ?NIF(tensor_blob_nif:to_device(T, Device)),
    _ = Start =:= undefined orelse
        tensor_blob_telemetry:copy(Start, {?MODULE, to_device, 2}, requested, data_bytes(Copy), Copy) =:= ok,
    Copy;
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

%% @doc The library's dtype and device tables, in table order: every dtype
%% it knows (`available` says whether the linked libtorch holds it) and
%% every device type. The C tables are the one source of truth; Inspect,
%% the guides' tables and the tests derive from this answer.
-spec tables() -> #{dtypes := [dtype_info()], devices := [device_info()]}.
tables() ->
    case persistent_term:get({?MODULE, tables}, undefined) of
        undefined ->
            Tables = tensor_blob_nif:tables(),
            persistent_term:put({?MODULE, tables}, Tables),
            Tables;
        Tables ->
            Tables
    end.

%% @doc The row of tables() of a canonical dtype.
-spec dtype_info(atom()) -> dtype_info().
dtype_info(Name) ->
    #{dtypes := Dtypes} = tables(),
    case [D || #{name := N} = D <- Dtypes, N =:= Name] of
        [Info] -> Info;
        [] -> badarg(["dtype: expected a canonical dtype, got ", {term, Name}])
    end.

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

%% @doc Releases what creators that are gone left in shared memory: the
%% references their journals list in PyTorch-format headers (each name
%% whose count that takes to zero is removed), then their plain names;
%% returns how many plain names were removed. A creator is judged alive by
%% a lock it holds on a file in the same /dev/shm, never by its pid. A
%% reaper process does this for a dead VM within moments; this covers what
%% it could not (a VM that was its PID namespace's init takes its reaper
%% with it). Done at load too.
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
    Start = tensor_blob_telemetry:start(transfer),
    Function = {?MODULE, ipc_export, 1},
    Handle = case device(T) of
                 cpu -> ipc_export_region(T, Function);
                 {cuda, _} -> ipc_export_cuda(T, Function)
             end,
    exported(Start, Function, T, Handle).

ipc_export_cuda(T, Function) ->
    Start = tensor_blob_telemetry:start(copy),
    {Handle, Device, Size, Shared} = ?NIF(tensor_blob_nif:cuda_ipc_export(T)),
    %% Not contiguous: a contiguous copy on the device is shared.
    _ = Shared =:= T orelse tensor_blob_telemetry:copy(Start, Function, not_contiguous, Size, Shared) =:= ok,
    #{kind => ipc, handle => Handle, address => Device, data_size => Size, tensor => Shared}.

ipc_export_region(T, Function) ->
    Shared = case ipc_name(T) of
                 nil -> copy_into(T, ipc_zeros(shape(T), dtype(T)), Function);
                 _ -> T
             end,
    {Name, Size} = ipc_name(Shared),
    #{kind => ipc, handle => Name, address => undefined, data_size => Size, tensor => Shared}.

%% T's elements written into Region, a new region of its shape and dtype:
%% one copy (not_a_region), read in place.
copy_into(T, Region, Function) ->
    Start = tensor_blob_telemetry:start(copy),
    %% The NIF reads T in place: a binary view of T would freeze it (write/2
    %% refuses it) until the view is collected.
    _ = ?NIF(tensor_blob_nif:write(Region, T)),
    _ = Start =:= undefined orelse
        tensor_blob_telemetry:copy(Start, Function, not_a_region, data_bytes(T), T) =:= ok,
    Region.

%% An export's transfer event: zero-copy when its tensor is T itself.
exported(undefined, _Function, _T, Export) ->
    Export;
exported(Start, Function, T, #{tensor := Shared} = Export) ->
    transferred(Start, Function, T, Shared =/= T, #{}),
    Export.

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
%% then the data), named "/torch_tensor_blob.TOKEN.N" and created
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
    Start = tensor_blob_telemetry:start(transfer),
    Function = {?MODULE, ipc_torch_export, 1},
    exported(Start, Function, T, torch_export(T, Function)).

torch_export(T, Function) ->
    Shared = case torch_shm_name(T) of
                 nil -> copy_into(T, ipc_torch_zeros(shape(T), dtype(T)), Function);
                 _ -> T
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
    Start = tensor_blob_telemetry:start(copy),
    {Handle, Device, Size, Shared} = ?NIF(tensor_blob_nif:cuda_ipc_export(T)),
    _ = Shared =:= T orelse
        tensor_blob_telemetry:copy(Start, {?MODULE, cuda_torch_export, 1}, not_contiguous, Size, Shared) =:= ok,
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
%% a tensor again: send it by any means (a message, erpc, a call's reply).
%% A tensor is a resource of the OS process that made it; on any other node
%% it is only a dead reference, so it never travels as itself.
%%
%% When Node can open this node's shared memory (same_host/1: the same
%% host, /dev/shm and user), T's memory travels as a shared-memory region
%% in PyTorch's format, which both nodes map: no copy when T was made by
%% ipc_torch_zeros/2 (or opened from such a region), one copy into a new
%% region otherwise (T is left as it was). Elsewhere, T's bytes travel as
%% one binary: a view of T's memory when it is a contiguous CPU tensor (no
%% copy here; T is frozen while that binary lives on this node), and the
%% distribution carries it as it carries any binary. Opts: #{via => region
%% | binary} forces a path (region only for a node that can open it);
%% #{keep => Milliseconds} (default 30000): see below.
%%
%% Lifetime: a region's name lives while some tensor over it does. The
%% packed term holds the sender's tensor (its tensor key), and a keeper
%% process of this node holds it too, until the first node_unpack/1 of the
%% term (wherever it runs) or Keep milliseconds, whichever comes first: so
%% the process that packed may end at once (a term returned by erpc:call,
%% or a gen_server reply), and the receiver still finds the region. After
%% the unpack each node holds its own reference, and either may drop
%% first: the last one removes the name. A term unpacked later than Keep
%% after pack, with the sender's tensor gone, finds no region, and says so.
-spec node_pack(tensor(), node()) -> map().
node_pack(T, Node) -> node_pack(T, Node, #{}).

-define(NODE_KEEP_MS, 30000).

%% @doc node_pack/2, with options: via => region (a shared-memory region,
%% only to a node that can open this node's shared memory) or via => binary
%% (the bytes in a binary) forces the path; keep => Milliseconds (default
%% 30000) bounds how long this node keeps a region alive for a receiver
%% that has not unpacked it yet.
-spec node_pack(tensor(), node(), #{via => region | binary, keep => non_neg_integer()}) -> map().
node_pack(T, _Node, _Opts) when not ?IS_TENSOR_TERM(T) ->
    not_a_tensor(T);
node_pack(T, Node, Opts) when is_atom(Node), is_map(Opts) ->
    check_options(Opts, [via, keep]),
    Keep = case maps:get(keep, Opts, ?NODE_KEEP_MS) of
               K when is_integer(K), K >= 0, K =< 16#FFFFFFFF -> K;
               K -> badarg(["keep: expected milliseconds (an integer in 0..4294967295), got ", {term, K}])
           end,
    Via = case Opts of
              #{via := V} when V =:= region; V =:= binary -> V;
              #{via := V} -> badarg(["options: via must be region or binary, got ", {term, V}]);
              #{} -> default_via(T, Node)
          end,
    Start = tensor_blob_telemetry:start(transfer),
    Function = {?MODULE, node_pack, 3},
    Base = #{'__tensor_blob_node__' => 1, dtype => dtype(T), shape => shape(T)},
    {Packed, Copied} =
        case Via of
            region ->
                case {same_host(Node), device(T)} of
                    {false, _} ->
                        badarg(["options: via region needs a node that can open this node's shared memory (the "
                                "same host, /dev/shm and user); ", {term, Node}, " cannot"]);
                    {true, cpu} -> ok;
                    {true, Device} -> badarg(["tensor: via region shares CPU memory; this tensor is on ", {term, Device}])
                end,
                #{handle := Name, tensor := Shared} = torch_export(T, Function),
                {Base#{via => region, handle => Name, tensor => Shared, keeper => node_keeper(Shared, Keep),
                       keep => Keep},
                 Shared =/= T};
            binary ->
                %% A view when T is a contiguous CPU tensor, else a copy.
                %% The pad goes before the bytes in the message (a tuple
                %% keeps its order): see node_learn_pad/2.
                {Binary, C} = binary_of(T, false, Function),
                Pad = persistent_term:get({?MODULE, node_pad, Node}, 0),
                {Base#{via => binary, binary => {binary:copy(<<0>>, Pad), Binary}, from => node()}, C}
        end,
    _ = Start =:= undefined orelse transferred(Start, Function, T, Copied, #{node => Node, via => Via}) =:= ok,
    Packed;
node_pack(_T, Node, Opts) ->
    badarg(["node: expected a node name (an atom) and an option map, got ", {term, Node}, " and ", {term, Opts}]).

default_via(T, Node) ->
    case device(T) =:= cpu andalso same_host(Node) of
        true -> region;
        false -> binary
    end.

%% A process that holds Shared until a node_unpack/1 of its packed term
%% says it has its own reference, or Keep milliseconds pass: the region
%% outlives the process that packed it, for a bounded time.
node_keeper(Shared, Keep) ->
    spawn(fun() ->
                  put(tensor_blob_kept, Shared),
                  receive
                      {tensor_blob_unpacked, _} -> ok
                  after Keep -> ok
                  end
          end).

%% A transfer event for T, whose bytes were copied on the way or not.
transferred(Start, Function, T, Copied, Meta) ->
    {Bytes, Dtype, Shape} = transfer_facts(T),
    CopiedBytes = case Copied of
                      true -> Bytes;
                      false -> 0
                  end,
    tensor_blob_telemetry:transfer(Start, Function, Bytes, CopiedBytes, Meta#{dtype => Dtype, shape => Shape}).

%% @doc The tensor a packed term (node_pack/2) carries, on the node it was
%% sent to: a mapping of the same region (it holds its own reference), or
%% a read-only view of the binary the distribution delivered. That binary
%% lies inside the buffer the message arrived in, where what comes before it
%% in the message puts it: when it is not aligned for the dtype, it is
%% copied once into a new tensor (memory/1 says owned), and the sender is
%% told the pad that lands the next one on this path aligned (a view). With
%% #{copy => true} the result is always a private, writable copy,
%% whichever way the data came (a region is mapped only while it is
%% copied).
-spec node_unpack(map()) -> tensor().
node_unpack(Packed) -> node_unpack(Packed, #{}).

%% @doc node_unpack/1, with options: copy => true copies the received
%% binary into a writable tensor.
-spec node_unpack(map(), #{copy => boolean()}) -> tensor().
node_unpack(#{'__tensor_blob_node__' := 1} = Packed, Opts) when is_map(Opts) ->
    check_options(Opts, [copy]),
    Copy = case maps:get(copy, Opts, false) of
               C when is_boolean(C) -> C;
               C -> badarg(["copy: expected a boolean, got ", {term, C}])
           end,
    Start = tensor_blob_telemetry:start(transfer),
    T = node_unpack_checked(Packed, Copy),
    _ = Start =:= undefined orelse
        transferred(Start, {?MODULE, node_unpack, 2}, T, memory(T) =:= owned,
                    #{node => node(), via => maps:get(via, Packed, undefined)}) =:= ok,
    T;
node_unpack(#{'__tensor_blob_node__' := 1}, Opts) ->
    badarg(["options: expected a map, got ", {term, Opts}]);
node_unpack(Other, _Opts) ->
    node_unpack_checked(Other, false).

node_unpack_checked(#{via := region, handle := Name, dtype := Dtype, shape := Shape} = Packed, Copy) ->
    Mapped = node_open(Packed, Name, Dtype, Shape),
    _ = case Packed of
            #{keeper := Keeper} when is_pid(Keeper) -> Keeper ! {tensor_blob_unpacked, node()};
            #{} -> ok
        end,
    case Copy of
        true -> to_device(Mapped, cpu);
        false -> Mapped
    end;
node_unpack_checked(#{via := binary, binary := {Pad, Bin}} = Packed, Copy) when is_binary(Pad), is_binary(Bin) ->
    node_unpack_binary(Packed, byte_size(Pad), Bin, Copy);
node_unpack_checked(#{via := binary, binary := Bin} = Packed, Copy) when is_binary(Bin) ->
    %% From a node that sends no pad.
    node_unpack_binary(Packed, 0, Bin, Copy);
node_unpack_checked(Other, _Copy) ->
    node_unpack_bad(Other).

node_unpack_binary(#{dtype := Dtype, shape := Shape}, _PadBytes, Bin, true) ->
    from_binary(Bin, Dtype, Shape);
node_unpack_binary(#{dtype := Dtype, shape := Shape} = Packed, PadBytes, Bin, false) ->
    T = from_binary(Bin, Dtype, Shape, #{copy => if_needed}),
    ok = case memory(T) of
             owned -> node_misaligned(Packed, PadBytes, Bin);
             _ -> ok
         end,
    T;
node_unpack_binary(Other, _PadBytes, _Bin, _Copy) ->
    node_unpack_bad(Other).

-spec node_unpack_bad(term()) -> no_return().
node_unpack_bad(Other) ->
    badarg(["packed: expected what ", {code, "tensor_blob:node_pack/2", "TensorBlob.Nodes.pack/2"}, " made, got ",
            {term, Other}]).

%% The region's mapping; a region that is gone says why it may be.
node_open(Packed, Name, Dtype, Shape) ->
    try
        ipc_torch_open(Name, Dtype, Shape)
    catch
        error:{Kind, Message}:Stack when is_binary(Message) ->
            case binary:match(Message, <<"no shared memory named">>) of
                nomatch ->
                    erlang:raise(error, {Kind, Message}, Stack);
                _ ->
                    Keep = maps:get(keep, Packed, 0),
                    raise(Kind,
                          ["packed: its region ", {term, Name}, " is gone: every tensor over it on the sending node ",
                           "was freed before this node unpacked it (the packed term holds the sender's tensor ",
                           "only while the term lives on the sending node, and its keeper only until ",
                           integer_to_list(Keep), " ms after ",
                           {code, "tensor_blob:node_pack/3", "TensorBlob.Nodes.pack/3"},
                           " or the first unpack). Unpack it sooner, pack it with a longer keep, or keep the ",
                           "tensor on the sending node until it is unpacked"])
            end
    end.

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
%% See same_host/1, which also asks for the same user.
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

%% @private What another node compares with its own: host_id/0 and this
%% VM's effective user (a region is its creator's, mode 0600).
-spec shm_identity() -> {{binary(), integer(), integer()}, integer()}.
shm_identity() ->
    {host_id(), effective_uid()}.

effective_uid() ->
    %% "Uid:\treal\teffective\tsaved\tfs" in /proc/self/status.
    case file:read_file("/proc/self/status") of
        {ok, Status} ->
            case re:run(Status, "^Uid:\\s+\\d+\\s+(\\d+)", [multiline, {capture, all_but_first, binary}]) of
                {match, [Uid]} -> binary_to_integer(Uid);
                nomatch -> -1
            end;
        {error, _} -> -1
    end.

%% @doc Whether Node can open the shared memory this node makes, which is
%% what node_pack/2 asks before it sends a region: the same host (a boot
%% id both can read), the same /dev/shm, and the same effective user
%% (regions are mode 0600). False for a node that cannot be reached, or
%% when no boot id can be read here.
-spec same_host(node()) -> boolean().
same_host(Node) when Node =:= node() ->
    true;
same_host(Node) when is_atom(Node) ->
    case shm_identity() of
        {{<<>>, _, _}, _} -> false;
        {_, -1} -> false;
        Local -> try erpc:call(Node, tensor_blob, shm_identity, [], 5000) =:= Local catch _:_ -> false end
    end;
same_host(Node) ->
    badarg(["node: expected a node name (an atom), got ", {term, Node}]).

%% @doc The version of the linked libtorch, such as `<<"2.6.0">>'.
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
%% when libtorch frees the imported storage. An address this library handed
%% out (consume_dlpack/1, the C bridge) is known until one import takes it
%% or its deleter runs: imported once, refused after. Any other address is
%% refused unless #{unsafe_address => true} says the caller answers for it:
%% then it is trusted, and a forged, freed or twice-imported one cannot be
%% detected.
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
%% An address must be one this library handed out and that no import took
%% yet (see from_dlpack/2 for others); it is read as what it was handed
%% out as (versioned or legacy).
-spec from_dlpack(capsule() | non_neg_integer()) -> tensor().
from_dlpack(Source) ->
    ?NIF(tensor_blob_nif:from_dlpack(Source, undefined, false, undefined)).

%% @doc Like from_dlpack/1, with options:
%%   version: versioned | legacy, how to read an address of another
%%     producer (default versioned). A capsule knows its own, and so does an
%%     address this library handed out: a version that is not what it
%%     holds raises badarg, and the address stays for a later import.
%%   read_only: true makes the tensor read-only even without the flag.
%%   unsafe_address: true imports an address of another producer (a
%%     foreign NIF, a C library): nothing can tell a live managed tensor
%%     from a freed one, or one already imported, whose deleter would then
%%     run twice. The caller answers for it. Without it, only addresses
%%     this library handed out and still holds are imported, once each.
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
                  #{version => dlpack_version(), read_only => boolean(), stream => integer(),
                    unsafe_address => boolean()}) -> tensor().
from_dlpack(Source, Opts) when is_map(Opts) ->
    check_options(Opts, [version, read_only, stream, unsafe_address]),
    Version = case maps:get(version, Opts, undefined) of
                  V when V =:= versioned; V =:= legacy; V =:= undefined -> V;
                  Other -> badarg(["version: expected versioned or legacy, got ", {term, Other}])
              end,
    Given = case boolean_option(unsafe_address, Opts) of
                true when is_integer(Source) -> {unsafe_address, Source};
                _ -> Source
            end,
    ?NIF(tensor_blob_nif:from_dlpack(Given, Version, boolean_option(read_only, Opts), stream_option(Opts)));
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
%%   {big_integer, Sign, Bits}  an integer too large to print (printing
%%                              one of 200,000 bits takes most of a second
%%                              and 60 KB): its sign (1 or -1) and size
%%--------------------------------------------------------------------

-type segment() :: unicode:chardata() | {term, term()} | {code, unicode:chardata(), unicode:chardata()}.
-type pruned() :: {whole, term()} | elided | {list, [pruned()], [] | more | {tail, pruned()}}
                | {tuple, [pruned()], boolean()} | {map, [{pruned(), pruned()}], boolean()}
                | {big_integer, 1 | -1, pos_integer()}.
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
%% reference of another node where a tensor was expected says so; a
%% message about any other argument is left as it is.
-spec nif_error(badarg | tensor_blob, {message, [segment()]}, erlang:stacktrace()) -> no_return().
nif_error(badarg, {message, [Text, {term, Ref}] = Message}, Stack) when is_binary(Text), is_reference(Ref),
                                                                        node(Ref) =/= node() ->
    Expected = <<": expected a tensor, got ">>,
    Size = byte_size(Text) - byte_size(Expected),
    case Text of
        <<Field:Size/binary, Expected/binary>> when Size > 0 -> nif_raise(badarg, other_node(Field, Ref), Stack);
        _ -> nif_raise(badarg, Message, Stack)
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

%% @private Term cut down to a tree of bounded size (see Errors above); the
%% work is bounded by that size, whatever Term is. The Elixir facade prints
%% terms of its own messages through it too.
-spec prune(term()) -> pruned().
prune(Term) ->
    element(1, prune(Term, ?TERM_DEPTH, ?TERM_NODES)).

%% Integers of more bits than this are shown by their size alone.
-define(BIG_INTEGER, (1 bsl 256)).

%% {Pruned, NodesLeft}
prune(Term, _Depth, Nodes) when is_integer(Term), (Term >= ?BIG_INTEGER orelse Term =< -?BIG_INTEGER) ->
    Sign = if Term < 0 -> -1; true -> 1 end,
    <<Top, _/binary>> = Bytes = binary:encode_unsigned(abs(Term)),
    Bits = (byte_size(Bytes) - 1) * 8 + bit_length(Top),
    {{big_integer, Sign, Bits}, Nodes - 1};
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

bit_length(0) -> 0;
bit_length(N) -> 1 + bit_length(N bsr 1).

%% @private What both facades show for {big_integer, Sign, Bits}.
-spec big_integer_text(1 | -1, pos_integer()) -> binary().
big_integer_text(Sign, Bits) ->
    Text = io_lib:format("<~s integer of ~b bits>", [case Sign of -1 -> "a negative"; 1 -> "an" end, Bits]),
    unicode:characters_to_binary(Text).

%% {Text, CharsLeft}
erlang_term(elided, Chars) ->
    {"...", Chars - 3};
erlang_term({big_integer, Sign, Bits}, Chars) ->
    Text = big_integer_text(Sign, Bits),
    {Text, Chars - byte_size(Text)};
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

%% @doc The error_info callback of erl_error (the Erlang shell): an
%% error's message, as the general explanation.
-spec format_error(term(), erlang:stacktrace()) -> #{general => unicode:chardata()}.
format_error({_Kind, Message}, _Stack) when is_binary(Message) ->
    #{general => Message};
format_error(_Reason, _Stack) ->
    #{}.

%% @doc The segments of an error raised by this module or by the NIF
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

%% A reference made on another node, where a tensor was expected (the
%% argument Field): a tensor that was sent as it is.
other_node(Field, Ref) ->
    [Field, ": ", {term, Ref}, " is a reference made on node ", {term, node(Ref)},
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
