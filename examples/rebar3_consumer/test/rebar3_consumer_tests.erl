-module(rebar3_consumer_tests).

-include_lib("eunit/include/eunit.hrl").

exchange_test() ->
    {Bytes, View} = rebar3_consumer:exchange(),
    ?assertEqual(<<10, 20, 30, 40, 50, 60>>, Bytes),
    ?assert(tensor_blob:memory(View) =:= pinned),
    ?assertEqual(<<10, 20, 30, 40, 50, 60>>, tensor_blob:to_binary(View)).
