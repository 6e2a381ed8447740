%% PropEr property tests of the exchange, run from EUnit.
%%
%% PropEr comes from Debian's erlang-proper (in the OTP lib dir, so on the
%% code path). That package ships no proper.hrl (erlang-proper-dev does), so
%% the few macros used here are defined below over PropEr's public API.
%%
%% 1. roundtrip: for random dtypes, shapes (0..4 dims, sizes 0..5, zeros and
%%    ones included) and views made by random transposes and narrows of a
%%    tensor made from random bytes, to_blob -> from_blob -> to_binary gives
%%    the bytes that an independent model computes in Erlang from the
%%    original row-major bytes with index arithmetic (and so does to_binary
%%    of the view itself). Further transposes and narrows of the imported
%%    view are checked against the model too.
%%    The same property runs through DLPack: to_dlpack -> from_dlpack
%%    (versioned and legacy, by capsule and by consumed address).
%% 2. malformed: every random mutation of one field of a valid blob raises
%%    error({badarg, Msg}) with Msg a binary that leads with the field at
%%    fault; it never returns and never crashes, and leaves no tensor or pin
%%    behind.
%%
%% Known issues these tests found, each with a regression test here that
%% fails until it is fixed, and tolerated (exactly that sub-case, nothing
%% wider) by the properties meanwhile so that they still check the rest:
%%
%% K1. to_binary/1 and write/2 of a complex128 tensor crash the VM (SIGSEGV
%%     in libtorch's copy kernel: an aligned 16-byte vmovapd on a binary that
%%     is only 8-byte aligned) for element counts that leave a remainder in
%%     the vectorised loop (1, 3, 7, 17, ...). Checked in a child VM, so the
%%     crash fails one test instead of killing the EUnit run; while it
%%     crashes, the round-trip property leaves complex128 out.
%% K2. from_blob(to_blob(V)) refuses a zero-element view V whose data
%%     pointer lies past the end of its storage (narrow(T, D, Size, 0) after
%%     another narrow, or any narrow of an empty tensor): "ptr: ... lies
%%     outside the owner's memory", although no byte is reached. The property
%%     accepts that refusal for exactly that case.
%%
%% Tensors are made inside the properties, never in generators.
-module(tensor_blob_prop_tests).

-import(tensor_blob_test_util, [settled_stats/0]).

-include_lib("eunit/include/eunit.hrl").

%% PropEr's macros, as proper.hrl defines them.
-define(DELAY(X), fun() -> X end).
-define(FORALL(X, RawType, Prop), proper:forall(RawType, fun(X) -> Prop end)).
-define(PLET(X, RawType, Gen), proper_types:bind(RawType, fun(X) -> Gen end, false)).
-define(WHENFAIL(Action, Prop), proper:whenfail(?DELAY(Action), ?DELAY(Prop))).

-define(NUMTESTS, 1000).

%%====================================================================
%% EUnit entry points
%%====================================================================

roundtrip_test_() ->
    {timeout, 120, fun() -> check(prop_roundtrip(roundtrip_dtypes())) end}.

dlpack_roundtrip_test_() ->
    {timeout, 120, fun() -> check(prop_dlpack_roundtrip(roundtrip_dtypes())) end}.

malformed_test_() ->
    {timeout, 120, fun() -> check(prop_malformed()) end}.

%% Nothing the properties made is left once they are done.
no_leaks_test_() ->
    {timeout, 60,
     fun() ->
             Before = settled_stats(),
             check(prop_roundtrip(roundtrip_dtypes()), 300),
             check(prop_malformed(), 300),
             check(prop_dlpack_roundtrip(roundtrip_dtypes()), 300),
             ?assertEqual(Before, settled_stats())
     end}.

check(Prop) -> check(Prop, ?NUMTESTS).

