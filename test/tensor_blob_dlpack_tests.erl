%% EUnit tests of the DLPack part of the Erlang API: to_dlpack/1,2,
%% from_dlpack/1,2, consume_dlpack/1, dlpack_version/1.
%%
%% Tensors are made inside the test functions, never in generators, so that
%% EUnit's own processes hold no references and the stats/0 checks see only
%% what a test made.
-module(tensor_blob_dlpack_tests).

-import(tensor_blob_test_util, [wait_for_stats/1, gc_all/0, settled_stats/0]).

-include_lib("eunit/include/eunit.hrl").

%%====================================================================
%% Helpers
%%====================================================================

f32s(List) -> << <<X:32/float-native>> || X <- List >>.

t46() -> tensor_blob:from_binary(f32s(lists:seq(1, 24)), float32, {4, 6}).

ptr(T) -> maps:get(ptr, tensor_blob:to_blob(T)).

%% error({badarg, Msg}) with Msg leading with "Field:" and containing Word.
badarg(Field, Word, Fun) ->
    try Fun() of
        Result -> erlang:error({expected_badarg, Result})
    catch
        error:{badarg, Msg} ->
            ?assertMatch({0, _}, binary:match(Msg, <<Field/binary, ":">>)),
            ?assertNotEqual(nomatch, binary:match(Msg, Word)),
            Msg
    end.

tensor_blob_error(Word, Fun) ->
    try Fun() of
        Result -> erlang:error({expected_tensor_blob_error, Result})
    catch
        error:{tensor_blob, Msg} ->
            ?assertNotEqual(nomatch, binary:match(Msg, Word)),
            Msg
    end.


%% Runs Fun in a process that exits; returns its result.
isolated(Fun) ->
    Parent = self(),
    {Pid, Ref} = spawn_monitor(fun() -> Parent ! {self(), Fun()} end),
    receive
        {Pid, Result} ->
            receive {'DOWN', Ref, process, Pid, _} -> Result end;
        {'DOWN', Ref, process, Pid, Reason} ->
            erlang:error({isolated_process_failed, Reason})
    end.

%%====================================================================
%% Round trips
%%====================================================================

