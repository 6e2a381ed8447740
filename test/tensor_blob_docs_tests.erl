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

%% Every function a public module exports has documentation: the modules of
%% the application, their doc chunks made as make makes tensor_blob's
%% (edoc, chunks layout) from their sources. A module marked @private is
%% not public (tensor_blob_nif, tensor_blob_telemetry).
every_export_documented_test_() ->
    {timeout, 120, fun every_export_documented/0}.

every_export_documented() ->
    Dir = filename:join(["_build", "docs_tests", os:getpid()]),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    _ = application:load(tensor_blob),
    {ok, Modules} = application:get_key(tensor_blob, modules),
    try
        Missing = lists:append([undocumented(M, Dir) || M <- lists:sort(Modules), is_library_module(M)]),
        ?assertEqual([], Missing)
    after
        file:del_dir_r(Dir)
    end.

%% The library's own modules: those built from src/ (the tests' support
%% modules are built into the application too).
is_library_module(M) ->
    Source = proplists:get_value(source, M:module_info(compile)),
    filename:basename(filename:dirname(Source)) =:= "src".

undocumented(M, Dir) ->
    Source = proplists:get_value(source, M:module_info(compile)),
    ok = edoc:files([Source], [{doclet, edoc_doclet_chunks}, {layout, edoc_layout_chunks}, {dir, Dir},
                               {preprocess, true}]),
    {ok, Chunk} = file:read_file(filename:join([Dir, "chunks", atom_to_list(M) ++ ".chunk"])),
    {docs_v1, _, erlang, _, ModuleDoc, _, Entries} = binary_to_term(Chunk),
    case ModuleDoc of
        hidden -> [];
        _ ->
            Docs = maps:from_list([{{F, A}, D} || {{function, F, A}, _, _, D, _} <- Entries]),
            [{M, F, A} || {F, A} <- M:module_info(exports), F =/= module_info,
                          not documented(maps:get({F, A}, Docs, none))]
    end.

documented(#{<<"en">> := _}) -> true;
%% @private in its source: exported for the library's own modules (the
%% Elixir facade, the same module on another node), hidden from h/2 on
%% purpose.
documented(hidden) -> true;
documented(_) -> false.

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
