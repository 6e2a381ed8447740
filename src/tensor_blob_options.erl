%% @private
%% The option maps of the Erlang API: unknown keys and the values shared
%% by several functions (copy, booleans, a CUDA stream), checked once here.
-module(tensor_blob_options).

-export([check_options/2, check_copy_option/1, boolean_option/2, stream_option/1]).

-import(tensor_blob_error, [badarg/3]).

%% Opts names only keys of Known.
-spec check_options(map(), [atom()]) -> ok.
check_options(Opts, Known) ->
    case maps:keys(maps:without(Known, Opts)) of
        [] -> ok;
        Unknown -> badarg(bad_option, options,
                          ["options: unknown option(s) ", {term, Unknown}, "; known: ", {term, Known}])
    end.

%% from_binary/4's options other than copy => false | if_needed: copy =>
%% true, or none.
-spec check_copy_option(term()) -> ok.
check_copy_option(Opts) when is_map(Opts) ->
    check_options(Opts, [copy]),
    case maps:get(copy, Opts, true) of
        true -> ok;
        Other -> badarg(bad_value, copy, ["copy: expected a boolean or ", {term, if_needed}, ", got ", {term, Other}])
    end;
check_copy_option(Opts) ->
    badarg(bad_option, options, ["options: expected a map, got ", {term, Opts}]).

-spec boolean_option(atom(), map()) -> boolean().
boolean_option(Key, Opts) ->
    case maps:get(Key, Opts, false) of
        B when is_boolean(B) -> B;
        Other -> badarg(bad_value, Key, [atom_to_binary(Key), ": expected a boolean, got ", {term, Other}])
    end.

%% A stream: an integer, checked in C (its meaning depends on the device).
-spec stream_option(map()) -> integer() | undefined.
stream_option(Opts) ->
    case maps:get(stream, Opts, undefined) of
        S when is_integer(S) -> S;
        S when S =:= undefined; S =:= nil -> undefined;
        Other -> badarg(bad_value, stream,
                        ["stream: expected an integer (a cudaStream_t, 1 or 2 for the default streams, "
                         "-1 for no synchronization), got ", {term, Other}])
    end.
