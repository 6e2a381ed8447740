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

%% The chunk holds exactly what the module exports: no entry for a function
%% or type it does not export (edoc lists every function of the module, the
%% others with an empty doc), none missing.
chunk_holds_the_exports_test() ->
    {ok, {docs_v1, _, erlang, _, _, _, Entries}} = fetch(),
    Exports = lists:sort([FA || {F, _} = FA <- tensor_blob:module_info(exports), F =/= module_info]),
    ?assertEqual(Exports, lists:sort([{F, A} || {{function, F, A}, _, _, _, _} <- Entries])),
    ?assertEqual(lists:sort(exported_types()), lists:sort([{T, A} || {{type, T, A}, _, _, _, _} <- Entries])).

%% Each entry has its doc: text, or hidden where the function is exported
%% for the library's own modules (@private in the source).
every_entry_has_a_doc_test() ->
    {ok, {docs_v1, _, erlang, _, _, _, Entries}} = fetch(),
    ?assertEqual([], [KFA || {KFA, _, _, Doc, _} <- Entries, not has_doc(Doc)]).

%% Each function has its spec, which h/2 shows as the function's head.
every_function_has_a_spec_test() ->
    {ok, {docs_v1, _, erlang, _, _, _, Entries}} = fetch(),
    ?assertEqual([], [KFA || {{function, _, _} = KFA, _, _, _, Meta} <- Entries,
                             not is_map_key(signature, Meta)]).

%% A signature is one line, Name(Arg, ...): the shell prints each binary of
%% the list on a line of its own.
signatures_are_whole_test() ->
    {ok, {docs_v1, _, erlang, _, _, _, Entries}} = fetch(),
    Broken = [{KFA, Sig} || {{function, F, _} = KFA, _, Sig, _, _} <- Entries,
                            not whole_signature(F, Sig)],
    ?assertEqual([], Broken).

%% The functions the module's doc names (to_blob/1, from_blob/1,2) are
%% exported: the doc points at nothing that is not there.
moduledoc_names_exports_test() ->
    {ok, {docs_v1, _, erlang, _, #{<<"en">> := ModuleDoc}, _, _}} = fetch(),
    Text = text(ModuleDoc),
    {match, Named} = re:run(Text, <<"\\b([a-z][a-z0-9_]*)/([0-9]+(?:,[0-9]+)*)">>,
                            [global, {capture, all_but_first, binary}]),
    Exports = tensor_blob:module_info(exports),
    Missing = [{F, A} || [Name, Arities] <- Named, Ar <- binary:split(Arities, <<",">>, [global]),
                         F <- [binary_to_atom(Name)], A <- [binary_to_integer(Ar)],
                         not lists:member({F, A}, Exports)],
    ?assertEqual([], Missing),
    ?assertEqual(nomatch, binary:match(Text, <<"below">>)).

%% The Erlang API: the modules whose chunks hold their docs.
-define(PUBLIC, [tensor_blob, tensor_blob_ipc, tensor_blob_options, tensor_blob_door, tensor_blob_python,
                 tensor_blob_safetensors]).

%% The API's other modules have their docs too, as tensor_blob's.
public_modules_documented_test() ->
    [begin
         {ok, {docs_v1, _, erlang, _, #{<<"en">> := _}, _, Entries}} = code:get_doc(M),
         Exports = lists:sort([FA || {F, _} = FA <- M:module_info(exports), F =/= module_info]),
         ?assertEqual(Exports, lists:sort([{F, A} || {{function, F, A}, _, _, _, _} <- Entries]))
     end || M <- ?PUBLIC].

%% The library's other modules are internal: their docs say hidden, so
%% h/1 shows none of their functions.
internal_modules_hidden_test() ->
    _ = application:load(tensor_blob),
    {ok, Modules} = application:get_key(tensor_blob, modules),
    Internal = [M || M <- Modules, not lists:member(M, ?PUBLIC), is_library_module(M)],
    ?assert(lists:member(tensor_blob_error, Internal)),
    ?assertEqual([], [{M, Doc} || M <- Internal,
                                  Doc <- [case code:get_doc(M) of
                                              {ok, {docs_v1, _, _, _, D, _, _}} -> D;
                                              Error -> Error
                                          end],
                                  Doc =/= hidden]).

exported_types() ->
    {ok, {tensor_blob, [{abstract_code, {raw_abstract_v1, Forms}}]}} =
        beam_lib:chunks(code:which(tensor_blob), [abstract_code]),
    lists:append([Ts || {attribute, _, export_type, Ts} <- Forms]).

has_doc(#{<<"en">> := Doc}) -> text(Doc) =/= <<>>;
has_doc(hidden) -> true;
has_doc(_) -> false.

whole_signature(F, [Sig]) when is_binary(Sig) ->
    Prefix = <<(atom_to_binary(F))/binary, "(">>,
    binary:longest_common_prefix([Sig, Prefix]) =:= byte_size(Prefix)
        andalso binary:last(Sig) =:= $)
        andalso binary:match(Sig, <<"\n">>) =:= nomatch;
whole_signature(_, _) -> false.

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
