%% The settings of a deployment (tensor_blob_config:settings/0,
%% guides/configuration.md): each read from the application environment,
%% its OS variable winning over it, a call's option over both.
-module(tensor_blob_config_tests).

-include_lib("eunit/include/eunit.hrl").

-export([child_call/0, child_pack/0]).

%% Every setting is documented in guides/configuration.md, by its key and
%% its OS variable.
settings_documented_test() ->
    {ok, Guide} = file:read_file("guides/configuration.md"),
    [?assertNotEqual(nomatch, binary:match(Guide, Name), Name)
     || #{key := Key, os := Var} <- tensor_blob_config:settings(),
        Name <- [atom_to_binary(Key), list_to_binary(Var)]].

%% node_keep: the keep time of a region node_pack/3 packs when the call
%% gives none.
node_keep_test_() ->
    {setup, fun() -> _ = application:load(tensor_blob), os:getenv("TENSOR_BLOB_NODE_KEEP") end,
     fun(Saved) ->
             application:unset_env(tensor_blob, node_keep),
             restore_os("TENSOR_BLOB_NODE_KEEP", Saved)
     end,
     fun(_) -> [fun node_keep_default/0, fun node_keep_app_env/0, fun node_keep_os_wins/0,
                fun node_keep_option_wins/0, fun node_keep_option_wins_over_bad/0, fun node_keep_bad/0] end}.

