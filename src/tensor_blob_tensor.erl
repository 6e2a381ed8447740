%% @private
%% Tensors and memory: blobs both ways (to_blob's options, from_blob and
%% the owner decision), binaries both ways (copies and views), writes and device
%% copies, with the telemetry events they make. tensor_blob's functions of
%% the same names are these.
-module(tensor_blob_tensor).

-include("tensor_blob_internal.hrl").

-export([blob/2, to_blob/2, to_blob_struct/3, from_blob/1, blob_view/2,
         from_binary/3, from_binary/4, copy_from_binary/5, to_binary/2, copy_to_binary/3, binary_of/4,
         data_bytes/1, copy_into/4, writable/1, write/2, to_device/2, transferred/5]).

-import(tensor_blob_error, [badarg/3, not_a_tensor/1]).
-import(tensor_blob_options, [check/3]).

%% An owner term that from_blob pins: none asks for an unpinned view;
%% undefined and nil (and no owner key) name no owner, which is refused.
-define(PINNABLE(Owner), (Owner =/= none andalso Owner =/= undefined andalso Owner =/= nil)).

%% The map of a blob's fields. Built here, with literal keys, it costs a
%% copy of the values; the NIF would have to sort and check its keys.
-spec blob(tuple(), term()) -> tensor_blob:blob().
blob({Ptr, Shape, Strides, Dtype, Device, ElementSize, ByteSize, Alignment}, Owner) ->
    #{ptr => Ptr, shape => Shape, strides => Strides, dtype => Dtype, device => Device,
      element_size => ElementSize, byte_size => ByteSize, alignment => Alignment, owner => Owner}.

-spec to_blob_struct(tensor_blob:tensor(), term(), atom()) -> tensor_blob:blob().
to_blob_struct(T, Owner, Struct) when is_reference(T) ->
    %% blob/2's map with '__struct__' in the literal: added afterwards, the
    %% key would merge a new map (67 ns a call here against 73).
    {Ptr, Shape, Strides, Dtype, Device, ElementSize, ByteSize, Alignment} = ?NIF(tensor_blob_nif:blob_fields(T)),
    #{'__struct__' => Struct, ptr => Ptr, shape => Shape, strides => Strides, dtype => Dtype, device => Device,
      element_size => ElementSize, byte_size => ByteSize, alignment => Alignment, owner => Owner};
to_blob_struct(T, _Owner, _Struct) ->
    not_a_tensor(T).

-spec to_blob(term(), term()) -> tensor_blob:blob().
to_blob(T, _Opts) when not is_reference(T) ->
    not_a_tensor(T);
to_blob(T, Opts) ->
    Checked = check(Opts, [{owner, any}, {struct, {satisfies, "a module name (an atom)", fun erlang:is_atom/1},
                                               undefined}], map),
    Owner = maps:get(owner, Checked, T),
    case Checked of
        #{struct := undefined} -> blob(?NIF(tensor_blob_nif:blob_fields(T)), Owner);
        #{struct := Struct} -> to_blob_struct(T, Owner, Struct)
    end.

-spec from_blob(tensor_blob:spec()) -> tensor_blob:tensor().
from_blob(Spec) ->
    element(1, view(Spec, spec_owner(Spec))).

