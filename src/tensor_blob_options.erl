%% @doc The option checker of every door.
%%
%% A door (a function of the Erlang API, a facade module in Elixir, a
%% bridge to another runtime) declares its options as data, a spec, and
%% calls check/2 or check/3 once; what comes back is a map of the options
%% given, with the defaults the spec names filled in. Bad options are
%% answered one way, as errors with data (tensor_blob:error_reason/1):
%%
%%   options not a map or a keyword list, a map where a keyword list is
%%   expected (or the reverse), an improper list, a list element that is
%%   not {Atom, Value}, an option given twice
%%       error({badarg, _}), reason bad_option, argument options
%%   an option the spec does not name
%%       reason bad_option, argument the option (an atom; options when the
%%       key is not an atom)
%%   a known option whose value is not of its type
%%       reason bad_value, argument the option
%%
%% A spec is a list of {Key, Type} (an optional option, absent from the
%% result when not given) or {Key, Type, Default} (the result holds Key,
%% Default when it is not given). Types:
%%
%%   any                      any term
%%   boolean                  true or false
%%   atom                     any atom
%%   binary                   a binary
%%   integer                  any integer
%%   non_neg_integer          an integer >= 0
%%   pos_integer              an integer >= 1
%%   {integer, Min, Max}      an integer in Min..Max (Min or Max may be
%%                            infinity for no bound)
%%   {one_of, [Term]}         one of the terms listed (atoms, mostly)
%%   {list, Type}             a proper list of Type
%%   {any_of, [Type]}         a term of one of the types
%%   {satisfies, Text, Pred}  a term for which Pred(Term) is true; Text (a
%%                            string) says what is expected
%%
%% Form says which containers a door accepts: keywords (Elixir's keyword
%% lists: the Elixir facade), map (the Erlang API's option maps) or either
%% (check/2's default). An Elixir function documented to take a keyword
%% list and calling an Erlang function that takes a map passes its options
%% through keywords/1, which checks the form only and gives the map.
%%
%%   tensor_blob_options:check(#{copy => false}, [{copy, boolean, true}])
%%       => #{copy => false}
%%   tensor_blob_options:check([], [{copy, boolean, true}, {stream, integer}], keywords)
%%       => #{copy => true}
-module(tensor_blob_options).

-export([check/2, check/3, keywords/1, describe/1]).

-export_type([spec/0, type/0, form/0]).

-type type() :: any | boolean | atom | binary | integer | non_neg_integer | pos_integer
              | {integer, integer() | infinity, integer() | infinity}
              | {one_of, [term()]} | {list, type()} | {any_of, [type()]}
              | {satisfies, string() | binary(), fun((term()) -> boolean())}.
-type spec() :: [{atom(), type()} | {atom(), type(), term()}].
-type form() :: keywords | map | either.

-import(tensor_blob_error, [badarg/3]).

%% @doc check/3 with Form either: a map or a keyword list.
-spec check(term(), spec()) -> #{atom() => term()}.
check(Opts, Spec) ->
    check(Opts, Spec, either).

%% @doc Opts checked against Spec: the options given, and the defaults of
%% those not given. Raises as the module doc says.
-spec check(term(), spec(), form()) -> #{atom() => term()}.
check(Opts, Spec, Form) when is_list(Spec), (Form =:= either orelse Form =:= map orelse Form =:= keywords) ->
    Given = container(Opts, Form),
    maps:foreach(fun(Key, _) -> known(Key, Spec) end, Given),
    lists:foldl(fun(Entry, Acc) -> checked(Entry, Given, Acc) end, Given, Spec);
check(_Opts, Spec, Form) when is_list(Spec) ->
    badarg(bad_value, form, ["form: expected either, map or keywords, got ", {term, Form}]);
check(_Opts, Spec, _Form) ->
    bad_spec(Spec).

%% @doc A keyword list as a map; any other term (a map among them) is
%% reason bad_option, argument options. Keys are not checked against a spec.
-spec keywords(term()) -> #{atom() => term()}.
keywords([]) ->
    #{};
keywords([{Key, Value}]) when is_atom(Key) ->
    %% One option, the common call (copy: false, owner: T): no loop.
    #{Key => Value};
keywords(Opts) ->
    container(Opts, keywords).

%% @doc What a type accepts, in words, as message segments
%% (tensor_blob_error's: text and {term, Term}, which each facade prints
%% its own way).
-spec describe(type()) -> [unicode:chardata() | {term, term()}].
describe(any) -> ["any term"];
describe(boolean) -> ["a boolean"];
describe(atom) -> ["an atom"];
describe(binary) -> ["a binary"];
describe(integer) -> ["an integer"];
describe(non_neg_integer) -> ["a non-negative integer"];
describe(pos_integer) -> ["a positive integer"];
describe({integer, infinity, infinity}) -> ["an integer"];
describe({integer, Min, infinity}) -> ["an integer >= ", integer_to_list(Min)];
describe({integer, infinity, Max}) -> ["an integer =< ", integer_to_list(Max)];
describe({integer, Min, Max}) -> ["an integer in ", integer_to_list(Min), "..", integer_to_list(Max)];
describe({one_of, Terms}) ->
    case lists:member(true, Terms) andalso lists:member(false, Terms) of
        true -> ["a boolean" | [[" or ", {term, T}] || T <- Terms -- [true, false]]];
        false -> ["one of " | lists:join(", ", [[{term, T}] || T <- Terms])]
    end;
describe({list, Type}) -> ["a list of " | describe(Type)];
describe({any_of, Types}) -> lists:join(" or ", [describe(T) || T <- Types]);
describe({satisfies, Text, _}) -> [Text];
describe(Type) -> badarg(bad_value, type, ["type: expected a type of tensor_blob_options:type(), got ", {term, Type}]).

%%--------------------------------------------------------------------

container(Opts, Form) when is_map(Opts), Form =/= keywords ->
    Opts;
container(Opts, Form) when is_list(Opts), Form =/= map ->
    from_list(Opts, Opts, #{});
container(Opts, Form) ->
    badarg(bad_option, options, ["options: expected ", expected(Form), ", got ", {term, Opts}]).

from_list([], _Opts, Acc) ->
    Acc;
from_list([{Key, Value} | Rest], Opts, Acc) when is_atom(Key), not is_map_key(Key, Acc) ->
    from_list(Rest, Opts, Acc#{Key => Value});
from_list([{Key, _} | _], _Opts, _Acc) when is_atom(Key) ->
    badarg(bad_option, options, ["options: ", atom_to_binary(Key), " is given twice"]);
from_list(_, Opts, _Acc) ->
    badarg(bad_option, options, ["options: expected a keyword list (a proper list of {atom, value} pairs), got ",
                                 {term, Opts}]).

expected(keywords) -> {code, "a keyword list ([{Key, Value}])", "a keyword list"};
expected(map) -> {code, "a map", "a map"};
expected(either) -> {code, "a map or a list of {Key, Value}", "a keyword list or a map"}.

known(Key, Spec) ->
    case lists:keymember(Key, 1, Spec) of
        true -> ok;
        false ->
            Known = [element(1, E) || E <- Spec],
            case is_atom(Key) of
                true -> badarg(bad_option, Key, [atom_to_binary(Key), ": unknown option; known: ", {term, Known}]);
                false -> badarg(bad_option, options, ["options: unknown option ", {term, Key}, "; known: ",
                                                      {term, Known}])
            end
    end.

checked({Key, Type}, Given, Acc) ->
    case Given of
        #{Key := Value} -> valued(Key, Type, Value), Acc;
        #{} -> Acc
    end;
checked({Key, Type, Default}, Given, Acc) ->
    case Given of
        #{Key := Value} -> valued(Key, Type, Value), Acc;
        #{} -> Acc#{Key => Default}
    end;
checked(Entry, _Given, _Acc) ->
    bad_spec(Entry).

%% A door's spec that is none: a list of {Key, Type} or {Key, Type, Default}.
-spec bad_spec(term()) -> no_return().
bad_spec(Spec) ->
    badarg(bad_value, spec, ["spec: expected a list of {Key, Type} or {Key, Type, Default}, got ", {term, Spec}]).

valued(Key, Type, Value) ->
    case is(Type, Value) of
        true -> ok;
        false -> badarg(bad_value, Key, [atom_to_binary(Key), ": expected "] ++ flat(describe(Type)) ++
                                        [", got ", {term, Value}])
    end.

is(any, _) -> true;
is(boolean, V) -> is_boolean(V);
is(atom, V) -> is_atom(V);
is(binary, V) -> is_binary(V);
is(integer, V) -> is_integer(V);
is(non_neg_integer, V) -> is_integer(V) andalso V >= 0;
is(pos_integer, V) -> is_integer(V) andalso V >= 1;
is({integer, Min, Max}, V) ->
    is_integer(V) andalso (Min =:= infinity orelse V >= Min) andalso (Max =:= infinity orelse V =< Max);
is({one_of, Terms}, V) -> lists:member(V, Terms);
is({list, Type}, V) -> is_list(V) andalso proper_of(Type, V);
is({any_of, Types}, V) -> lists:any(fun(T) -> is(T, V) end, Types);
is({satisfies, _, Pred}, V) when is_function(Pred, 1) -> Pred(V) =:= true;
is(Type, _) -> describe(Type).

%% Segments nested in lists, as one list of segments.
flat(Segments) ->
    lists:flatmap(fun({term, _} = T) -> [T];
                     (L) when is_list(L), L =/= [], not is_integer(hd(L)) -> flat(L);
                     (Text) -> [Text]
                  end, Segments).

proper_of(_Type, []) -> true;
proper_of(Type, [H | T]) -> is(Type, H) andalso proper_of(Type, T);
proper_of(_Type, _Improper) -> false.
