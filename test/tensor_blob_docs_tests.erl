%% The Erlang API's documentation reaches the shell: h(tensor_blob, to_blob)
%% reads the EEP 48 doc chunk built by make (edoc, chunks layout) and
%% installed beside ebin.
-module(tensor_blob_docs_tests).

-include_lib("eunit/include/eunit.hrl").

%% EUnit's group leader has no terminal options: say them.
-define(CONFIG, #{encoding => unicode, ansi => false, columns => 80}).

docs_chunk_test() ->
    {ok, Docs} = fetch(),
    {docs_v1, _, erlang, _, #{<<"en">> := ModuleDoc}, _, Entries} = Docs,
    ?assertNotEqual(nomatch, binary:match(text(ModuleDoc), <<"Zero-copy tensor exchange">>)),
    %% Every exported API function is documented, with its spec.
    Documented = [{F, A} || {{function, F, A}, _, _, #{<<"en">> := _}, _} <- Entries],
    [?assert(lists:member(FA, Documented))
     || FA <- [{to_blob, 1}, {from_blob, 1}, {from_blob, 2}, {to_dlpack, 2}, {from_binary, 4}]].

shell_docs_render_test() ->
    {ok, Docs} = fetch(),
    Text = render(fun() -> shell_docs:render(tensor_blob, to_blob, Docs, ?CONFIG) end),
    ?assertNotEqual(nomatch, binary:match(Text, <<"the blob's owner is T">>)),
    ?assertNotEqual(nomatch, binary:match(Text, <<"-spec to_blob(">>)),
    FromBlob = render(fun() -> shell_docs:render(tensor_blob, from_blob, 1, Docs, ?CONFIG) end),
    ?assertNotEqual(nomatch, binary:match(FromBlob, <<"owner => none">>)).

fetch() ->
    case code:get_doc(tensor_blob) of
        {ok, _} = Ok -> Ok;
        Error -> erlang:error({no_docs, Error, code:which(tensor_blob)})
    end.

%% The text of an application/erlang+html document.
text(Doc) when is_binary(Doc) -> Doc;
text(Doc) when is_list(Doc) -> iolist_to_binary([text(E) || E <- Doc]);
text({_Tag, _Attrs, Content}) -> text(Content).

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
