%% @private
%% Errors: raising messages built as segments, rendering them the Erlang
%% way, and cutting terms down to a bounded tree. tensor_blob's
%% format_error/2 and error_reason/1 are these; the Elixir facade
%% (TensorBlob.Raise) calls error_message/2, prune/1 and
%% big_integer_text/2 here.
-module(tensor_blob_error).

-export([badarg/3, raise/4, nif_error/3, dtype_error/4, not_a_tensor/1]).
-export([format_error/2, error_message/2, error_reason/1, prune/1, big_integer_text/2]).

-export_type([segment/0, pruned/0, cause/0]).

%% The module an error's error_info names: the public one, whose
%% format_error/2 (this module's) the Erlang shell calls.
-define(ERROR_INFO_MODULE, tensor_blob).

%%--------------------------------------------------------------------
%% Errors
%%
%% An error carries, as data, its reason (an atom, a row of the reason
%% table: tables/0's reasons, c_src/beam/tb_raise.h) and the argument it is
%% about (an atom, or none), beside its message; code decides on those,
%% never on the message's text. A message is built once, as segments: text
%% (a string or a binary), {term, Term} (printed as the caller's language
%% prints terms) and {code, Erlang, Elixir} (code, spelled in each
%% language). Each facade renders the segments its own way: this module the
%% Erlang way into error({Kind, Message}), keeping reason, argument and
%% segments as the cause of the stacktrace's error_info (error_reason/1
%% reads them), from which the Elixir facade renders them the Elixir way.
%%
%% A term is cut down first (prune/1) to a bounded tree that both renderers
%% print in full, so that any term, however large or deep, is rendered in
%% bounded time: at most ?TERM_ITEMS elements of a list, tuple or map, at
%% most ?TERM_DEPTH levels, at most ?TERM_NODES terms in all. A pruned term
%% is one of:
%%   {whole, Term}              Term, all of it
%%   elided                     a term not shown (...)
%%   {list, [Node], Tail}       Tail: [] (the end), more (elements not
%%                              shown) or {tail, Node} (an improper tail)
%%   {tuple, [Node], More}      More: true when elements are not shown
%%   {map, [{Node, Node}], More}
%%   {big_integer, Sign, Bits}  an integer too large to print (printing
%%                              one of 200,000 bits takes most of a second
%%                              and 60 KB): its sign (1 or -1) and size
%%--------------------------------------------------------------------

-type segment() :: unicode:chardata() | {term, term()} | {code, unicode:chardata(), unicode:chardata()}.
-type pruned() :: {whole, term()} | elided | {list, [pruned()], [] | more | {tail, pruned()}}
                | {tuple, [pruned()], boolean()} | {map, [{pruned(), pruned()}], boolean()}
                | {big_integer, 1 | -1, pos_integer()}.
-type nif_cause() :: #{reason := atom(), argument := atom(), message := [segment()]}.
-type cause() :: #{reason := atom(), argument := atom(),
                   message := [binary() | {term, pruned()} | {code, binary(), binary()}]}.