round_trip_every_dtype_test() ->
    lists:foreach(
      fun(D) ->
              Size = maps:get(element_size, tensor_blob:to_blob(tensor_blob:zeros({1}, D))),
              Bytes = << <<(I rem 2)>> || I <- lists:seq(1, 6 * Size) >>,
              T = tensor_blob:from_binary(Bytes, D, {2, 3}),
              lists:foreach(
                fun(V) ->
                        C = tensor_blob:to_dlpack(T, #{version => V}),
                        ?assertEqual(V, tensor_blob:dlpack_version(C)),
                        U = tensor_blob:from_dlpack(C),
                        ?assertEqual(Bytes, tensor_blob:to_binary(U)),
                        ?assertEqual(ptr(T), ptr(U)),
                        ?assertEqual(D, tensor_blob:dtype(U)),
                        ?assertEqual([3, 1], tensor_blob:strides(U)),
                        %% Our own capsule: the import shares T's storage.
                        ?assertEqual(tensor_blob:memory(T), tensor_blob:memory(U)),
                        %% By address it is read as any producer's export.
                        A = tensor_blob:consume_dlpack(tensor_blob:to_dlpack(T, #{version => V})),
                        W = tensor_blob:from_dlpack(A, #{version => V}),
                        ?assertEqual(Bytes, tensor_blob:to_binary(W)),
                        ?assertEqual(ptr(T), ptr(W)),
                        ?assertEqual(D, tensor_blob:dtype(W)),
                        ?assertEqual(dlpack, tensor_blob:memory(W))
                end, [versioned, legacy])
      end, tensor_blob:dtypes()).

strided_views_keep_strides_and_pointer_test() ->
    T = t46(),
    View = tensor_blob:transpose(tensor_blob:narrow(T, 1, 1, 4), 0, 1),
    lists:foreach(
      fun(V) ->
              U = tensor_blob:from_dlpack(tensor_blob:to_dlpack(View, #{version => V})),
              ?assertEqual({4, 4}, tensor_blob:shape(U)),
              ?assertEqual([1, 6], tensor_blob:strides(U)),
              ?assertEqual(ptr(T) + 4, ptr(U)),
              ?assertEqual(tensor_blob:to_binary(View), tensor_blob:to_binary(U))
      end, [versioned, legacy]).

address_round_trip_test() ->
    T = t46(),
    A = tensor_blob:consume_dlpack(tensor_blob:to_dlpack(T)),
    ?assert(is_integer(A) andalso A > 0),
    ?assertEqual(f32s(lists:seq(1, 24)), tensor_blob:to_binary(tensor_blob:from_dlpack(A))),
    L = tensor_blob:consume_dlpack(tensor_blob:to_dlpack(T, #{version => legacy})),
    U = tensor_blob:from_dlpack(L, #{version => legacy}),
    ?assertEqual(ptr(T), ptr(U)).

%%====================================================================
%% Capsules
%%====================================================================

consume_twice_test() ->
    C = tensor_blob:to_dlpack(t46()),
    A = tensor_blob:consume_dlpack(C),
    badarg(<<"capsule">>, <<"already consumed">>, fun() -> tensor_blob:consume_dlpack(C) end),
    badarg(<<"capsule">>, <<"already consumed">>, fun() -> tensor_blob:from_dlpack(C) end),
    _ = tensor_blob:from_dlpack(A).

import_consumes_test() ->
    C = tensor_blob:to_dlpack(t46()),
    _ = tensor_blob:from_dlpack(C),
    badarg(<<"capsule">>, <<"already consumed">>, fun() -> tensor_blob:from_dlpack(C) end).

stats_return_to_start_test_() ->
    {timeout, 60, fun stats_return_to_start/0}.

stats_return_to_start() ->
    Start = settled_stats(),
    #{capsules := C0} = Start,
    isolated(fun() ->
                     T = t46(),
                     %% Held until the count is read: a garbage collection
                     %% may free capsules no longer referenced at any time.
                     Exported = [tensor_blob:to_dlpack(T) || _ <- lists:seq(1, 100)],
                     Kept = [tensor_blob:from_dlpack(tensor_blob:to_dlpack(T, #{version => legacy}))
                             || _ <- lists:seq(1, 100)],
                     ?assert(maps:get(capsules, tensor_blob:stats()) >= C0 + 100),
                     length(Exported) + length(Kept)
             end),
    wait_for_stats(Start).

lifetime_across_processes_test_() ->
    {timeout, 60, fun lifetime_across_processes/0}.

lifetime_across_processes() ->
    Start = settled_stats(),
    Bytes = << <<I:32/native>> || I <- lists:seq(0, 4095) >>,
    C = isolated(fun() ->
                         T = tensor_blob:from_binary(Bytes, int32, {64, 64}),
                         tensor_blob:to_dlpack(tensor_blob:narrow(T, 0, 10, 2))
                 end),
    A = isolated(fun() ->
                         T = tensor_blob:from_binary(Bytes, int32, {64, 64}),
                         tensor_blob:consume_dlpack(tensor_blob:to_dlpack(T, #{version => legacy}))
                 end),
    _ = [tensor_blob:zeros({64, 64}, float32) || _ <- lists:seq(1, 100)],
    gc_all(),
    U = isolated(fun() -> tensor_blob:from_dlpack(C) end),
    W = tensor_blob:from_dlpack(A, #{version => legacy}),
    gc_all(),
    ?assertEqual(binary:part(Bytes, 10 * 64 * 4, 2 * 64 * 4), tensor_blob:to_binary(U)),
    ?assertEqual(Bytes, tensor_blob:to_binary(W)),
    %% U and W are the last users: once they are collected, every export's
    %% deleter has run.
    wait_for_stats(Start).

concurrent_consumers_test() ->
    C = tensor_blob:to_dlpack(t46()),
    Self = self(),
    Pids = [spawn(fun() ->
                          R = try tensor_blob:from_dlpack(C) of
                                  U -> {ok, tensor_blob:shape(U)}
                              catch
                                  error:{badarg, _} -> refused
                              end,
                          Self ! {self(), R}
                  end) || _ <- lists:seq(1, 8)],
    Results = [receive {P, R} -> R end || P <- Pids],
    ?assertEqual(1, length([ok || {ok, {4, 6}} <- Results])),
    ?assertEqual(7, length([r || refused <- Results])).

%%====================================================================
%% Options
%%====================================================================

max_version_test() ->
    T = t46(),
    V = fun(Opts) -> tensor_blob:dlpack_version(tensor_blob:to_dlpack(T, Opts)) end,
    ?assertEqual(versioned, tensor_blob:dlpack_version(tensor_blob:to_dlpack(T))),
    ?assertEqual(versioned, V(#{})),
    ?assertEqual(versioned, V(#{max_version => {1, 0}})),
    ?assertEqual(versioned, V(#{max_version => {1, 3}})),
    ?assertEqual(versioned, V(#{max_version => {1, 42}})),
    ?assertEqual(legacy, V(#{max_version => {0, 8}})),
    ?assertEqual(legacy, V(#{max_version => legacy})),
    ?assertEqual(legacy, V(#{version => legacy})),
    ?assertEqual(legacy, V(#{version => legacy, max_version => {0, 6}})),
    tensor_blob_error(<<"max_version">>, fun() -> V(#{max_version => {2, 0}}) end),
    badarg(<<"max_version">>, <<"-1">>, fun() -> V(#{max_version => {-1, 0}}) end),
    badarg(<<"max_version">>, <<"1.0">>, fun() -> V(#{max_version => <<"1.0">>}) end),
    badarg(<<"version">>, <<"contradicts">>, fun() -> V(#{version => versioned, max_version => {0, 8}}) end),
    badarg(<<"version">>, <<"v3">>, fun() -> V(#{version => v3}) end),
    badarg(<<"read_only">>, <<"yes">>, fun() -> V(#{read_only => yes}) end),
    badarg(<<"read_only">>, <<"legacy">>, fun() -> V(#{read_only => true, version => legacy}) end),
    badarg(<<"bogus">>, <<"unknown option">>, fun() -> V(#{bogus => 1}) end),
    badarg(<<"options">>, <<"map">>, fun() -> tensor_blob:to_dlpack(T, [read_only]) end),
    badarg(<<"tensor">>, <<"nope">>, fun() -> tensor_blob:to_dlpack(nope) end).

read_only_test() ->
    T = t46(),
    Bytes = tensor_blob:to_binary(T),
    U = tensor_blob:from_dlpack(tensor_blob:to_dlpack(T, #{read_only => true})),
    badarg(<<"tensor">>, <<"read-only">>, fun() -> tensor_blob:write(U, Bytes) end),
    Row = tensor_blob:narrow(U, 0, 0, 1),
    badarg(<<"tensor">>, <<"read-only">>, fun() -> tensor_blob:write(Row, binary:part(Bytes, 0, 24)) end),
    %% Re-exported: read-only again, and never legacy.
    Again = tensor_blob:from_dlpack(tensor_blob:to_dlpack(U)),
    badarg(<<"tensor">>, <<"read-only">>, fun() -> tensor_blob:write(Again, Bytes) end),
    badarg(<<"version">>, <<"read-only">>, fun() -> tensor_blob:to_dlpack(U, #{version => legacy}) end),
    %% The exporter's tensor stays writable; read_only on import.
    ?assertEqual(T, tensor_blob:write(T, Bytes)),
    Forced = tensor_blob:from_dlpack(tensor_blob:to_dlpack(T), #{read_only => true}),
    badarg(<<"tensor">>, <<"read-only">>, fun() -> tensor_blob:write(Forced, Bytes) end).

import_options_test() ->
    T = t46(),
    badarg(<<"version">>, <<"v0">>, fun() -> tensor_blob:from_dlpack(tensor_blob:to_dlpack(T), #{version => v0}) end),
    badarg(<<"read_only">>, <<"1">>, fun() -> tensor_blob:from_dlpack(tensor_blob:to_dlpack(T), #{read_only => 1}) end),
    badarg(<<"version">>, <<"capsule holds a versioned">>,
           fun() -> tensor_blob:from_dlpack(tensor_blob:to_dlpack(T), #{version => legacy}) end),
    badarg(<<"foo">>, <<"unknown option">>, fun() -> tensor_blob:from_dlpack(tensor_blob:to_dlpack(T), #{foo => 1}) end).

%%====================================================================
%% Raw addresses
%%====================================================================

bad_addresses_test() ->
    badarg(<<"address">>, <<"NULL">>, fun() -> tensor_blob:from_dlpack(0) end),
    badarg(<<"address">>, <<"aligned">>, fun() -> tensor_blob:from_dlpack(4100) end),
    badarg(<<"capsule">>, <<"-8">>, fun() -> tensor_blob:from_dlpack(-8) end),
    badarg(<<"capsule">>, <<"abc">>, fun() -> tensor_blob:from_dlpack(abc) end),
    badarg(<<"capsule">>, <<"Ref">>, fun() -> tensor_blob:from_dlpack(t46()) end),
    badarg(<<"capsule">>, <<"42">>, fun() -> tensor_blob:consume_dlpack(42) end),
    badarg(<<"capsule">>, <<"x">>, fun() -> tensor_blob:dlpack_version(x) end).

%% The wrong version: option for an address this library handed out is
%% refused without calling anything (it knows what it handed out), and the
%% address can then be imported as what it is; with no version option, it
%% is read as what it is.
wrong_version_option_test() ->
    Start = settled_stats(),
    T = t46(),
    Bytes = tensor_blob:to_binary(T),
    A = tensor_blob:consume_dlpack(tensor_blob:to_dlpack(T)),
    M1 = try tensor_blob:from_dlpack(A, #{version => legacy})
         catch error:{badarg, Msg1} -> Msg1
         end,
    ?assertNotEqual(nomatch, binary:match(M1, <<"nothing in it was called">>)),
    ?assertEqual(Bytes, tensor_blob:to_binary(tensor_blob:from_dlpack(A, #{version => versioned}))),
    L = tensor_blob:consume_dlpack(tensor_blob:to_dlpack(T, #{version => legacy})),
    badarg(<<"version">>, <<"holds a legacy managed tensor">>,
           fun() -> tensor_blob:from_dlpack(L, #{version => versioned}) end),
    ?assertEqual(Bytes, tensor_blob:to_binary(tensor_blob:from_dlpack(L, #{version => legacy}))),
    L2 = tensor_blob:consume_dlpack(tensor_blob:to_dlpack(T, #{version => legacy})),
    ?assertEqual(Bytes, tensor_blob:to_binary(tensor_blob:from_dlpack(L2))),
    wait_for_stats(Start#{tensors := maps:get(tensors, Start) + 1}),
    ?assertEqual(Bytes, tensor_blob:to_binary(T)).