node_keep_default() ->
    os:unsetenv("TENSOR_BLOB_NODE_KEEP"),
    application:unset_env(tensor_blob, node_keep),
    [#{default := Default}] = [S || #{key := node_keep} = S <- tensor_blob_config:settings()],
    ?assertEqual(Default, keep_of(#{})).

node_keep_app_env() ->
    os:unsetenv("TENSOR_BLOB_NODE_KEEP"),
    ok = application:set_env(tensor_blob, node_keep, 0),
    #{keep := 0, keeper := Keeper} = pack(#{}),
    %% A keep of 0: the keeper lets the region go at once.
    ?assert(wait_dead(Keeper, 2000)),
    ok = application:set_env(tensor_blob, node_keep, 60000),
    #{keep := 60000, keeper := Kept} = pack(#{}),
    timer:sleep(50),
    ?assert(is_process_alive(Kept)),
    exit(Kept, kill).

node_keep_os_wins() ->
    ok = application:set_env(tensor_blob, node_keep, 0),
    true = os:putenv("TENSOR_BLOB_NODE_KEEP", "1234"),
    ?assertEqual(1234, keep_of(#{})),
    os:unsetenv("TENSOR_BLOB_NODE_KEEP").

node_keep_option_wins() ->
    ok = application:set_env(tensor_blob, node_keep, 0),
    ?assertEqual(5, keep_of(#{keep => 5})).

%% A call's keep wins over a setting that would be refused: the setting
%% is not read at all when the call gives keep.
node_keep_option_wins_over_bad() ->
    os:unsetenv("TENSOR_BLOB_NODE_KEEP"),
    ok = application:set_env(tensor_blob, node_keep, -1),
    ?assertEqual(5000, keep_of(#{keep => 5000})),
    application:unset_env(tensor_blob, node_keep),
    true = os:putenv("TENSOR_BLOB_NODE_KEEP", "soon"),
    ?assertEqual(7, keep_of(#{keep => 7})),
    %% The option itself is still checked.
    ?assertMatch({badarg, <<"keep: expected an integer in 0..4294967295", _/binary>>},
                 catch_error(fun() -> pack(#{keep => -1}) end)),
    os:unsetenv("TENSOR_BLOB_NODE_KEEP").

node_keep_bad() ->
    os:unsetenv("TENSOR_BLOB_NODE_KEEP"),
    ok = application:set_env(tensor_blob, node_keep, -1),
    ?assertEqual({badarg, <<"node_keep: the application environment gives -1 ({tensor_blob, [{node_keep, Ms}]}); "
                            "expected milliseconds (an integer in 0..4294967295)">>},
                 catch_error(fun() -> pack(#{}) end)),
    application:unset_env(tensor_blob, node_keep),
    true = os:putenv("TENSOR_BLOB_NODE_KEEP", "soon"),
    ?assertEqual({badarg, <<"node_keep: TENSOR_BLOB_NODE_KEEP (an OS environment variable) is \"soon\"; "
                            "expected milliseconds (an integer in 0..4294967295)">>},
                 catch_error(fun() -> pack(#{}) end)),
    os:unsetenv("TENSOR_BLOB_NODE_KEEP").

keep_of(Opts) ->
    #{keep := Keep, keeper := Keeper} = pack(Opts),
    exit(Keeper, kill),
    Keep.

pack(Opts) ->
    tensor_blob:node_pack(tensor_blob:zeros({4}, float32), node(), Opts#{via => region}).

wait_dead(Pid, Ms) ->
    Dead = fun() -> {not is_process_alive(Pid), Pid} end,
    element(1, tensor_blob_test_util:poll(Dead, max(1, Ms div 10), 10)) =:= ok.

%% nif_path: the NIF library to load, read while the module loads: in a
%% fresh VM, from erl's -tensor_blob arguments and -config files (the
%% application not loaded yet, as in an embedded boot), and from the
%% loaded application's environment; TENSOR_BLOB_NIF wins over all.
nif_path_test_() ->
    {timeout, 120, fun nif_path/0}.

nif_path() ->
    Library = filename:absname("priv/tensor_blob_nif"),
    Missing = filename:absname(filename:join(["_build", "nowhere", "tensor_blob_nif"])),
    %% From the command line; given with .so, it loads all the same.
    ?assertMatch({ok, #{}}, child(["-tensor_blob", "nif_path", quoted(Library ++ ".so")], [], "")),
    {error, {tensor_blob, FromArgs}} = child(["-tensor_blob", "nif_path", quoted(Missing)], [], ""),
    %% (The library in priv: where the child's code path puts it.)
    Priv = filename:join(filename:dirname(filename:dirname(code:which(tensor_blob_nif))), "priv"),
    ?assertEqual(iolist_to_binary(["the application environment's nif_path names ", Missing, ", and there is no ",
                                   Missing, ".so: the NIF library did not load. Set it to a build of the library "
                                   "(its path, with or without .so), or unset it to load the one in ",
                                   filename:join(Priv, "tensor_blob_nif.so"), ". See guides/configuration.md"]),
                 FromArgs),
    %% From a -config file.
    Config = filename:absname(filename:join(["_build", "tensor_blob_config_tests.config"])),
    ok = file:write_file(Config, io_lib:format("~p.~n", [[{tensor_blob, [{nif_path, Missing}]}]])),
    {error, {tensor_blob, FromConfig}} = child(["-config", Config], [], ""),
    ?assertEqual(FromArgs, FromConfig),
    %% From the loaded application's environment.
    Set = lists:flatten(io_lib:format("ok = application:load(tensor_blob), "
                                      "ok = application:set_env(tensor_blob, nif_path, ~p), ", [Missing])),
    ?assertEqual({error, {tensor_blob, FromArgs}}, child([], [], Set)),
    %% Not a string.
    {error, {tensor_blob, NotAPath}} = child(["-tensor_blob", "nif_path", "42"], [], ""),
    ?assertEqual(<<"the application environment's nif_path is 42: expected the path of the NIF library (a string). "
                   "See guides/configuration.md">>, NotAPath),
    %% TENSOR_BLOB_NIF wins over the application environment, and a
    %% missing file is blamed on it, not on the build.
    {error, {tensor_blob, FromOs}} = child(["-tensor_blob", "nif_path", quoted(Library)],
                                           [{"TENSOR_BLOB_NIF", Missing}], ""),
    ?assertEqual(iolist_to_binary(["TENSOR_BLOB_NIF (an OS environment variable) names ", Missing,
                                   ", and there is no ", Missing, ".so: the NIF library did not load. Set it to a "
                                   "build of the library (its path, with or without .so), or unset it to load the "
                                   "one in ", filename:join(Priv, "tensor_blob_nif.so"), ". See guides/configuration.md"]),
                 FromOs),
    ?assertEqual(nomatch, binary:match(FromOs, <<"build it">>)),
    ?assertMatch({ok, #{}}, child(["-tensor_blob", "nif_path", quoted(Missing)], [{"TENSOR_BLOB_NIF", Library}], "")),
    file:delete(Config).

%% An argument of erl's command line that does not parse as an Erlang term
%% (read before the application is loaded) is refused, naming the argument,
%% never dropped for the default: node_keep when a pack reads it, nif_path
%% when the library loads.
unparsable_argument_test_() ->
    {timeout, 120, fun unparsable_argument/0}.

unparsable_argument() ->
    [?assertEqual({error, {badarg, iolist_to_binary(["node_keep: the argument -tensor_blob node_keep ", Text,
                                                     " of erl's command line does not parse as an Erlang term; "
                                                     "expected milliseconds (an integer in 0..4294967295)"])}},
                  child(["-tensor_blob", "node_keep", Text], [], "", child_pack))
     || Text <- ["5x", "["]],
    %% A parsable one is read, and a call's keep wins over a bad one.
    ?assertEqual({ok, 5}, child(["-tensor_blob", "node_keep", "5"], [], "", child_pack)),
    ?assertEqual({ok, 9}, child(["-tensor_blob", "node_keep", "5x"], [], "put(keep, 9), ", child_pack)),
    {error, {tensor_blob, Nif}} = child(["-tensor_blob", "nif_path", "["], [], ""),
    ?assertEqual(<<"the argument -tensor_blob nif_path [ of erl's command line does not parse as an Erlang term: "
                   "the NIF library did not load. Give the path as an Erlang string "
                   "(-tensor_blob nif_path '\"/path/to/tensor_blob_nif\"'). See guides/configuration.md">>, Nif).

%% TENSOR_BLOB_NIF naming a real library that is not tensor_blob's (another
%% NIF library; a shared library with no NIF in it) is reported as a
%% missing one is: the setting, where it came from, the path and why; every
%% call raises that, never an undefined function.
not_our_library_test_() ->
    {timeout, 120, fun not_our_library/0}.

not_our_library() ->
    Dir = filename:absname(filename:join(["_build", "not_our_library", os:getpid()])),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    try
        ok = file:write_file(filename:join(Dir, "plain.c"), "int tb_not_a_nif(void) { return 1; }\n"),
        Cc = os:getenv("CC", "cc"),
        ?assertEqual("built\n", os:cmd(lists:flatten(io_lib:format(
                                            "cd '~ts' && ~ts -shared -fPIC -o plain.so plain.c && echo built",
                                            [Dir, Cc])))),
        Foreign = filename:absname(filename:rootname(foreign_nif(), ".so")),
        [begin
             {error, {tensor_blob, Message}} = child([], [{"TENSOR_BLOB_NIF", Library}], ""),
             Prefix = iolist_to_binary(["TENSOR_BLOB_NIF (an OS environment variable) names ", Library, ", and ",
                                        Library, ".so is not tensor_blob's NIF library (", Why]),
             ?assertEqual(Prefix, binary:part(Message, 0, min(byte_size(Prefix), byte_size(Message)))),
             ?assertNotEqual(nomatch, binary:match(Message, <<"the NIF library did not load. Set it to a build">>)),
             %% From the application environment, the same, naming it.
             {error, {tensor_blob, FromArgs}} =
                 child(["-tensor_blob", "nif_path", quoted(Library)], [], ""),
             ?assertMatch(<<"the application environment's nif_path names ", _/binary>>, FromArgs),
             ?assertNotEqual(nomatch, binary:match(FromArgs, <<"is not tensor_blob's NIF library">>))
         end
         || {Library, Why} <- [{filename:join(Dir, "plain"), "Failed to find library init function"},
                               {Foreign, "Library module name 'foreign_tensor_nif' does not match calling module "
                                         "'tensor_blob_nif'"}]]
    after
        file:del_dir_r(Dir)
    end.

%% The foreign NIF library the test run builds (make foreign-nif).
foreign_nif() ->
    Path = case os:getenv("FOREIGN_TENSOR_NIF") of
               P when is_list(P), P =/= "" -> P ++ ".so";
               _ -> filename:join("build", "foreign_tensor_nif.so")
           end,
    filelib:is_regular(Path) orelse erlang:error({missing_build, Path, "make foreign-nif"}),
    Path.

quoted(Path) -> "\"" ++ Path ++ "\"".

%% A fresh VM with the library's code, erl's Args and the OS variables Env
%% (TENSOR_BLOB_NIF unset unless given), that runs Before and then calls
%% the API: what the call returned, or the error it raised.
child(Args, Env, Before) ->
    child(Args, Env, Before, child_call).

child(Args, Env, Before, Call) ->
    Erl = filename:join([code:root_dir(), "bin", "erl"]),
    Dirs = lists:usort([filename:dirname(code:which(M)) || M <- [tensor_blob, tensor_blob_nif, ?MODULE]]),
    Port = open_port({spawn_executable, Erl},
                     [{args, ["-noshell", "-pa" | Dirs] ++ Args
                             ++ ["-eval", Before ++ "tensor_blob_config_tests:" ++ atom_to_list(Call) ++ "()."]},
                      {env, [{"TENSOR_BLOB_NIF", false}, {"TB_LOAD_FAULT", false} | Env]},
                      exit_status, stderr_to_stdout, binary]),
    {0, Output} = tensor_blob_test_util:wait_port(Port, 100000),
    {match, [Encoded]} = re:run(Output, "RESULT:([A-Za-z0-9+/=]*)", [{capture, all_but_first, binary}]),
    binary_to_term(base64:decode(Encoded)).

%% In the child.
child_call() ->
    Result = try tensor_blob:stats() of
                 Stats -> {ok, Stats}
             catch
                 error:Reason -> {error, Reason}
             end,
    io:format("RESULT:~s~n", [base64:encode(term_to_binary(Result))]),
    halt(0).

%% In the child: a region packed to this node, with the keep the process
%% dictionary gives, or none; the keep it got, or the error it raised.
child_pack() ->
    Opts = case get(keep) of
               undefined -> #{via => region};
               Keep -> #{via => region, keep => Keep}
           end,
    Result = try tensor_blob:node_pack(tensor_blob:zeros({4}, float32), node(), Opts) of
                 #{keep := K} -> {ok, K}
             catch
                 error:Reason -> {error, Reason}
             end,
    io:format("RESULT:~s~n", [base64:encode(term_to_binary(Result))]),
    halt(0).

catch_error(Fun) ->
    try Fun() of
        Result -> {returned, Result}
    catch
        error:Reason -> Reason
    end.

restore_os(Var, false) -> os:unsetenv(Var);
restore_os(Var, Value) -> os:putenv(Var, Value).
