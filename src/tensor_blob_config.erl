%% @private
%% The settings a deployment may choose, in one table (settings/0; the
%% user's page is guides/configuration.md). Each is read, in this order,
%% from its OS environment variable, from the application environment
%% (`config :tensor_blob, key: value' in Elixir, `{tensor_blob, [{key,
%% Value}]}' in sys.config, `-tensor_blob key Value' on erl's command
%% line), else it is its default. The OS variable wins: it is the override
%% for one run (a test build, one node of many) over what the release's
%% configuration says. An option given to a call wins over both (keep of
%% node_pack/3).
%%
%% The NIF's path is read while the NIF module loads, which in a release
%% booted in embedded mode happens before the application controller has
%% loaded the application's environment: then the environment is read
%% where the controller would read it, from erl's arguments and the
%% -config files.
-module(tensor_blob_config).

-export([settings/0, lookup/1, get/1, argument_text/2]).

-export_type([source/0]).

%% Where a setting's value came from: {argument, Text} is erl's
%% `-tensor_blob Key Text' read before the application is loaded, whose
%% Text does not parse as an Erlang term (its value is then Text, which
%% get/1 and the NIF's loader refuse).
-type source() :: {os, string()} | app_env | {argument, string()} | default.

%% The settings: each one's application environment key, its OS variable,
%% its default, and what it is.
-spec settings() -> [#{key := atom(), os := string(), default := term(), doc := binary()}].
settings() ->
    [#{key => nif_path, os => "TENSOR_BLOB_NIF", default => priv,
       doc => <<"the NIF library to load, as a path with or without .so (default: priv/tensor_blob_nif.so)">>},
     #{key => node_keep, os => "TENSOR_BLOB_NODE_KEEP", default => 30000,
       doc => <<"how long, in milliseconds, a region packed by node_pack/3 is kept for its receiver when the "
                "call gives no keep option">>}].

%% A setting's value as given, unchecked, and where it came from (nothing:
%% the default).
-spec lookup(atom()) -> {term(), source()}.
lookup(Key) ->
    #{os := Var, default := Default} = setting(Key),
    case os:getenv(Var) of
        Value when is_list(Value), Value =/= "" ->
            {Value, {os, Var}};
        _ ->
            case app_env(Key) of
                {ok, Value} -> {Value, app_env};
                {unparsed, Text} -> {Text, {argument, Text}};
                undefined -> {Default, default}
            end
    end.

%% A setting's value, checked: a bad value raises badarg naming where it
%% came from. (nif_path is checked where the library is loaded, which
%% raises nothing.)
-spec get(node_keep) -> term().
get(node_keep = Key) ->
    case lookup(Key) of
        {Value, {os, Var}} ->
            case string:to_integer(Value) of
                {Ms, ""} when Ms >= 0, Ms =< 16#FFFFFFFF -> Ms;
                _ -> bad(Key, [Var, " (an OS environment variable) is ", {term, Value}])
            end;
        {_, {argument, Text}} ->
            bad(Key, [argument_text(Key, Text)]);
        {Ms, _} when is_integer(Ms), Ms >= 0, Ms =< 16#FFFFFFFF ->
            Ms;
        {Value, app_env} ->
            bad(Key, ["the application environment gives ", {term, Value}, " (",
                      {code, "{tensor_blob, [{node_keep, Ms}]}", "config :tensor_blob, node_keep: ms"}, ")"])
    end.

%% Where an argument that does not parse came from, and why it is refused.
-spec argument_text(atom(), string()) -> iodata().
argument_text(Key, Text) ->
    ["the argument -tensor_blob ", atom_to_list(Key), " ", Text, " of erl's command line does not parse as an "
     "Erlang term"].

-spec bad(node_keep, [tensor_blob_error:segment()]) -> no_return().
bad(node_keep, Where) ->
    tensor_blob_error:badarg(bad_option, node_keep, ["node_keep: " | Where] ++ ["; expected milliseconds (an integer in 0..4294967295)"]).

setting(Key) ->
    [Setting] = [S || #{key := K} = S <- settings(), K =:= Key],
    Setting.

%% The application environment; before the application controller has
%% loaded it (an embedded boot loading the NIF), where it would read it:
%% erl's -tensor_blob Key Value arguments over the -config files.
app_env(Key) ->
    case guarded(fun() -> application:get_env(tensor_blob, Key) end) of
        {ok, Value} -> {ok, Value};
        _ ->
            case guarded(fun application:loaded_applications/0) of
                Loaded when is_list(Loaded) ->
                    case lists:keymember(tensor_blob, 1, Loaded) of
                        true -> undefined;
                        false -> boot_env(Key)
                    end;
                _ ->
                    boot_env(Key)
            end
    end.

%% Before the application controller runs, its functions exit: then there is
%% no answer from it.
guarded(Fun) ->
    try Fun() catch _:_ -> no_answer end.

boot_env(Key) ->
    Name = atom_to_list(Key),
    Arguments = case init:get_argument(tensor_blob) of
                    {ok, Lists} -> [Value || [K, Value] <- Lists, K =:= Name];
                    error -> []
                end,
    case lists:reverse(Arguments) of
        [Text | _] ->
            %% As the application controller reads it; what does not parse
            %% is refused by the reader of the setting, never dropped for
            %% the default.
            case erl_scan:string(Text ++ ".") of
                {ok, Tokens, _} ->
                    case erl_parse:parse_term(Tokens) of
                        {ok, Term} -> {ok, Term};
                        _ -> {unparsed, Text}
                    end;
                _ -> {unparsed, Text}
            end;
        [] ->
            config_files_env(Key)
    end.

config_files_env(Key) ->
    Files = case init:get_argument(config) of
                {ok, Lists} -> lists:append(Lists);
                error -> []
            end,
    Found = [Value || File <- Files,
                      {ok, [Config]} <- [file:consult(config_file(File))], is_list(Config),
                      {tensor_blob, Env} <- Config, is_list(Env),
                      {K, Value} <- Env, K =:= Key],
    case lists:reverse(Found) of
        [Value | _] -> {ok, Value};
        [] -> undefined
    end.

config_file(File) ->
    case filename:extension(File) of
        ".config" -> File;
        _ -> File ++ ".config"
    end.
