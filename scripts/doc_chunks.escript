#!/usr/bin/env escript
%% The doc chunks (EEP 48) of the Erlang API, for h(tensor_blob, to_blob)
%% in the shell, written into Dir/chunks:
%%
%%     escript scripts/doc_chunks.escript Dir "Public ..." "Internal ..."
%%
%% Public: the modules of the Erlang API, documented. edoc's chunks layout
%% lists every function of a module, exported or not (the others with an
%% empty doc), and cuts a signature into one binary per argument, which the
%% shell prints one per line: each chunk keeps what its module exports,
%% each signature whole. Internal: the other modules (@private), whose
%% chunks say hidden, with no entries. Without edoc (Debian's erlang-edoc)
%% nothing is written, with a note: the library builds, and h/2 has no text.
main([Dir, Public, Internal]) ->
    case code:which(edoc) of
        non_existing ->
            io:format("note: edoc is not installed (Debian: erlang-edoc), so the Erlang API has no doc chunks~n");
        _ ->
            [public(Dir, M) || M <- string:lexemes(Public, " ")],
            [ok = file:write_file(chunk(Dir, M), term_to_binary({docs_v1, erl_anno:new(1), erlang,
                                                                 <<"application/erlang+html">>, hidden, #{}, []}))
             || M <- string:lexemes(Internal, " ")],
            ok
    end.

public(Dir, M) ->
    Source = filename:join("src", M ++ ".erl"),
    ok = edoc:files([Source], [{doclet, edoc_doclet_chunks}, {layout, edoc_layout_chunks},
                               {dir, Dir}, {preprocess, true}]),
    {ok, Bin} = file:read_file(chunk(Dir, M)),
    {docs_v1, Anno, Lang, Format, ModuleDoc, Meta, Entries} = binary_to_term(Bin),
    {ok, Forms} = epp:parse_file(Source, [{includes, ["src"]}]),
    Exported = #{function => lists:append([Fs || {attribute, _, export, Fs} <- Forms]),
                 type => lists:append([Ts || {attribute, _, export_type, Ts} <- Forms])},
    Kept = [{{Kind, F, A}, EAnno, whole(Sig), Doc, EMeta}
            || {{Kind, F, A}, EAnno, Sig, Doc, EMeta} <- Entries,
               lists:member({F, A}, maps:get(Kind, Exported, [{F, A}]))],
    ok = file:write_file(chunk(Dir, M), term_to_binary({docs_v1, Anno, Lang, Format, ModuleDoc, Meta, Kept})).

%% A signature in one binary: the pieces joined, a space after each comma.
whole(Pieces) ->
    Joined = iolist_to_binary([case binary:last(P) of $, -> [P, " "]; _ -> P end || P <- Pieces, P =/= <<>>]),
    [string:trim(Joined, trailing, "\n")].

chunk(Dir, M) ->
    filename:join([Dir, "chunks", M ++ ".chunk"]).
