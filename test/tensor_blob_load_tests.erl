%% A load or an upgrade of the NIF library that fails says why: a line on
%% stderr and a return code of its own ("load-call unsuccessful (Code)").
%% Each reason the library lists (tensor_blob_nif:load_failures/0, from
%% c_src/core/tb_load.h) is made to happen in a fresh BEAM, whose output is
%% read back:
%%   abi              an upgrade to a build of another TB_ABI;
%%   too_many_builds  upgrades to copies of this build until the state has
%%                    no room for another build's storage deleter;
%%   the others       a first load of a build that fails the step named by
%%                    TB_LOAD_FAULT (both test builds: make load-test-builds).
-module(tensor_blob_load_tests).

-export([first_load/0, first_call/0, reload_each/1, reload_copies/3, log/2]).

-include_lib("eunit/include/eunit.hrl").

-define(M, tensor_blob_nif).
-define(LOAD_TEST, "build/load_test").

load_failures_test_() ->
    [{timeout, 120, {"another ABI", fun abi/0}},
     {timeout, 120, {"too many builds", fun too_many_builds/0}},
     {timeout, 300, {"each load step", fun injected/0}}].

failures() ->
    [{Name, Code, unicode:characters_to_list(Message)} || {Name, Code, Message} <- ?M:load_failures()].

failure(Name) ->
    lists:keyfind(Name, 1, failures()).

%% A library the dynamic loader refuses, for a libtorch it needs and cannot
%% find: the module loads all the same, says why on stderr, and every call
%% raises a tensor_blob error that says what to do and where to read more,
%% not the bare "not loaded".
missing_libtorch_test_() ->
    {timeout, 120, fun missing_libtorch/0}.

missing_libtorch() ->
    Dir = filename:absname(filename:join([?LOAD_TEST, "missing_libtorch", os:getpid()])),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    try
        ok = file:write_file(filename:join(Dir, "dep.c"), "int tb_load_test_dep(void) { return 1; }\n"),
        ok = file:write_file(filename:join(Dir, "nif.c"),
                             "int tb_load_test_dep(void);\nint tb_load_test_nif(void) { return tb_load_test_dep(); }\n"),
        Cc = os:getenv("CC", "cc"),
        Build = lists:flatten(io_lib:format(
                                "cd '~ts' && ~ts -shared -fPIC -o libtorch_tb_load_test.so dep.c && "
                                "~ts -shared -fPIC -o tensor_blob_nif.so nif.c -L. -ltorch_tb_load_test && "
                                "rm libtorch_tb_load_test.so && echo built", [Dir, Cc, Cc])),
        ?assertEqual("built\n", os:cmd(Build)),
        {{Loaded, Call}, [], Output} = child(filename:join(Dir, "tensor_blob_nif"), [], first_call),
        ?assertEqual({module, ?M}, Loaded),
        {error, {tensor_blob, Message}} = Call,
        Text = unicode:characters_to_list(Message),
        [?assertNotEqual(nomatch, string:find(Text, Part), Text)
         || Part <- ["the NIF library did not load", "libtorch_tb_load_test.so", "libtorch's shared libraries",
                     "LD_LIBRARY_PATH", "\"Deployment\" in guides/building.md"]],
        ?assertNotEqual(nomatch, string:find(Output, "tensor_blob: the NIF library did not load"), Output)
    after
        file:del_dir_r(Dir)
    end.

%% The codes are distinct and none is 0 (success).
codes_test() ->
    Codes = [Code || {_, Code, _} <- failures()],
    ?assertEqual(length(Codes), length(lists:usort(Codes))),
    ?assertNot(lists:member(0, Codes)).

abi() ->
    {abi, Code, _} = Failure = failure(abi),
    {Results, Codes, Output} = child(library(), [], {reload_each, [test_build(abi)]}),
    ?assertEqual([{error, on_load_failure}], Results),
    assert_reported(Failure, Output),
    ?assertEqual([Code], Codes).

too_many_builds() ->
    {too_many_builds, Code, _} = Failure = failure(too_many_builds),
    Dir = filename:absname(filename:join(?LOAD_TEST, "copies")),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    %% Each copy is another build to the dynamic loader: another storage
    %% deleter to register. The child makes them as it goes.
    {Results, Codes, Output} = child(library(), [], {reload_copies, filename:absname(library()), Dir, 64}),
    ok = file:del_dir_r(Dir),
    {Loaded, [Last]} = lists:split(length(Results) - 1, Results),
    ?assertNotEqual([], Loaded),
    ?assertEqual([{module, ?M}], lists:usort(Loaded)),
    ?assertEqual({error, on_load_failure}, Last),
    assert_reported(Failure, Output),
    ?assertEqual([Code], Codes).

%% Without TB_LOAD_FAULT the faulty build loads, so each failure below is
%% the step it names and nothing else.
injected() ->
    Faults = test_build(faults),
    ?assertMatch({{module, ?M}, [], _}, child(Faults, [], first_load)),
    Injected = [F || {Name, _, _} = F <- failures(), not lists:member(Name, [abi, too_many_builds])],
    ?assertNotEqual([], Injected),
    lists:foreach(fun({_, Code, _} = Failure) ->
                          {Result, Codes, Output} =
                              child(Faults, [{"TB_LOAD_FAULT", integer_to_list(Code)}], first_load),
                          ?assertEqual({error, on_load_failure}, Result),
                          assert_reported(Failure, Output),
                          ?assertEqual([Code], Codes)
                  end, Injected).

