%% The Erlang side of make docs-test (scripts/docs_test.exs): evaluates the
%% Erlang blocks of one Markdown file in order, as the shell would, sharing
%% their bindings, and checks each `% => Pattern` and `% ** Class: Pattern`.
%% Reads [{Line, run | parse, [{ChunkLine, Code, Expect}]}] from In and
%% writes [{ran, Line} | {parsed, Line} | {fail, Line, Message}] to Out.
-module(docs_test).
-export([main/2]).

main(In, Out) ->
    {ok, Bin} = file:read_file(In),
    Blocks = binary_to_term(Bin),
    {Results, _} = lists:mapfoldl(fun block/2, erl_eval:new_bindings(), Blocks),
    ok = file:write_file(Out, term_to_binary(Results)).

block({Line, parse, Chunks}, Bindings) ->
    Result = lists:foldl(
               fun({L, Code, _}, ok) ->
                       case parse(Code) of
                           {ok, _} -> ok;
                           {error, Why} -> {fail, L, Why}
                       end;
                  (_, Failed) -> Failed
               end, ok, Chunks),
    {case Result of ok -> {parsed, Line}; Failed -> Failed end, Bindings};
block({Line, run, Chunks}, Bindings0) ->
    lists:foldl(
      fun(Chunk, {{ran, _}, Bindings}) -> chunk(Line, Chunk, Bindings);
         (_, Failed) -> Failed
      end, {{ran, Line}, Bindings0}, Chunks).

chunk(Line, {L, Code, Expect}, Bindings) ->
    case parse(Code) of
        {error, Why} ->
            {{fail, L, Why}, Bindings};
        {ok, Exprs} ->
            %% Before a raise expectation, the expressions before the last
            %% run as usual; the last one must raise.
            {Init, Last} = case Expect of
                               {raise, _} -> lists:split(length(Exprs) - 1, Exprs);
                               _ -> {[], Exprs}
                           end,
            Result = try erl_eval:exprs(Init ++ [{atom, 1, ok}], Bindings) of
                         {value, _, B0} ->
                             try erl_eval:exprs(Last, B0) of
                                 {value, V, B} -> {value, V, B}
                             catch Class:Reason:Stack -> {raised, Class, Reason, Stack, B0}
                             end
                     catch Class:Reason:Stack -> {raised, Class, Reason, Stack, Bindings}
                     end,
            case check(Result, Expect, Bindings) of
                {ok, B1} -> {{ran, Line}, B1};
                {fail, Why} -> {{fail, L, Why}, Bindings}
            end
    end.

check({value, _, B}, none, _) -> {ok, B};
check({value, V, B}, {value, Pattern}, _) ->
    case match(Pattern, V, B) of
        {ok, B1} -> {ok, B1};
        nomatch -> {fail, fmt("gives ~tp, which does not match ~ts", [V, Pattern])};
        {error, Why} -> {fail, Why}
    end;
check({value, V, _}, {raise, Text}, _) ->
    {fail, fmt("should raise ~ts, but gives ~tp", [Text, V])};
check({raised, Class, Reason, _, B}, {raise, Text}, _) ->
    {ClassText, Pattern} = split_class(Text),
    case atom_to_list(Class) of
        ClassText ->
            case match(Pattern, Reason, B) of
                {ok, _} -> {ok, B};
                nomatch -> {fail, fmt("raises ~ts: ~tp, the block says ~ts", [Class, Reason, Text])};
                {error, Why} -> {fail, Why}
            end;
        _ ->
            {fail, fmt("raises ~ts: ~tp, the block says ~ts", [Class, Reason, Text])}
    end;
check({raised, Class, Reason, Stack, _}, _, _) ->
    {fail, fmt("raises ~ts: ~tp~n~tp", [Class, Reason, Stack])}.

split_class(Text) ->
    {Class, [$: | Rest]} = lists:splitwith(fun(C) -> C =/= $: end, Text),
    {string:trim(Class), Rest}.

match(Pattern, Value, Bindings) ->
    case parse("(" ++ Pattern ++ ") = DocsValue__") of
        {ok, Exprs} ->
            try erl_eval:exprs(Exprs, erl_eval:add_binding('DocsValue__', Value, Bindings)) of
                {value, _, B} -> {ok, erl_eval:del_binding('DocsValue__', B)}
            catch error:{badmatch, _} -> nomatch
            end;
        {error, Why} ->
            {error, Why}
    end.

%% A chunk is a run of expressions, as typed in the shell: a trailing comma
%% or full stop ends it either way.
parse(Code) ->
    case erl_scan:string(Code) of
        {ok, Tokens0, End} ->
            Tokens = case lists:reverse(Tokens0) of
                         [{Sep, _} | Rest] when Sep =:= ','; Sep =:= dot -> lists:reverse(Rest);
                         _ -> Tokens0
                     end,
            case erl_parse:parse_exprs(Tokens ++ [{dot, End}]) of
                {ok, Exprs} -> {ok, Exprs};
                {error, {_, M, E}} -> {error, fmt("does not parse: ~ts", [M:format_error(E)])}
            end;
        {error, {_, M, E}, _} ->
            {error, fmt("does not scan: ~ts", [M:format_error(E)])}
    end.

fmt(Format, Args) -> unicode:characters_to_binary(io_lib:format(Format, Args)).
