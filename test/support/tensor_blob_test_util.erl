%% Helpers shared by the EUnit suites: leak checks and isolated work.
-module(tensor_blob_test_util).

-export([run_isolated/1, gc_all/0, settled_stats/0, wait_for_stats/1, wait_port/2, poll/3]).

%% No eunit.hrl: Mix compiles this module too (for ExUnit), and Mix on
%% Elixir 1.15+ does not put eunit on its code path.

%% Runs Fun in a fresh process and waits for it to exit, so that every term
%% it made is garbage once this returns. Re-raises its failure here.
run_isolated(Fun) ->
    {Pid, Ref} = spawn_monitor(fun() ->
                                       try Fun() of
                                           _ -> exit(done)
                                       catch
                                           Class:Reason:Stack -> exit({failed, Class, Reason, Stack})
                                       end
                               end),
    receive
        {'DOWN', Ref, process, Pid, done} -> ok;
        {'DOWN', Ref, process, Pid, Other} -> erlang:error({isolated_process_failed, Other})
    after 60000 ->
            exit(Pid, kill),
            erlang:error(isolated_process_timeout)
    end.

%% Resource destructors run when the last process holding a reference
%% collects it: collect everywhere (the caller included).
gc_all() ->
    _ = [erlang:garbage_collect(P) || P <- processes()],
    ok.

%% stats() once it no longer changes between collections. ERTS runs
%% resource destructors a little after the collection that frees them, so
%% this waits for the counts to stay put.
settled_stats() ->
    %% Settled: the same answer twice in a row (the last one kept here).
    Key = {?MODULE, settled_stats},
    Probe = fun() -> gc_all(), S = tensor_blob:stats(), {put(Key, S) =:= S, S} end,
    put(Key, undefined),
    {_, Stats} = poll(Probe, 100, 10),
    erase(Key),
    Stats.

%% Waits (about 2 s at most) for stats() to equal Expected, collecting
%% garbage; fails the test with both values if it never does.
wait_for_stats(Expected) ->
    Probe = fun() -> gc_all(), Stats = tensor_blob:stats(), {Stats =:= Expected, Stats} end,
    case poll(Probe, 200, 10) of
        {ok, _} -> ok;
        {timeout, Actual} -> erlang:error({stats_did_not_settle, [{expected, Expected}, {actual, Actual}]})
    end.

%% The tests' one polling helper (the Elixir tests' helpers call it too):
%% calls Probe up to Tries times, Interval ms apart, until it answers
%% {true, Value}; gives {ok, Value}, or {timeout, Value} with the last
%% value it answered ({false, Value}).
poll(Probe, Tries, Interval) ->
    case Probe() of
        {true, Value} -> {ok, Value};
        {false, Value} when Tries =< 1 -> {timeout, Value};
        {false, _} -> timer:sleep(Interval), poll(Probe, Tries - 1, Interval)
    end.

%% The exit status and output of a port opened with exit_status, or
%% {timeout, Output} (the port closed) when no data comes for Timeout ms.
wait_port(Port, Timeout) ->
    wait_port(Port, Timeout, []).

wait_port(Port, Timeout, Acc) ->
    receive
        {Port, {data, Data}} -> wait_port(Port, Timeout, [Acc, Data]);
        {Port, {exit_status, Status}} -> {Status, iolist_to_binary(Acc)}
    after Timeout ->
            try port_close(Port) catch error:badarg -> ok end,
            {timeout, iolist_to_binary(Acc)}
    end.
