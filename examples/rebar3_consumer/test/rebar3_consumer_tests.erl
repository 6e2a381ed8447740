-module(rebar3_consumer_tests).

-include_lib("eunit/include/eunit.hrl").

%% The first call loads the NIF library and libtorch with it: on a loaded
%% machine that can outlast EUnit's default 5 s, so the test allows a minute.
exchange_test_() ->
    {timeout, 60, fun exchange/0}.

exchange() ->
    {Bytes, View} = rebar3_consumer:exchange(),
    ?assertEqual(<<10, 20, 30, 40, 50, 60>>, Bytes),
    %% The view shares the tensor's storage: it answers as the tensor does.
    ?assert(tensor_blob:memory(View) =:= owned),
    ?assertEqual(<<10, 20, 30, 40, 50, 60>>, tensor_blob:to_binary(View)).

%% The dependency's doc chunks are shipped beside its ebin: the shell's
%% h(tensor_blob, to_blob) finds them.
docs_test() ->
    {ok, Docs} = code:get_doc(tensor_blob),
    Rendered = render(
                 fun() -> shell_docs:render(tensor_blob, to_blob, Docs,
                                   #{encoding => unicode, ansi => false, columns => 80}) end),
    ?assertNotEqual(nomatch, binary:match(Rendered, <<"the blob's owner is T">>)).

%% shell_docs asks its group leader for terminal options, which EUnit's does
%% not answer: render from a process whose group leader is the VM's user.
render(Fun) ->
    Self = self(),
    {Pid, Ref} = spawn_monitor(fun() ->
                                       group_leader(whereis(user), self()),
                                       Self ! {self(), unicode:characters_to_binary(Fun())}
                               end),
    receive
        {Pid, Text} -> erlang:demonitor(Ref, [flush]), Text;
        {'DOWN', Ref, process, Pid, Reason} -> erlang:error({render_failed, Reason})
    end.
