%% EUnit tests of binary views (from_binary/4, to_binary/2 with
%% #{copy => false}) and of the C bridge, with the foreign NIF library of
%% test/support (its own allocator and deleters, no libtorch).
-module(tensor_blob_bridge_tests).

-import(tensor_blob_test_util, [run_isolated/1, gc_all/0, settled_stats/0, wait_for_stats/1]).

-include_lib("eunit/include/eunit.hrl").

f32s(List) -> << <<X:32/float-native>> || X <- List >>.

payload() -> f32s([X * 0.5 || X <- lists:seq(1, 256)]).

ptr(T) -> maps:get(ptr, tensor_blob:to_blob(T)).

badarg(Word, Fun) ->
    try Fun() of
        Result -> erlang:error({expected_badarg, Result})
    catch
        error:{badarg, Msg} -> ?assertNotEqual(nomatch, binary:match(Msg, Word))
    end.

%% A process that holds Term until told to drop it.
holder(Term) ->
    Parent = self(),
    spawn(fun() -> Parent ! {held, self()}, receive drop -> Term end end).

%%====================================================================
%% Binary views
%%====================================================================

binary_view_is_zero_copy_both_ways_test() ->
    T = tensor_blob:from_binary(payload(), float32, {16, 16}),
    Bin = tensor_blob:to_binary(T, #{copy => false}),
    ?assertEqual(payload(), Bin),
    V = tensor_blob:from_binary(Bin, float32, {256}, #{copy => false}),
    ?assertEqual(ptr(T), ptr(V)),
    ?assertEqual(binary, tensor_blob:memory(V)),
    ?assertEqual(payload(), tensor_blob:to_binary(V, #{copy => true})).

binary_view_is_read_only_test() ->
    V = tensor_blob:from_binary(payload(), float32, {16, 16}, #{copy => false}),
    badarg(<<"read-only">>, fun() -> tensor_blob:write(V, payload()) end),
    badarg(<<"read-only">>, fun() -> tensor_blob:write(tensor_blob:narrow(V, 0, 0, 1), f32s(lists:seq(1, 16))) end),
    Small = tensor_blob:from_binary(f32s([1, 2]), float32, {2}, #{copy => false}),
    badarg(<<"read-only">>, fun() -> tensor_blob:write(Small, f32s([3, 4])) end).

misaligned_binary_is_refused_test() ->
    Big = binary:copy(<<7>>, 1000),
    Part = binary:part(Big, 2, 400),
    badarg(<<"aligned to 2 bytes">>, fun() -> tensor_blob:from_binary(Part, float32, {100}, #{copy => false}) end),
    %% Right after the refusal: the runtime may later hand out Part's bytes
    %% from an aligned place (seen after Part is compared below).
    Copied = tensor_blob:from_binary(Part, float32, {100}, #{copy => if_needed}),
    ?assertEqual(owned, tensor_blob:memory(Copied)),
    ?assertEqual(Part, tensor_blob:to_binary(tensor_blob:from_binary(Part, float32, {100}, #{copy => true}))),
    ?assertEqual(Part, tensor_blob:to_binary(Copied)),
    Aligned = binary:part(Big, 8, 400),
    ?assertEqual(binary, tensor_blob:memory(tensor_blob:from_binary(Aligned, float32, {100}, #{copy => if_needed}))).

binary_view_option_errors_test() ->
    T = tensor_blob:zeros({2, 3}, float32),
    badarg(<<"not contiguous">>, fun() -> tensor_blob:to_binary(tensor_blob:transpose(T, 0, 1), #{copy => false}) end),
    badarg(<<"copy">>, fun() -> tensor_blob:to_binary(T, #{copy => yes}) end),
    badarg(<<"options">>, fun() -> tensor_blob:to_binary(T, [{copy, false}]) end).

%% Only a slice of the view kept: the binary stays pinned, the bytes intact.
binary_pinned_until_last_slice_test() ->
    Start = settled_stats(),
    Self = self(),
    run_isolated(fun() ->
                         V = tensor_blob:from_binary(payload(), float32, {16, 16}, #{copy => false}),
                         Self ! {slice, tensor_blob:narrow(V, 0, 15, 1)}
                 end),
    Slice = receive {slice, S} -> S end,
    gc_all(),
    ?assertEqual(maps:get(pins, Start) + 1, maps:get(pins, settled_stats())),
    ?assertEqual(binary:part(payload(), 15 * 64, 64), tensor_blob:to_binary(Slice)),
    Holder = holder(Slice),
    receive {held, Holder} -> ok end,
    Holder ! drop,
    wait_for_stats(Start).

%% write/2 is refused while a binary view overlaps, allowed once collected.
write_refused_while_binary_lives_test() ->
    T = tensor_blob:from_binary(payload(), float32, {16, 16}),
    run_isolated(fun() ->
                         Bin = tensor_blob:to_binary(tensor_blob:narrow(T, 0, 4, 4), #{copy => false}),
                         badarg(<<"immutable">>, fun() -> tensor_blob:write(T, payload()) end),
                         _ = tensor_blob:write(tensor_blob:narrow(T, 0, 0, 1), f32s(lists:seq(1, 16))),
                         ?assertEqual(binary:part(payload(), 4 * 64, 4 * 64), Bin)
                 end),
    _ = settled_stats(),
    ?assertEqual(T, tensor_blob:write(T, payload())).

%%====================================================================
%% The foreign NIF: DLPack both ways and the bridge header
%%====================================================================

foreign_produce_import_exactly_once_test() ->
    {_, Freed0} = foreign_tensor_nif:counters(),
    Self = self(),
    run_isolated(fun() ->
                         T = tensor_blob:from_dlpack(foreign_tensor_nif:produce(payload(), versioned), #{unsafe_address => true}),
                         ?assertEqual(payload(), tensor_blob:to_binary(T)),
                         Self ! {slice, tensor_blob:narrow(T, 0, 0, 4)}
                 end),
    Slice = receive {slice, S} -> S end,
    _ = settled_stats(),
    ?assertMatch({_, Freed0}, foreign_tensor_nif:counters()),
    ?assertEqual(binary:part(payload(), 0, 16), tensor_blob:to_binary(Slice)),
    Holder = holder(Slice),
    receive {held, Holder} -> ok end,
    Holder ! drop,
    wait_for_freed(Freed0 + 1, 200),
    _ = settled_stats(),
    ?assertMatch({_, N} when N =:= Freed0 + 1, foreign_tensor_nif:counters()).

wait_for_freed(Expected, Tries) ->
    Probe = fun() -> gc_all(), {_, Freed} = Counters = foreign_tensor_nif:counters(), {Freed =:= Expected, Counters} end,
    {_, Counters} = tensor_blob_test_util:poll(Probe, Tries, 10),
    ?assertMatch({_, Expected}, Counters).

foreign_consumes_our_export_after_we_drop_test() ->
    Start = settled_stats(),
    Self = self(),
    run_isolated(fun() ->
                         T = tensor_blob:from_binary(payload(), float32, {256}),
                         Self ! {address, tensor_blob:consume_dlpack(tensor_blob:to_dlpack(T))}
                 end),
    Address = receive {address, A} -> A end,
    ?assertEqual(maps:get(capsules, Start) + 1, maps:get(capsules, settled_stats())),
    ?assertEqual({payload(), [256], false}, foreign_tensor_nif:read(Address)),
    ok = foreign_tensor_nif:release(Address),
    wait_for_stats(Start).

bridge_take_read_release_test() ->
    Start = settled_stats(),
    Self = self(),
    run_isolated(fun() ->
                         T = tensor_blob:from_binary(payload(), float32, {16, 16}),
                         {ok, Address} = foreign_tensor_nif:take(tensor_blob:transpose(T, 0, 1), false),
                         Self ! {address, Address, tensor_blob:to_binary(tensor_blob:transpose(T, 0, 1))}
                 end),
    {Address, Expected} = receive {address, A, E} -> {A, E} end,
    ?assertEqual(maps:get(tensors, Start), maps:get(tensors, settled_stats())),
    ?assertEqual({Expected, [16, 16], false}, foreign_tensor_nif:read(Address)),
    ok = foreign_tensor_nif:release(Address),
    wait_for_stats(Start).

%% The export outlives its term, and its deleter runs on a thread the VM
%% never saw; a consumer built against the first header does the same.
bridge_released_on_another_thread_test() ->
    lists:foreach(
      fun(Consumer) ->
              Start = settled_stats(),
              Self = self(),
              run_isolated(fun() ->
                                   T = tensor_blob:from_binary(payload(), float32, {256}),
                                   {ok, Address} = Consumer:take(T, false),
                                   Self ! {address, Address}
                           end),
              Address = receive {address, A} -> A end,
              ?assertEqual(maps:get(tensors, Start), maps:get(tensors, settled_stats())),
              ?assertEqual({payload(), [256], false}, Consumer:read(Address)),
              ok = Consumer:release_on_thread(Address),
              wait_for_stats(Start)
      end, [foreign_tensor_nif, foreign_tensor_nif_v1]).

bridge_refusals_test() ->
    ?assertEqual({error, 1}, foreign_tensor_nif:take(not_a_tensor, false)),
    ?assertEqual({2, none}, foreign_tensor_nif:take_with_version(tensor_blob:zeros({1}, float32), 7)),
    V = tensor_blob:from_binary(payload(), float32, {256}, #{copy => false}),
    {ok, Address} = foreign_tensor_nif:take(V, false),
    ?assertMatch({_, [256], true}, foreign_tensor_nif:read(Address)),
    ok = foreign_tensor_nif:release(Address).