%% Debian's PropEr 1.2 calls erlang:get_stacktrace/0 (gone since OTP 23)
%% when a property raises, which hides the counterexample: properties turn
%% their exceptions into a failure that prints them instead.
safely(Fun) ->
    try
        Fun()
    catch
        Class:Reason:Stack ->
            ?WHENFAIL(io:format(user, "~nraised ~0tp:~0tp~n~0tp~n", [Class, Reason, Stack]), false)
    end.

check(Prop, N) ->
    %% long_result: a failure returns the counterexample, shown by the assert.
    ?assertEqual(true, proper:quickcheck(Prop, [{numtests, N}, {to_file, user}, long_result])).

%%====================================================================
%% The model: dtypes and row-major bytes, independent of the NIF
%%====================================================================

%% Bytes per element of a canonical dtype: the library's dtype table
%% (tensor_blob:tables/0), whose sizes tensor_blob_tests checks against
%% their DLPack bits and the shim against libtorch's.
esize(D) -> maps:get(element_size, tensor_blob:dtype_info(D)).

numel(Shape) -> lists:foldl(fun(N, Acc) -> N * Acc end, 1, Shape).

%% Row-major element strides, as libtorch makes them: a dimension of size 0
%% or 1 counts as 1.
row_major(Shape) ->
    {Strides, _} = lists:foldr(fun(N, {Acc, Step}) -> {[Step | Acc], Step * max(N, 1)} end,
                               {[], 1}, Shape),
    Strides.

%% A view of the original storage: shape, element strides and element offset.
-record(view, {shape :: [non_neg_integer()], strides :: [non_neg_integer()], offset = 0 :: non_neg_integer()}).

base_view(Shape) -> #view{shape = Shape, strides = row_major(Shape)}.

