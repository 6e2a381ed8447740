%% The option checker every door uses (tensor_blob_options): the forms it
%% takes, the defaults it fills in, and the reason and argument of each
%% bad option.
-module(tensor_blob_options_tests).

-include_lib("eunit/include/eunit.hrl").

-define(SPEC, [{copy, {one_of, [true, false, if_needed]}, true}, {keep, {integer, 0, 10}}, {tag, atom}]).

%% {Reason, Argument} of the error a call raises.
raised(Fun) ->
    try Fun() of
        Result -> {returned, Result}
    catch
        error:{badarg, Message}:Stack when is_binary(Message) ->
            #{reason := Reason, argument := Argument} = tensor_blob:error_reason(Stack),
            {Reason, Argument}
    end.

forms_and_defaults_test() ->
    ?assertEqual(#{copy => true}, tensor_blob_options:check(#{}, ?SPEC, map)),
    ?assertEqual(#{copy => true}, tensor_blob_options:check([], ?SPEC, keywords)),
    ?assertEqual(#{copy => false, keep => 3}, tensor_blob_options:check([{keep, 3}, {copy, false}], ?SPEC)),
    ?assertEqual(#{copy => if_needed, tag => x}, tensor_blob_options:check(#{copy => if_needed, tag => x}, ?SPEC)),
    ?assertEqual(#{a => 1}, tensor_blob_options:keywords([{a, 1}])).

bad_options_test_() ->
    Cases = [{{bad_option, options}, fun() -> tensor_blob_options:check(#{}, ?SPEC, keywords) end},
             {{bad_option, options}, fun() -> tensor_blob_options:check([], ?SPEC, map) end},
             {{bad_option, options}, fun() -> tensor_blob_options:check([{copy, true} | tail], ?SPEC) end},
             {{bad_option, options}, fun() -> tensor_blob_options:check([copy], ?SPEC) end},
             {{bad_option, options}, fun() -> tensor_blob_options:check([{"copy", true}], ?SPEC) end},
             {{bad_option, options}, fun() -> tensor_blob_options:check([{keep, 1}, {keep, 2}], ?SPEC) end},
             {{bad_option, options}, fun() -> tensor_blob_options:check(copy, ?SPEC) end},
             {{bad_option, options}, fun() -> tensor_blob_options:check(#{"copy" => true}, ?SPEC) end},
             {{bad_option, options}, fun() -> tensor_blob_options:keywords(#{a => 1}) end},
             {{bad_option, bogus}, fun() -> tensor_blob_options:check(#{bogus => 1}, ?SPEC) end},
             {{bad_value, copy}, fun() -> tensor_blob_options:check(#{copy => perhaps}, ?SPEC) end},
             {{bad_value, keep}, fun() -> tensor_blob_options:check(#{keep => 11}, ?SPEC) end},
             {{bad_value, keep}, fun() -> tensor_blob_options:check(#{keep => 1.0}, ?SPEC) end},
             {{bad_value, tag}, fun() -> tensor_blob_options:check(#{tag => "x"}, ?SPEC) end}],
    Reasons = maps:get(reasons, tensor_blob:tables()),
    [{lists:flatten(io_lib:format("~p ~p", [Expected, N])),
      fun() ->
              {Reason, _} = Got = raised(Fun),
              ?assertEqual(Expected, Got),
              ?assert(lists:member(Reason, Reasons))
      end}
     || {N, {Expected, Fun}} <- lists:zip(lists:seq(1, length(Cases)), Cases)].

types_test() ->
    Accepts = fun(Type, V) -> raised(fun() -> tensor_blob_options:check(#{k => V}, [{k, Type}]) end) =:= {returned, #{k => V}} end,
    ?assert(Accepts({list, pos_integer}, [1, 2])),
    ?assertNot(Accepts({list, pos_integer}, [1, 0])),
    ?assertNot(Accepts({list, pos_integer}, [1 | 2])),
    ?assert(Accepts({any_of, [binary, {one_of, [nil]}]}, nil)),
    ?assertNot(Accepts({any_of, [binary, {one_of, [nil]}]}, x)),
    ?assert(Accepts({satisfies, "even", fun(X) -> is_integer(X) andalso X rem 2 =:= 0 end}, 4)),
    ?assertNot(Accepts({satisfies, "even", fun(X) -> is_integer(X) andalso X rem 2 =:= 0 end}, 3)),
    ?assert(Accepts(non_neg_integer, 0)),
    ?assertNot(Accepts(non_neg_integer, -1)),
    ?assert(Accepts({integer, infinity, 0}, -5)),
    ?assert(Accepts(any, {x})).

%% The message names the option and what it expects.
message_test() ->
    Msg = try tensor_blob_options:check(#{copy => perhaps}, ?SPEC) of
              Accepted -> error({accepted, Accepted})
          catch error:{badarg, M} -> M
          end,
    ?assertEqual(<<"copy: expected a boolean or if_needed, got perhaps">>, Msg).