assert_reported({Name, Code, Message}, Output) ->
    Line = lists:flatten(io_lib:format("tensor_blob: cannot load the NIF library (~b: ~s): ~ts", [Code, Name, Message])),
    ?assertNotEqual(nomatch, string:find(Output, Line), Output).

%% Runs a fresh BEAM that loads the NIF module from Library (with Env
%% added), then does Step; returns the step's result, the codes ERTS
%% reported for the failed load calls, and all the output.
child(Library, Env, Step) ->
    Erl = filename:join([code:root_dir(), "bin", "erl"]),
    Dirs = lists:usort([filename:dirname(code:which(M)) || M <- [?M, ?MODULE]]),
    Code = case Step of
               first_load -> "tensor_blob_load_tests:first_load().";
               first_call -> "tensor_blob_load_tests:first_call().";
               {reload_each, Paths} -> lists:flatten(io_lib:format("tensor_blob_load_tests:reload_each(~w).", [Paths]));
               {reload_copies, Source, Dir, N} ->
                   lists:flatten(io_lib:format("tensor_blob_load_tests:reload_copies(~w, ~w, ~w).", [Source, Dir, N]))
           end,
    Port = open_port({spawn_executable, Erl},
                     [{args, ["-noshell", "-pa" | Dirs] ++ ["-eval", Code]},
                      {env, [{"TENSOR_BLOB_NIF", filename:absname(Library)}, {"TB_LOAD_FAULT", false} | Env]},
                      exit_status, stderr_to_stdout, binary]),
    {0, Output} = tensor_blob_test_util:wait_port(Port, 100000),
    Text = unicode:characters_to_list(Output),
    {match, [Encoded]} = re:run(Text, "RESULT:([A-Za-z0-9+/=]*)", [{capture, all_but_first, list}]),
    {Result, Reports} = binary_to_term(base64:decode(Encoded)),
    Codes = [list_to_integer(C) || R <- Reports,
                                   {match, [C]} <- [re:run(R, "-call unsuccessful \\((\\d+)\\)",
                                                           [{capture, all_but_first, list}])]],
    {Result, Codes, Text}.

%% In the child: loads the NIF module.
first_load() ->
    capture_reports(),
    Result = code:ensure_loaded(?M),
    report(Result, [Result]).

%% In the child: loads the NIF module, then calls the API.
first_call() ->
    capture_reports(),
    Result = code:ensure_loaded(?M),
    Call = try tensor_blob:stats() of
               Stats -> {ok, Stats}
           catch
               error:Reason -> {error, Reason}
           end,
    report({Result, Call}, [Result]).

%% In the child: loads the NIF module, then upgrades it to each build in
%% turn (purging the one before), up to the first that fails.
reload_each(Paths) ->
    capture_reports(),
    {module, ?M} = code:ensure_loaded(?M),
    Results = reload_each(Paths, []),
    report(Results, Results).

%% In the child: the same over up to N copies of the build Source, each
%% made in Dir just before it is loaded.
reload_copies(Source, Dir, N) ->
    capture_reports(),
    {module, ?M} = code:ensure_loaded(?M),
    Results = reload_copies(Source, Dir, 1, N, []),
    report(Results, Results).

reload_copies(_, _, I, N, Acc) when I > N ->
    lists:reverse(Acc);
reload_copies(Source, Dir, I, N, Acc) ->
    Copy = filename:join(Dir, "build_" ++ integer_to_list(I)),
    {ok, _} = file:copy(Source ++ ".so", Copy ++ ".so"),
    case reload_each([Copy], []) of
        [{module, ?M} = R] -> reload_copies(Source, Dir, I + 1, N, [R | Acc]);
        [Error] -> lists:reverse([Error | Acc])
    end.

reload_each([], Acc) ->
    lists:reverse(Acc);
reload_each([Path | Rest], Acc) ->
    true = os:putenv("TENSOR_BLOB_NIF", Path),
    case code:load_file(?M) of
        {module, ?M} = R ->
            _ = code:purge(?M),
            reload_each(Rest, [R | Acc]);
        Error ->
            lists:reverse([Error | Acc])
    end.

%% A failed on_load is reported by the code server, from another process:
%% a logger handler brings the reports here.
capture_reports() ->
    ok = logger:add_handler(load_tests, ?MODULE, #{config => self()}).

log(#{msg := Msg}, #{config := Pid}) ->
    Text = case Msg of
               {string, S} -> S;
               {report, R} -> io_lib:format("~p", [R]);
               {Format, Args} -> io_lib:format(Format, Args)
           end,
    case string:find(Text, "on_load") of
        nomatch -> ok;
        _ -> Pid ! {load_tests_report, lists:flatten(Text)}
    end.

%% Prints Result and the reports (one per failed load) as one line.
report(Result, Loads) ->
    Failed = length([L || L <- Loads, L =/= {module, ?M}]),
    Reports = [receive {load_tests_report, R} -> R after 10000 -> timeout end || _ <- lists:seq(1, Failed)],
    io:format("RESULT:~s~n", [base64:encode(term_to_binary({Result, Reports}))]),
    halt(0).

test_build(Name) ->
    Path = filename:join([?LOAD_TEST, Name, "tensor_blob_nif"]),
    filelib:is_regular(Path ++ ".so") orelse erlang:error({missing_build, Path, "make load-test-builds"}),
    filename:absname(Path).

%% The build this VM loaded (as tensor_blob_nif finds it).
library() ->
    case os:getenv("TENSOR_BLOB_NIF") of
        Path when is_list(Path), Path =/= "" -> Path;
        _ -> filename:join(code:priv_dir(tensor_blob), "tensor_blob_nif")
    end.