%% The operations are stored as raw numbers and read modulo the current
%% shape, so any sequence applies (and shrinks) whatever the shape is.
model_op(#view{shape = []} = V, _Op) ->
    {skip, V};
model_op(#view{shape = Shape, strides = Strides} = V, {transpose, A, B}) ->
    N = length(Shape),
    D0 = A rem N,
    D1 = B rem N,
    {{transpose, D0, D1}, V#view{shape = swap(Shape, D0, D1), strides = swap(Strides, D0, D1)}};
model_op(#view{shape = Shape, strides = Strides, offset = Off} = V, {narrow, A, X, Y}) ->
    D = A rem length(Shape),
    Size = lists:nth(D + 1, Shape),
    %% Y = 0: a zero-length narrow, from any start up to Size included.
    %% Otherwise at least one element when there is one.
    {Start, Len} = case {Y, Size} of
                       {0, _} -> {X rem (Size + 1), 0};
                       {_, 0} -> {0, 0};
                       _ -> S = X rem Size, {S, 1 + (Y - 1) rem (Size - S)}
                   end,
    {{narrow, D, Start, Len},
     V#view{shape = set_nth(Shape, D, Len), offset = Off + Start * lists:nth(D + 1, Strides)}}.

swap(L, I, J) ->
    T = list_to_tuple(L),
    tuple_to_list(setelement(I + 1, setelement(J + 1, T, element(I + 1, T)), element(J + 1, T))).

set_nth(L, I, X) ->
    {Before, [_ | After]} = lists:split(I, L),
    Before ++ [X | After].

%% The view's elements in row-major order, picked from the original
%% elements by offset + sum(index * stride).
model_bytes(#view{shape = Shape, strides = Strides, offset = Off}, Elements) ->
    iolist_to_binary([element(Off + dot(Index, Strides) + 1, Elements) || Index <- indices(Shape)]).

indices([]) -> [[]];
indices([N | Rest]) -> [[I | Is] || I <- lists:seq(0, N - 1), Is <- indices(Rest)].

dot(Is, Ss) -> lists:sum(lists:zipwith(fun(I, S) -> I * S end, Is, Ss)).

%% The byte extent of a view: 0 without elements, else up to the end of the
%% farthest element.
model_extent(#view{shape = Shape, strides = Strides}, E) ->
    case numel(Shape) of
        0 -> 0;
        _ -> (1 + dot([N - 1 || N <- Shape], Strides)) * E
    end.

split_elements(Bin, E) -> list_to_tuple([X || <<X:E/binary>> <= Bin]).

apply_ops(T, V, Ops) ->
    lists:foldl(fun(Op, {TAcc, VAcc}) ->
                        case model_op(VAcc, Op) of
                            {skip, V1} -> {TAcc, V1};
                            {{transpose, D0, D1}, V1} -> {tensor_blob:transpose(TAcc, D0, D1), V1};
                            {{narrow, D, S, L}, V1} -> {tensor_blob:narrow(TAcc, D, S, L), V1}
                        end
                end, {T, V}, Ops).

%%====================================================================
%% Generators
%%====================================================================

gen_dtype() -> proper_types:elements(tensor_blob:dtypes()).

gen_dim() -> proper_types:frequency([{1, 0}, {3, 1}, {12, proper_types:range(2, 5)}]).

gen_shape() ->
    ?PLET(N, proper_types:range(0, 4), proper_types:vector(N, gen_dim())).

gen_nonempty_shape() ->
    ?PLET(N, proper_types:range(0, 4), proper_types:vector(N, proper_types:range(1, 5))).

%% Bytes valid for the dtype: 0/1 for bool, anything for the others.
gen_bytes(bool, N) -> ?PLET(L, proper_types:vector(N, proper_types:range(0, 1)), list_to_binary(L));
gen_bytes(D, N) -> proper_types:binary(N * esize(D)).

gen_tensor_data(DtypeGen, ShapeGen) ->
    ?PLET({D, Shape}, {DtypeGen, ShapeGen}, {D, Shape, gen_bytes(D, numel(Shape))}).

%% Up to 6 operations; one narrow in 8 has length 0.
gen_ops() ->
    Op = proper_types:oneof([{transpose, proper_types:range(0, 3), proper_types:range(0, 3)},
                             {narrow, proper_types:range(0, 3), proper_types:range(0, 5),
                              proper_types:frequency([{1, 0}, {7, proper_types:range(1, 5)}])}]),
    ?PLET(N, proper_types:range(0, 6), proper_types:vector(N, Op)).

%%====================================================================
%% 1. to_blob -> from_blob -> to_binary
%%====================================================================

prop_roundtrip(Dtypes) ->
    ?FORALL({{D, Shape, Bytes}, Ops, OpsAfter},
            {gen_tensor_data(proper_types:elements(Dtypes), gen_shape()), gen_ops(), gen_ops()},
            safely(fun() -> roundtrip(D, Shape, Bytes, Ops, OpsAfter) end)).

%% The dtypes the round trip covers: all of dtypes(), less complex128 while
%% copying it out crashes the VM (K1).
roundtrip_dtypes() ->
    case complex128_copies_crash() of
        true ->
            tensor_blob:dtypes() -- [complex128];
        false ->
            tensor_blob:dtypes()
    end.

roundtrip(D, Shape, Bytes, Ops, OpsAfter) ->
    E = esize(D),
    Elements = split_elements(Bytes, E),
    Source = tensor_blob:from_binary(Bytes, D, list_to_tuple(Shape)),
    Base = maps:get(ptr, tensor_blob:to_blob(Source)),
    {View, Model} = apply_ops(Source, base_view(Shape), Ops),
    Expected = model_bytes(Model, Elements),
    ModelShape = list_to_tuple(Model#view.shape),

    %% The view libtorch made is the view the model made.
    ?assertEqual(ModelShape, tensor_blob:shape(View)),
    ?assertEqual(Model#view.strides, tensor_blob:strides(View)),
    ?assertEqual(Expected, tensor_blob:to_binary(View)),

    Blob = tensor_blob:to_blob(View),
    #{ptr := Ptr, shape := ModelShape, strides := BlobStrides, dtype := D, device := cpu,
      element_size := E, byte_size := ByteSize, owner := View} = Blob,
    ?assertEqual(Model#view.strides, BlobStrides),
    ?assertEqual(model_extent(Model, E), ByteSize),
    case numel(Model#view.shape) of
        0 -> ok;
        _ -> ?assertEqual(Base + Model#view.offset * E, Ptr)
    end,

    %% Through the blob: the same memory, the same bytes, pinned.
    roundtrip_imported(Source, Blob, Model, Elements, OpsAfter, Expected).

roundtrip_imported(Source, Blob, Model, Elements, OpsAfter, Expected) ->
    #{ptr := Ptr, dtype := D, byte_size := ByteSize} = Blob,
    ModelShape = list_to_tuple(Model#view.shape),
    Imported = tensor_blob:from_blob(Blob),
    %% A view with elements shares the owner tensor's storage and answers as
    %% it does; an empty one pins the owner.
    #{owner := Owner} = Blob,
    ?assertEqual(case ByteSize of 0 -> pinned; _ -> tensor_blob:memory(Owner) end,
                 tensor_blob:memory(Imported)),
    ?assertEqual(ModelShape, tensor_blob:shape(Imported)),
    ?assertEqual(Model#view.strides, tensor_blob:strides(Imported)),
    ?assertEqual(D, tensor_blob:dtype(Imported)),
    ?assertEqual(Expected, tensor_blob:to_binary(Imported)),
    case ByteSize of
        0 -> ok;
        _ -> ?assertEqual(Ptr, maps:get(ptr, tensor_blob:to_blob(Imported)))
    end,

    %% With the owner given as an option, and as a bare map without one.
    Imported2 = tensor_blob:from_blob(maps:remove(owner, Blob), #{owner => Source}),
    ?assertEqual(Expected, tensor_blob:to_binary(Imported2)),
    Unpinned = tensor_blob:from_blob(Blob#{owner => none}),
    ?assertEqual(unpinned, tensor_blob:memory(Unpinned)),
    ?assertEqual(Expected, tensor_blob:to_binary(Unpinned)),

    %% Views of the imported tensor follow the model too, and answer as it.
    {After, ModelAfter} = apply_ops(Imported, Model, OpsAfter),
    ?assertEqual(model_bytes(ModelAfter, Elements), tensor_blob:to_binary(After)),
    ?assertEqual(tensor_blob:memory(Imported), tensor_blob:memory(After)),
    true.

%%====================================================================
%% 1b. to_dlpack -> from_dlpack -> to_binary
%%====================================================================

gen_dlpack_route() ->
    proper_types:elements([{capsule, versioned}, {capsule, legacy}, {address, versioned}, {address, legacy}]).

prop_dlpack_roundtrip(Dtypes) ->
    ?FORALL({{D, Shape, Bytes}, Ops, OpsAfter, Route},
            {gen_tensor_data(proper_types:elements(Dtypes), gen_shape()), gen_ops(), gen_ops(), gen_dlpack_route()},
            safely(fun() -> dlpack_roundtrip(D, Shape, Bytes, Ops, OpsAfter, Route) end)).

dlpack_roundtrip(D, Shape, Bytes, Ops, OpsAfter, {How, Version}) ->
    E = esize(D),
    Elements = split_elements(Bytes, E),
    Source = tensor_blob:from_binary(Bytes, D, list_to_tuple(Shape)),
    {View, Model} = apply_ops(Source, base_view(Shape), Ops),
    Expected = model_bytes(Model, Elements),
    ModelShape = list_to_tuple(Model#view.shape),
    Capsule = tensor_blob:to_dlpack(View, #{version => Version}),
    ?assertEqual(Version, tensor_blob:dlpack_version(Capsule)),
    Imported = case How of
                   capsule -> tensor_blob:from_dlpack(Capsule, #{});
                   address -> tensor_blob:from_dlpack(tensor_blob:consume_dlpack(Capsule), #{version => Version})
               end,
    %% The import is consumed: a capsule cannot be imported twice.
    ?assertError({badarg, _}, tensor_blob:from_dlpack(Capsule)),
    ?assertEqual(ModelShape, tensor_blob:shape(Imported)),
    ?assertEqual(D, tensor_blob:dtype(Imported)),
    ?assertEqual(Expected, tensor_blob:to_binary(Imported)),
    case numel(Model#view.shape) of
        0 ->
            ok;
        _ ->
            %% Zero-copy, and the strides that reach the elements (a
            %% dimension of size 1 may carry any stride).
            ?assertEqual(maps:get(ptr, tensor_blob:to_blob(View)), maps:get(ptr, tensor_blob:to_blob(Imported))),
            [?assertEqual(S, S2) || {N, S, S2} <- lists:zip3(Model#view.shape, Model#view.strides,
                                                             tensor_blob:strides(Imported)), N > 1]
    end,
    %% Views of the imported tensor follow the model too.
    {After, ModelAfter} = apply_ops(Imported, Model, OpsAfter),
    ?assertEqual(model_bytes(ModelAfter, Elements), tensor_blob:to_binary(After)),
    true.

%%====================================================================
%% Regression tests of the known issues (they fail until fixed)
%%====================================================================

%% K1: copying complex128 elements out of (to_binary) and into (write) a
%% tensor must not crash the VM, whatever the binary's alignment.
k1_complex128_copies_do_not_crash_test_() ->
    {timeout, 60, fun() -> ?assertEqual(false, complex128_copies_crash()) end}.

%% K2: the round trip of zero-element views past the end of the storage.
k2_empty_view_past_end_roundtrip_test() ->
    T = tensor_blob:from_binary(<<1, 2, 3, 4, 5, 6>>, uint8, {2, 3}),
    V = tensor_blob:narrow(tensor_blob:narrow(T, 1, 3, 0), 0, 2, 0),
    ?assertEqual({0, 0}, tensor_blob:shape(tensor_blob:from_blob(tensor_blob:to_blob(V)))),
    E = tensor_blob:from_binary(<<>>, float32, {3, 0}),
    W = tensor_blob:narrow(E, 0, 3, 0),
    ?assertEqual({0, 0}, tensor_blob:shape(tensor_blob:from_blob(tensor_blob:to_blob(W)))).

%% Runs to_binary and write on complex128 tensors of 1..17 elements, many
%% times (binaries land at different alignments), in a child VM: true when
%% that VM crashes. Memoised for the VM's life: the probe takes a second.
complex128_copies_crash() ->
    Key = {?MODULE, complex128_copies_crash},
    case persistent_term:get(Key, undefined) of
        undefined ->
            Crashes = probe_complex128_copies(),
            persistent_term:put(Key, Crashes),
            Crashes;
        Crashes ->
            Crashes
    end.

probe_complex128_copies() ->
    case lists:member(complex128, tensor_blob:dtypes()) of
        false ->
            false;
        true ->
            Erl = filename:join([code:root_dir(), "bin", "erl"]),
            Dirs = lists:usort([filename:dirname(code:which(M)) || M <- [tensor_blob, tensor_blob_nif]]),
            Code = "[begin T = tensor_blob:zeros({N}, complex128),"
                   "       _ = [tensor_blob:to_binary(T) || _ <- lists:seq(1, 20)],"
                   "       _ = [tensor_blob:write(T, binary:copy(<<I>>, N * 16)) || I <- lists:seq(1, 20)]"
                   " end || N <- lists:seq(1, 17)], halt(0).",
            Port = open_port({spawn_executable, Erl},
                             [{args, ["-noshell", "-pa" | Dirs] ++ ["-eval", Code]},
                              exit_status, stderr_to_stdout, binary]),
            {Status, Output} = tensor_blob_test_util:wait_port(Port, 50000),
            case Status of
                0 ->
                    false;
                _ when is_integer(Status), Status > 128 ->
                    %% Killed by a signal (128 + N): the crash.
                    io:format(user, "~n*** tensor_blob_prop_tests: to_binary/write of complex128 crash the VM "
                              "(known issue K1): the child VM exited with status ~p~n~ts~n"
                              "*** complex128 is left out of the round-trip properties~n", [Status, Output]),
                    true;
                _ ->
                    %% Not a crash: the probe itself could not run.
                    erlang:error({complex128_probe_failed, Status, Output})
            end
    end.

%%====================================================================
%% 2. Malformed specs
%%====================================================================

%% Values that are not what a field takes.
gen_not_integer() ->
    proper_types:elements([1.0, -0.0, foo, <<"1">>, "1", [1], {1}, #{}, 1.0e300]).

gen_bad_ptr() ->
    proper_types:oneof([gen_not_integer(), proper_types:elements([-1, -4096, 1 bsl 64, (1 bsl 64) + 4096, 1 bsl 200])]).

gen_bad_dim() ->
    proper_types:oneof([gen_not_integer(), proper_types:elements([-1, -5, 1 bsl 63, 1 bsl 64, -(1 bsl 63) - 1])]).

gen_unknown_dtype() ->
    proper_types:oneof([proper_types:elements([float31, 'Float32', f31, int128, complex16, c32, bfloat8, '', 'float32 ',
                                               nil, undefined, float32e, "float32", <<"float32">>, 32, 1.5,
                                               {f, 31}, {f, -32}, {f, 1 bsl 70}, {q, 8}, {u, 8, 1}, {"f", 32},
                                               {f8_e5m2, 8}, {f}, [f, 32]]),
                        ?PLET(S, proper_types:non_empty(proper_types:list(proper_types:range($a, $z))),
                              list_to_atom("zz_" ++ S))]).

%% A mutation, with the dtype and shape of the valid source it applies to.
%% Fields: the fields an error may lead with (the first check to fail).
gen_malformed() ->
    Any = gen_tensor_data(gen_dtype(), gen_shape()),
    NonEmpty = gen_tensor_data(gen_dtype(), gen_nonempty_shape()),
    Wide = gen_tensor_data(proper_types:elements([D || D <- tensor_blob:dtypes(), esize(D) > 1]),
                           gen_shape()),
    Pos = proper_types:range(0, 3),
    proper_types:oneof(
      [{Any, {negative_dim, Pos, proper_types:range(-(1 bsl 62), -1)}},
       {Any, {strides_length, proper_types:elements([extra, drop])}},
       {NonEmpty, null_ptr},
       {Wide, {misaligned, proper_types:range(1, 15)}},
       {Any, {dtype, gen_unknown_dtype()}},
       {Any, {ptr, gen_bad_ptr()}},
       {Any, {shape_elem, Pos, gen_bad_dim()}},
       {Any, {stride_elem, Pos, gen_bad_dim()}},
       {Any, {shape, proper_types:elements([[1, 2], foo, 3, <<>>, "ab", #{}, 1.0])}},
       {Any, {strides, proper_types:elements([foo, 3, {1}, <<>>, [1 | 2], #{}, 1.0, true])}},
       {Any, {device, proper_types:elements([gpu, cuda, {cuda, -1}, {cuda, 1.0}, {cuda, 1 bsl 40}, {cuda, 1024},
                                             {cpu, 0}, {cuda, 0, 0}, "cpu", 0])}},
       {Any, {huge_dim, Pos, proper_types:elements([1 bsl 62, (1 bsl 63) - 1, 1 bsl 32, (1 bsl 61) + 1])}},
       {Any, {huge_stride, Pos, proper_types:elements([1 bsl 62, (1 bsl 63) - 1, 1 bsl 40])}},
       {Any, {too_many_dims, proper_types:range(65, 70)}},
       {Any, {missing, proper_types:elements([ptr, shape, dtype])}},
       {Any, {not_a_map, proper_types:elements([[], foo, {ptr, 0}, 0, <<>>])}},
       {Any, {bad_options, proper_types:elements([[owner], foo, #{bogus => 1}, #{owner => x, bogus => 1}])}},
       {NonEmpty, {outside, proper_types:elements([after_end, before, grow])}},
       %% An extent of 0 bytes lies inside any owner: only sources with
       %% elements can lie outside one.
       {NonEmpty, {outside_binary, proper_types:binary()}},
       {NonEmpty, outside_other_tensor}]).

prop_malformed() ->
    ?FORALL({{D, Shape, Bytes}, Mutation}, gen_malformed(), malformed(D, Shape, Bytes, Mutation)).

malformed(D, Shape, Bytes, Mutation) ->
    %% Each case runs in a process of its own, so that no garbage of this
    %% process (kept alive a while by PropEr's state or by the stack trace
    %% of the last exception) is collected during the call.
    {Pid, Ref} = spawn_monitor(fun() -> exit({done, malformed_case(D, Shape, Bytes, Mutation)}) end),
    Outcome = receive
                  {'DOWN', Ref, process, Pid, {done, O}} -> O;
                  {'DOWN', Ref, process, Pid, Other} -> {case_crashed, Other}
              end,
    case Outcome of
        skip ->
            true;
        {Fields, Blob, Result, Before, After} ->
            Ok = case Result of
                     {error, {badarg, Msg}} when is_binary(Msg) ->
                         lists:any(fun(F) -> leads_with(F, Msg) end, Fields) andalso
                             %% A refused spec adds no tensor and no pin. (Not
                             %% an exact check: destructors of earlier cases
                             %% run late and may lower the counts meanwhile;
                             %% no_leaks_test_ checks the totals exactly.)
                             not_above(After, Before);
                     _ ->
                         false
                 end,
            ?WHENFAIL(io:format(user, "~nmutation ~0tp of ~0tp~ngave ~0tp~nstats ~0tp -> ~0tp~n",
                                [Mutation, Blob, Result, Before, After]),
                      Ok);
        _ ->
            ?WHENFAIL(io:format(user, "~nmutation ~0tp: ~0tp~n", [Mutation, Outcome]), false)
    end.

malformed_case(D, Shape, Bytes, Mutation) ->
    Source = tensor_blob:from_binary(Bytes, D, list_to_tuple(Shape)),
    Blob = tensor_blob:to_blob(Source),
    case mutate(Blob, Mutation) of
        skip ->
            skip;
        {Call, Fields} ->
            erlang:garbage_collect(),
            Before = tensor_blob:stats(),
            Result = try Call() of
                         Returned -> {returned, Returned}
                     catch
                         Class:Reason -> {Class, Reason}
                     end,
            erlang:garbage_collect(),
            After = tensor_blob:stats(),
            %% Source is still alive here: Blob names it.
            {Fields, Blob, Result, Before, After}
    end.

not_above(After, Before) ->
    lists:all(fun({K, V}) -> V =< maps:get(K, Before) end, maps:to_list(After)).

leads_with(Field, Msg) ->
    Prefix = <<(atom_to_binary(Field, utf8))/binary, ":">>,
    binary:longest_common_prefix([Prefix, Msg]) =:= byte_size(Prefix).

%% {fun() -> the call end, the fields its error may lead with}, or skip
%% when the mutation does not apply to this source.
mutate(Blob, Mutation) ->
    #{shape := ShapeT, strides := Strides, ptr := Ptr, element_size := E, byte_size := Size} = Blob,
    Shape = tuple_to_list(ShapeT),
    N = length(Shape),
    Put = fun(Changes, Fields) -> {fun() -> tensor_blob:from_blob(maps:merge(Blob, Changes)) end, Fields} end,
    case Mutation of
        {negative_dim, _, Neg} when N =:= 0 ->
            Put(#{shape => {Neg}, strides => [1]}, [shape]);
        {negative_dim, P, Neg} ->
            Put(#{shape => list_to_tuple(set_nth(Shape, P rem N, Neg))}, [shape]);
        {strides_length, extra} ->
            Put(#{strides => Strides ++ [1]}, [strides]);
        {strides_length, drop} when N =:= 0 ->
            Put(#{strides => [1]}, [strides]);
        {strides_length, drop} ->
            Put(#{strides => tl(Strides)}, [strides]);
        null_ptr ->
            Put(#{ptr => 0}, [ptr]);
        {misaligned, K} ->
            Put(#{ptr => Ptr + 1 + K rem (E - 1)}, [ptr]);
        {dtype, Bad} ->
            Put(#{dtype => Bad}, [dtype]);
        {ptr, Bad} ->
            Put(#{ptr => Bad}, [ptr]);
        {shape_elem, _, Bad} when N =:= 0 ->
            Put(#{shape => {Bad}, strides => [1]}, [shape]);
        {shape_elem, P, Bad} ->
            Put(#{shape => list_to_tuple(set_nth(Shape, P rem N, Bad))}, [shape]);
        {stride_elem, _, Bad} when N =:= 0 ->
            Put(#{strides => [Bad]}, [strides]);
        {stride_elem, P, Bad} ->
            Put(#{strides => set_nth(Strides, P rem N, Bad)}, [strides]);
        {shape, Bad} ->
            Put(#{shape => Bad}, [shape]);
        {strides, Bad} ->
            Put(#{strides => Bad}, [strides]);
        {device, Bad} ->
            Put(#{device => Bad}, [device]);
        {huge_dim, _, Huge} when N =:= 0 ->
            %% One huge dimension next to a real one: the element count
            %% overflows, or the extent does, or it leaves the owner.
            Put(#{shape => {Huge, 3}, strides => [3, 1]}, [shape, strides, ptr]);
        {huge_dim, P, Huge} ->
            Huged = set_nth(Shape, P rem N, Huge),
            case lists:member(0, Huged) andalso numel([X || X <- Huged, X > 0]) < 1 bsl 63 of
                true -> skip; % still no elements, and a count that fits: valid
                false -> Put(#{shape => list_to_tuple(Huged)}, [shape, strides, ptr])
            end;
        {huge_stride, P, Huge} when N > 0 ->
            I = P rem N,
            case lists:nth(I + 1, Shape) > 1 andalso lists:all(fun(X) -> X > 0 end, Shape) of
                true -> Put(#{strides => set_nth(Strides, I, Huge)}, [strides, ptr]);
                false -> skip % no element reaches the stride: nothing wrong
            end;
        {huge_stride, _, _} ->
            skip;
        {too_many_dims, M} ->
            Put(#{shape => list_to_tuple(lists:duplicate(M, 1)), strides => lists:duplicate(M, 1)}, [shape]);
        {missing, Key} ->
            {fun() -> tensor_blob:from_blob(maps:remove(Key, Blob)) end, [Key]};
        {not_a_map, Bad} ->
            {fun() -> tensor_blob:from_blob(Bad) end, [spec]};
        {bad_options, Bad} ->
            {fun() -> tensor_blob:from_blob(Blob, Bad) end, [options, bogus]};
        {outside, after_end} ->
            Put(#{ptr => Ptr + Size + E}, [ptr]);
        {outside, before} ->
            Put(#{ptr => Ptr - E}, [ptr]);
        {outside, grow} when N =:= 0 ->
            Put(#{shape => {2}, strides => [1]}, [ptr]);
        {outside, grow} ->
            Grown = [X + 1 || X <- Shape],
            Put(#{shape => list_to_tuple(Grown), strides => row_major(Grown)}, [ptr]);
        {outside_binary, Bin} ->
            {fun() -> tensor_blob:from_blob(Blob, #{owner => Bin}) end, [ptr]};
        outside_other_tensor ->
            Other = tensor_blob:from_binary(<<0:64>>, uint8, {8}),
            {fun() -> tensor_blob:from_blob(Blob, #{owner => Other}) end, [ptr]}
    end.

%%====================================================================
%% Leak checks
%%====================================================================