-spec blob_view(tensor_blob:spec(), term()) -> {tensor_blob:tensor(), Owner :: term()}.
%% The two forms of options Elixir's from_blob/2 passes are matched first:
%% check/3 would cost 100 ns on a call of 77. The checker takes the rest
%% (and refuses all of them, as it is).
blob_view(Spec, #{owner := Owner} = Opts) when map_size(Opts) =:= 1 ->
    view(Spec, Owner);
blob_view(Spec, Opts) when Opts =:= #{} ->
    view(Spec, spec_owner(Spec));
blob_view(Spec, Opts) ->
    Checked = check(Opts, [{owner, any}], map),
    view(Spec, maps:get(owner, Checked, spec_owner(Spec))).

spec_owner(#{owner := Owner}) -> Owner;
spec_owner(_) -> undefined.

%% A blob, or a spec with all its keys: matched here, in one pass over the
%% map, where the NIF would look each key up (from_blob_fields/7: 63 ns a
%% call against 87 for from_blob/3's map, 4 B, one scheduler).
view(#{ptr := Ptr, shape := Shape, dtype := Dtype, strides := Strides, device := Device} = Spec, Owner)
  when ?PINNABLE(Owner) ->
    {?DTYPE_CHECKED({spec, Spec}, tensor_blob_nif:from_blob_fields(Ptr, Shape, Dtype, Strides, Device, Owner, true)),
     Owner};
view(Spec, Owner) when ?PINNABLE(Owner) ->
    atom_keys(Spec),
    {?DTYPE_CHECKED({spec, Spec}, tensor_blob_nif:from_blob(Spec, Owner, true)), Owner};
view(Spec, none) ->
    atom_keys(Spec),
    {?DTYPE_CHECKED({spec, Spec}, tensor_blob_nif:from_blob(Spec, undefined, false)), none};
view(Spec, _NoOwner) when is_map(Spec) ->
    atom_keys(Spec),
    %% The safe ways out first; the unpinned view last, with its cost.
    badarg(missing, owner, ["owner: the spec names no owner. Pass the term that keeps the memory alive, ",
                            {code, "owner => Term", "owner: term"},
                            " (the tensor or struct the memory belongs to; a blob from ",
                            {code, "to_blob/1", "to_blob/1"},
                            " names its tensor already), or copy the data into a tensor of its own (",
                            {code, "tensor_blob:from_binary/3", "TensorBlob.Tensor.from_binary/3"},
                            "). Last, and unsafe: ",
                            {code, "owner => none", "owner: :none"},
                            " gives an unpinned view for which the caller answers: nothing keeps the memory alive,"
                            " and reading the view after the memory is freed kills the VM"]);
view(Spec, _NoOwner) ->
    %% Not a map: the NIF says what a spec is.
    {?NIF(tensor_blob_nif:from_blob(Spec, undefined, false)), none}.

%% A spec names memory of this VM: its keys are atoms. One with string keys
%% (a map a JSON decoder made: binaries in Erlang, strings in Elixir) is
%% refused as such, not for a field it seems to lack. A blob with all its
%% keys (view/2's first clause) has none to look for.
atom_keys(Spec) when is_map(Spec) ->
    case [K || K <- [<<"ptr">>, <<"shape">>, <<"dtype">>, <<"strides">>, <<"device">>, <<"owner">>],
               is_map_key(K, Spec)] of
        [] ->
            ok;
        Strings ->
            badarg(bad_value, spec,
                   ["spec: its keys must be atoms (",
                    {code, "#{ptr => ..., shape => ..., dtype => ...}", "%{ptr: ..., shape: ..., dtype: ...}"},
                    "), got the string keys ", {term, Strings},
                    ": a spec names memory of this VM (a region from another process opens with ",
                    {code, "tensor_blob_ipc:open/3", "TensorBlob.IPC.open/1"}, ")"])
    end;
atom_keys(_Spec) ->
    ok.

-spec from_binary(binary(), tensor_blob:dtype(), tensor_blob:shape()) -> tensor_blob:tensor().
from_binary(Binary, Dtype, Shape) ->
    copy_from_binary(Binary, Dtype, Shape, {tensor_blob, from_binary, 3}, requested).

-spec copy_from_binary(binary(), tensor_blob:dtype(), tensor_blob:shape(), {module(), atom(), arity()},
                       tensor_blob_telemetry:reason()) -> tensor_blob:tensor().
copy_from_binary(Binary, Dtype, Shape, Function, Reason) ->
    Start = tensor_blob_telemetry:start(copy),
    T = ?DTYPE_CHECKED(Dtype, tensor_blob_nif:from_binary(Binary, Dtype, Shape)),
    tensor_blob_telemetry:copy(Start, Function, Reason, byte_size(Binary), T),
    T.

-spec from_binary(binary(), tensor_blob:dtype(), tensor_blob:shape(), term()) -> tensor_blob:tensor().
from_binary(Binary, Dtype, Shape, #{copy := false} = Opts) when map_size(Opts) =:= 1 ->
    ?DTYPE_CHECKED(Dtype, tensor_blob_nif:from_binary_view(Binary, Dtype, Shape, false));
from_binary(Binary, Dtype, Shape, #{copy := if_needed} = Opts) when map_size(Opts) =:= 1 ->
    Start = tensor_blob_telemetry:start(copy),
    T = ?DTYPE_CHECKED(Dtype, tensor_blob_nif:from_binary_view(Binary, Dtype, Shape, true)),
    %% Misaligned bytes were copied into an owned tensor.
    _ = Start =:= undefined orelse tensor_blob_nif:memory(T) =/= owned orelse
        tensor_blob_telemetry:copy(Start, {tensor_blob, from_binary, 4}, misaligned, byte_size(Binary), T) =:= ok,
    T;
from_binary(Binary, Dtype, Shape, Opts) ->
    _ = check(Opts, [{copy, {one_of, [true, false, if_needed]}}], map),
    from_binary(Binary, Dtype, Shape).

-spec copy_to_binary(tensor_blob:tensor(), {module(), atom(), arity()}, tensor_blob_telemetry:reason()) -> binary().
copy_to_binary(T, Function, Reason) ->
    case tensor_blob_telemetry:start(copy) of
        undefined ->
            ?NIF(tensor_blob_nif:to_binary(T));
        Start ->
            Binary = ?NIF(tensor_blob_nif:to_binary(T)),
            tensor_blob_telemetry:copy(Start, Function, Reason, byte_size(Binary), T),
            Binary
    end.

%% Maker (to_binary, node_pack, to_nx) makes the binary: a write the binary
%% refuses names it. Function is what telemetry reports for a copy.
-spec binary_of(tensor_blob:tensor(), boolean(), to_binary | node_pack | to_nx, {module(), atom(), arity()}) ->
          {binary(), boolean()}.
binary_of(T, Unguarded, Maker, {M, F, A} = Function)
  when is_boolean(Unguarded), (Maker =:= to_binary orelse Maker =:= node_pack orelse Maker =:= to_nx),
       is_atom(M), is_atom(F), is_integer(A), A >= 0 ->
    case ?NIF(tensor_blob_nif:to_binary_view(T, Unguarded, Maker)) of
        Reason when is_atom(Reason) -> {copy_to_binary(T, Function, Reason), true};
        Binary -> {Binary, false}
    end;
binary_of(_T, Unguarded, _Maker, _Function) when not is_boolean(Unguarded) ->
    badarg(bad_value, unguarded, ["unguarded: expected true or false, got ", {term, Unguarded}]);
binary_of(_T, _Unguarded, Maker, Function) when is_tuple(Function), tuple_size(Function) =:= 3 ->
    badarg(bad_value, maker, ["maker: expected to_binary, node_pack or to_nx, got ", {term, Maker}]);
binary_of(_T, _Unguarded, _Maker, Function) ->
    badarg(bad_value, function, ["function: expected {Module, Function, Arity}, got ", {term, Function}]).

%% Source read in place by the NIF (no binary made of it, which would freeze
%% it), under the SIGBUS guard: one copy.
-spec copy_into(tensor_blob:tensor(), tensor_blob:tensor(), {module(), atom(), arity()},
                tensor_blob_telemetry:reason()) -> tensor_blob:tensor().
copy_into(Target, Source, Function, Reason) when is_reference(Target), is_reference(Source) ->
    Start = tensor_blob_telemetry:start(copy),
    _ = ?NIF(tensor_blob_nif:write(Target, Source)),
    _ = Start =:= undefined orelse
        tensor_blob_telemetry:copy(Start, Function, Reason, data_bytes(Source), Source) =:= ok,
    Target;
copy_into(Target, Source, _Function, _Reason) when is_reference(Target) ->
    not_a_tensor(Source);
copy_into(Target, _Source, _Function, _Reason) ->
    not_a_tensor(Target).

-spec writable(tensor_blob:tensor()) -> true | read_only | frozen.
writable(T) -> ?NIF(tensor_blob_nif:writable(T)).

-spec data_bytes(tensor_blob:tensor()) -> non_neg_integer().
data_bytes(T) ->
    element(1, transfer_facts(T)).

%% {Bytes, Dtype, Shape} of T, in one NIF call.
transfer_facts(T) ->
    {_, Shape, _, Dtype, _, ElementSize, _, _} = ?NIF(tensor_blob_nif:blob_fields(T)),
    {lists:foldl(fun(D, N) -> D * N end, ElementSize, tuple_to_list(Shape)), Dtype, Shape}.

-spec to_binary(tensor_blob:tensor(), term()) -> binary().
to_binary(T, _Opts) when not is_reference(T) ->
    not_a_tensor(T);
%% copy: false alone (Elixir's to_binary(t, copy: false)) is matched, not
%% checked: the checker would add 140 ns to a call of 470.
to_binary(T, #{copy := false} = Opts) when map_size(Opts) =:= 1 ->
    ?NIF(tensor_blob_nif:to_binary_view(T, false, false));
to_binary(T, Opts) ->
    #{copy := Copy, unsafe_shared_memory := Unguarded} =
        check(Opts, [{copy, {one_of, [true, false, if_needed]}, true}, {unsafe_shared_memory, boolean, false}], map),
    case Copy of
        true -> copy_to_binary(T, {tensor_blob, to_binary, 2}, requested);
        false -> ?NIF(tensor_blob_nif:to_binary_view(T, Unguarded, false));
        if_needed -> element(1, binary_of(T, Unguarded, to_binary, {tensor_blob, to_binary, 2}))
    end.

-spec write(tensor_blob:tensor(), term()) -> tensor_blob:tensor().
write(T, Binary) when is_reference(T), is_binary(Binary) ->
    case tensor_blob_telemetry:start(copy) of
        undefined ->
            ?NIF(tensor_blob_nif:write(T, Binary));
        Start ->
            T = ?NIF(tensor_blob_nif:write(T, Binary)),
            tensor_blob_telemetry:copy(Start, {tensor_blob, write, 2}, requested, byte_size(Binary), T),
            T
    end;
write(T, Other) when is_reference(T) ->
    badarg(bad_value, binary, ["binary: expected a binary, got ", {term, Other}]);
write(T, _Binary) ->
    not_a_tensor(T).

-spec to_device(tensor_blob:tensor(), tensor_blob:device()) -> tensor_blob:tensor().
to_device(T, Device) when is_reference(T) ->
    Start = tensor_blob_telemetry:start(copy),
    Copy = ?NIF(tensor_blob_nif:to_device(T, Device)),
    _ = Start =:= undefined orelse
        tensor_blob_telemetry:copy(Start, {tensor_blob, to_device, 2}, requested, data_bytes(Copy), Copy) =:= ok,
    Copy;
to_device(T, _Device) -> not_a_tensor(T).

%% A transfer span for T, whose bytes were copied on the way or not.
-spec transferred(tensor_blob_telemetry:token(), {module(), atom(), arity()}, tensor_blob:tensor(), boolean(), map()) -> ok.
transferred(Start, Function, T, Copied, Meta) ->
    {Bytes, Dtype, Shape} = transfer_facts(T),
    CopiedBytes = case Copied of
                      true -> Bytes;
                      false -> 0
                  end,
    tensor_blob_telemetry:transfer(Start, Function, Bytes, CopiedBytes, Meta#{dtype => Dtype, shape => Shape}).