-define(TERM_ITEMS, 50).
-define(TERM_DEPTH, 20).
-define(TERM_NODES, 400).
%% The Erlang rendering of the terms of one message stays near this many
%% characters: io_lib trims what is left (as `...').
-define(MESSAGE_CHARS, 1024).

%% Bad input: Reason (a row of tables()'s reasons) about Argument (the
%% argument or field the message names first, or none).
-spec badarg(atom(), atom(), [segment()]) -> no_return().
badarg(Reason, Argument, Message) ->
    raise(badarg, Reason, Argument, Message).

%% Raises error({Kind, Message}), Message rendered the Erlang way, with
%% reason, argument and segments as the error's cause (error_info).
-spec raise(badarg | tensor_blob, atom(), atom(), [segment()]) -> no_return().
raise(Kind, Reason, Argument, Message) ->
    Cause = cause(Reason, Argument, Message),
    erlang:error({Kind, erlang_message(Cause)}, none, [{error_info, error_info(Cause)}]).

%% An error the NIF raised, with its segments: rendered, and re-raised with
%% the NIF's own stacktrace, whose top frame (the NIF call) now carries the
%% cause as raise/2's errors do, and the arity in place of the arguments:
%% an argument may be any term, and a huge or deep one in a stacktrace
%% costs whoever formats or normalizes it (Elixir's rescue does). Where a
%% tensor was expected (not_a_tensor), a reference of another node says
%% so, and so does a reference that was made for native data (a freed
%% tensor's, reason gone); any other error is left as it is.
-spec nif_error(badarg | tensor_blob, nif_cause(), erlang:stacktrace()) -> no_return().
nif_error(badarg, #{reason := not_a_tensor, argument := Argument, message := Message}, Stack) ->
    case [T || {term, T} <- Message] of
        [Ref] when is_reference(Ref), node(Ref) =/= node() ->
            nif_raise(badarg, not_a_tensor, Argument, other_node(Argument, Ref), Stack);
        [Ref] when is_reference(Ref) ->
            nif_raise(badarg, not_a_tensor, Argument, no_live_tensor(Argument, Ref), Stack);
        _ ->
            nif_raise(badarg, not_a_tensor, Argument, Message, Stack)
    end;
nif_error(Kind, #{reason := Reason, argument := Argument, message := Message}, Stack) ->
    nif_raise(Kind, Reason, Argument, Message, Stack).

-spec nif_raise(badarg | tensor_blob, atom(), atom(), [segment()], erlang:stacktrace()) -> no_return().
nif_raise(Kind, Reason, Argument, Message, [{M, F, Args, Location} | Stack]) ->
    Cause = cause(Reason, Argument, Message),
    Arity = if is_list(Args) -> length(Args); true -> Args end,
    erlang:raise(error, {Kind, erlang_message(Cause)},
                 [{M, F, Arity, [{error_info, error_info(Cause)} | Location]} | Stack]).

error_info(Cause) ->
    #{module => ?ERROR_INFO_MODULE, cause => Cause}.

-spec cause(atom(), atom(), [segment()]) -> cause().
cause(Reason, Argument, Message) ->
    #{reason => Reason, argument => Argument, message => [segment(S) || S <- Message]}.

segment({term, Term}) -> {term, prune(Term)};
segment({code, Erlang, Elixir}) -> {code, unicode:characters_to_binary(Erlang), unicode:characters_to_binary(Elixir)};
segment(Text) -> unicode:characters_to_binary(Text).

%% @private Term cut down to a tree of bounded size (see Errors above); the
%% work is bounded by that size, whatever Term is. The Elixir facade prints
%% terms of its own messages through it too.
-spec prune(term()) -> pruned().
prune(Term) ->
    element(1, prune(Term, ?TERM_DEPTH, ?TERM_NODES)).

%% Integers of more bits than this are shown by their size alone.
-define(BIG_INTEGER, (1 bsl 256)).

%% {Pruned, NodesLeft}
prune(Term, _Depth, Nodes) when is_integer(Term), (Term >= ?BIG_INTEGER orelse Term =< -?BIG_INTEGER) ->
    Sign = if Term < 0 -> -1; true -> 1 end,
    <<Top, _/binary>> = Bytes = binary:encode_unsigned(abs(Term)),
    Bits = (byte_size(Bytes) - 1) * 8 + bit_length(Top),
    {{big_integer, Sign, Bits}, Nodes - 1};
prune(Term, Depth, Nodes) ->
    case is_container(Term) of
        false -> {{whole, Term}, Nodes - 1};
        true when Depth =< 0; Nodes =< 0 -> {elided, Nodes};
        true -> prune_container(Term, Depth - 1, Nodes - 1)
    end.

is_container(T) ->
    (is_list(T) andalso T =/= []) orelse (is_tuple(T) andalso tuple_size(T) > 0)
        orelse (is_map(T) andalso map_size(T) > 0).

prune_container(List, Depth, Nodes) when is_list(List) ->
    prune_list(List, List, 0, Depth, Nodes, []);
prune_container(Tuple, Depth, Nodes) when is_tuple(Tuple) ->
    Shown = min(tuple_size(Tuple), ?TERM_ITEMS),
    {Items, Left} = prune_items([element(I, Tuple) || I <- lists:seq(1, Shown)], Depth, Nodes, []),
    More = length(Items) < tuple_size(Tuple),
    {whole_or({tuple, Items, More}, Tuple, not More andalso all_whole(Items)), Left};
prune_container(Map, Depth, Nodes) ->
    {Pairs, Left} = prune_pairs(maps:next(maps:iterator(Map)), 0, Depth, Nodes, []),
    More = length(Pairs) < map_size(Map),
    {whole_or({map, Pairs, More}, Map, not More andalso all_whole([N || {K, V} <- Pairs, N <- [K, V]])), Left}.

%% An element not shown ends the elements shown: the rest is one elision.
prune_list(Whole, [H | T], Count, Depth, Nodes, Acc) when Count < ?TERM_ITEMS, Nodes > 0 ->
    case prune(H, Depth, Nodes) of
        {elided, Left} -> {{list, lists:reverse(Acc), more}, Left};
        {Node, Left} -> prune_list(Whole, T, Count + 1, Depth, Left, [Node | Acc])
    end;
prune_list(_Whole, [_ | _], _Count, _Depth, Nodes, Acc) ->
    {{list, lists:reverse(Acc), more}, Nodes};
prune_list(Whole, Tail, _Count, Depth, Nodes, Acc) ->
    {TailNode, Left} = case Tail of
                           [] -> {[], Nodes};
                           _ -> {Node, L} = prune(Tail, Depth, Nodes), {{tail, Node}, L}
                       end,
    Items = lists:reverse(Acc),
    Complete = all_whole(Items) andalso (TailNode =:= [] orelse all_whole([element(2, TailNode)])),
    {whole_or({list, Items, TailNode}, Whole, Complete), Left}.

prune_items([H | T], Depth, Nodes, Acc) when Nodes > 0 ->
    case prune(H, Depth, Nodes) of
        {elided, Left} -> {lists:reverse(Acc), Left};
        {Node, Left} -> prune_items(T, Depth, Left, [Node | Acc])
    end;
prune_items(_, _Depth, Nodes, Acc) ->
    {lists:reverse(Acc), Nodes}.

%% A value not shown is shown as an elision after its key; a key not shown
%% ends the pairs shown.
prune_pairs({K, V, Next}, Count, Depth, Nodes, Acc) when Count < ?TERM_ITEMS, Nodes > 0 ->
    case prune(K, Depth, Nodes) of
        {elided, Left} ->
            {lists:reverse(Acc), Left};
        {KeyNode, Left1} ->
            case prune(V, Depth, Left1) of
                {elided, Left2} -> {lists:reverse(Acc, [{KeyNode, elided}]), Left2};
                {ValueNode, Left2} -> prune_pairs(maps:next(Next), Count + 1, Depth, Left2, [{KeyNode, ValueNode} | Acc])
            end
    end;
prune_pairs(_, _Count, _Depth, Nodes, Acc) ->
    {lists:reverse(Acc), Nodes}.

all_whole(Nodes) ->
    lists:all(fun({whole, _}) -> true; (_) -> false end, Nodes).

whole_or(_Cut, Term, true) -> {whole, Term};
whole_or(Cut, _Term, false) -> Cut.

%% The message the Erlang way: terms printed as io_lib prints them, on one
%% line, within ?MESSAGE_CHARS characters in all.
-spec erlang_message(cause()) -> binary().
erlang_message(#{message := Segments}) ->
    {Text, _} = lists:mapfoldl(fun erlang_segment/2, ?MESSAGE_CHARS, Segments),
    unicode:characters_to_binary(Text).

erlang_segment({term, Node}, Chars) -> erlang_term(Node, Chars);
erlang_segment({code, Erlang, _Elixir}, Chars) -> {Erlang, Chars};
erlang_segment(Text, Chars) -> {Text, Chars}.

bit_length(0) -> 0;
bit_length(N) -> 1 + bit_length(N bsr 1).

%% @private What both facades show for {big_integer, Sign, Bits}.
-spec big_integer_text(1 | -1, pos_integer()) -> binary().
big_integer_text(Sign, Bits) ->
    Text = io_lib:format("<~s integer of ~b bits>", [case Sign of -1 -> "a negative"; 1 -> "an" end, Bits]),
    unicode:characters_to_binary(Text).

%% {Text, CharsLeft}
erlang_term(elided, Chars) ->
    {"...", Chars - 3};
erlang_term({big_integer, Sign, Bits}, Chars) ->
    Text = big_integer_text(Sign, Bits),
    {Text, Chars - byte_size(Text)};
erlang_term(_Node, Chars) when Chars =< 0 ->
    {"...", Chars};
erlang_term({whole, Term}, Chars) ->
    Text = unicode:characters_to_binary(io_lib:format("~0tp", [Term], [{chars_limit, Chars}])),
    {Text, Chars - string:length(Text)};
erlang_term({list, Items, Tail}, Chars) ->
    {Shown, Left, Cut} = erlang_items(Items, Chars - 2),
    {TailText, Left2} = case Tail of
                            _ when Cut; Tail =:= more -> {more_text(Shown, true, "|"), Left - 4};
                            [] -> {"", Left};
                            {tail, Node} -> {T, L} = erlang_term(Node, Left - 1), {["|", T], L}
                        end,
    {["[", lists:join(",", Shown), TailText, "]"], Left2};
erlang_term({tuple, Items, More}, Chars) ->
    {Shown, Left, Cut} = erlang_items(Items, Chars - 2),
    {["{", lists:join(",", Shown), more_text(Shown, More orelse Cut, ","), "}"], Left - 4};
erlang_term({map, Pairs, More}, Chars) ->
    {Shown, Left, Cut} = erlang_items(Pairs, Chars - 3),
    {["#{", lists:join(",", Shown), more_text(Shown, More orelse Cut, ","), "}"], Left - 4};
erlang_term({Key, Value}, Chars) ->
    %% A map's pair.
    {KeyText, Left} = erlang_term(Key, Chars),
    {ValueText, Left2} = erlang_term(Value, Left - 4),
    {[KeyText, " => ", ValueText], Left2}.

%% {Texts, CharsLeft, Cut}: the items that fit in Chars; Cut when some did
%% not.
erlang_items(Items, Chars) ->
    erlang_items(Items, Chars, []).

erlang_items([], Chars, Acc) ->
    {lists:reverse(Acc), Chars, false};
erlang_items(_Items, Chars, Acc) when Chars =< 0 ->
    {lists:reverse(Acc), Chars, true};
erlang_items([Item | Rest], Chars, Acc) ->
    {Text, Left} = erlang_term(Item, Chars),
    erlang_items(Rest, Left - 1, [Text | Acc]).

more_text(_Shown, false, _Separator) -> "";
more_text([], true, _Separator) -> "...";
more_text(_Shown, true, Separator) -> [Separator, "..."].

%% @doc The error_info callback of erl_error (the Erlang shell): the
%% error's reason, {Kind, Message}, printed whole and once (by default the
%% shell prints the reason cut short, then a general explanation again).
-spec format_error(term(), erlang:stacktrace()) -> #{reason => unicode:chardata()}.
format_error({Kind, Message}, _Stack) when is_atom(Kind), is_binary(Message) ->
    Shown = io_lib:format("{~w,~p}", [Kind, Message]),
    #{reason => Shown};
format_error(_Reason, _Stack) ->
    #{}.

%% @doc The segments of an error raised by this module or by the NIF
%% through it (from the top frame's error_info), its terms pruned, or none:
%% what the Elixir facade renders.
-spec error_message(term(), erlang:stacktrace()) -> [binary() | {term, pruned()} | {code, binary(), binary()}] | none.
error_message({Kind, Message}, [{_, _, _, Info} | _]) when is_atom(Kind), is_binary(Message), is_list(Info) ->
    case proplists:get_value(error_info, Info) of
        #{module := ?ERROR_INFO_MODULE, cause := #{message := Segments}} -> Segments;
        _ -> none
    end;
error_message(_Reason, _Stack) ->
    none.

%% What an error raised by this library carries as data, read from its
%% stacktrace (tensor_blob:error_reason/1): its reason (a row of tables()'s
%% reasons) and the argument it is about (an atom naming the argument or
%% field, or none); none for an error of anyone else.
-spec error_reason(erlang:stacktrace()) -> #{reason := atom(), argument := atom()} | none.
error_reason([{_, _, _, Info} | _]) ->
    case frame_error_info(Info) of
        #{module := ?ERROR_INFO_MODULE, cause := #{reason := Reason, argument := Argument}} ->
            #{reason => Reason, argument => Argument};
        _ -> none
    end;
error_reason(_Stack) ->
    none.

%% A frame's error_info, read from whatever the frame holds (an improper
%% or malformed list included: a stacktrace can be any term a caller made).
frame_error_info([{error_info, Info} | _]) -> Info;
frame_error_info([_ | Rest]) -> frame_error_info(Rest);
frame_error_info(_) -> none.

%% A reference made on another node, where a tensor was expected (the
%% argument Argument): a tensor that was sent as it is.
other_node(Argument, Ref) ->
    [atom_to_binary(Argument), ": ", {term, Ref}, " is a reference made on node ", {term, node(Ref)},
     ": a tensor belongs to the node (the OS process) that made it, and reaches any other only as a dead "
     "reference. Move it with ", {code, "tensor_blob:node_pack/2", "TensorBlob.Nodes.pack/2"},
     " on the sending node and ", {code, "tensor_blob:node_unpack/1", "TensorBlob.Nodes.unpack/1"}, " on this one"].

%% A reference of this node that the NIF does not know as a tensor: one
%% that never was a tensor's, or a tensor's that outlived it (kept as
%% term_to_binary's output, read back after the last holder dropped the
%% tensor). The VM documents no way to tell them apart: the message says
%% both.
no_live_tensor(Argument, Ref) ->
    [atom_to_binary(Argument), ": expected a tensor, got ", {term, Ref}, ", a reference that names no live tensor: "
     "a tensor that was freed (its last holder dropped it; a reference kept only as term_to_binary's output, on "
     "disk or in another process's memory, does not keep a tensor alive), or a reference that never was a "
     "tensor's. Keep the tensor itself for as long as it is used"].

%% A term given where a tensor is expected: say what it is and what to do.
-spec not_a_tensor(term()) -> no_return().
not_a_tensor(#{'__struct__' := 'Elixir.Nx.Tensor'} = T) ->
    badarg(not_a_tensor, tensor, ["tensor: expected a tensor, got an Nx tensor: convert it with ",
                                  {code, "'Elixir.TensorBlob.Nx':from_nx/2", "TensorBlob.Nx.from_nx/2"},
                                  " first (a view where the backend allows, else a copy). Got: ", {term, T}]);
not_a_tensor(#{'__struct__' := 'Elixir.TensorBlob.BlobView'} = T) ->
    badarg(not_a_tensor, tensor, ["tensor: expected a tensor, got a blob view: its tensor is ",
                                  {code, "maps:get(tensor, View)", "view.tensor"}, ". Got: ", {term, T}]);
not_a_tensor(#{'__struct__' := 'Elixir.TensorBlob.Blob'} = T) ->
    badarg(not_a_tensor, tensor, ["tensor: expected a tensor, got a blob: view its memory with ",
                                  {code, "tensor_blob:from_blob/1", "TensorBlob.from_blob/2"}, ". Got: ", {term, T}]);
not_a_tensor(#{'__struct__' := 'Elixir.TensorBlob.DLPack'} = T) ->
    badarg(not_a_tensor, tensor,
           ["tensor: expected a tensor, got a DLPack capsule: import it with ",
            {code, "tensor_blob:from_dlpack/1", "TensorBlob.DLPack.import/2"}, ". Got: ", {term, T}]);
not_a_tensor(T) ->
    badarg(not_a_tensor, tensor, ["tensor: expected a tensor, got ", {term, T}]).

%% After an error from a NIF given Dtype (or a spec holding one): when it
%% is a badarg and Dtype is not a dtype at all, raise a message listing the
%% valid ones; otherwise the NIF's own error stands.
-spec dtype_error(term(), badarg | tensor_blob, nif_cause(), erlang:stacktrace()) ->
          no_return().
dtype_error({spec, #{dtype := Dtype}}, Kind, Cause, Stack) ->
    dtype_error(Dtype, Kind, Cause, Stack);
dtype_error({spec, _}, Kind, Cause, Stack) ->
    nif_error(Kind, Cause, Stack);
dtype_error(_Dtype, tensor_blob, Cause, Stack) ->
    nif_error(tensor_blob, Cause, Stack);
dtype_error(Dtype, badarg, Cause, Stack) ->
    try tensor_blob_nif:nx_type(Dtype) of
        _ -> nif_error(badarg, Cause, Stack)
    catch
        error:{badarg, _} ->
            badarg(bad_dtype, dtype,
                   ["dtype: unknown dtype ", {term, Dtype}, "; expected one of ", {term, tensor_blob_nif:dtypes()},
                    " (those this libtorch holds), an ExTorch name (such as ", {term, float}, " or ", {term, long},
                    ") or an Nx type (such as ", {term, {f, 32}}, " or ", {term, f32}, ")"])
    end.
