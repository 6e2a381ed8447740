%% @private
%% JSON text to terms, for what the library reads in JSON: the maps of
%% shared tensors (TensorBlob.IPC) and the index of a sharded safetensors
%% checkpoint. The library depends on no JSON package: on OTP 27 and later,
%% stdlib's json module decodes (stdlib); on older OTPs the decoder below
%% does (fallback). Both give the same terms: objects as maps with binary
%% keys, arrays as lists, strings as binaries, integers, true, false, and
%% null as nil; a number with a fraction or an exponent is refused. An
%% object that names a key twice is refused by both, naming the key:
%% decoders differ on which value such a key has, so one text would be two
%% terms. Both run in time and memory linear in the text; callers bound
%% the text's length.
-module(tensor_blob_json).

%% The float decoder only throws, on purpose.
-dialyzer({nowarn_function, decode/2}).

-export([decode/1, decode/2, backend/0]).

-type backend() :: stdlib | fallback.
-type result() :: {ok, term()} | {error, {duplicate_key, binary()}} | error.

%% stdlib where stdlib has json (OTP 27), else fallback.
-spec backend() -> backend().
backend() ->
    case persistent_term:get({?MODULE, backend}, undefined) of
        undefined ->
            Found = case code:ensure_loaded(json) of
                        {module, json} -> stdlib;
                        _ -> fallback
                    end,
            persistent_term:put({?MODULE, backend}, Found),
            Found;
        Found ->
            Found
    end.

-spec decode(binary()) -> result().
decode(Text) -> decode(Text, backend()).

-spec decode(binary(), backend()) -> result().
decode(Text, stdlib) when is_binary(Text) ->
    %% A float fails the decoder's fun; an object is made by object_finish,
    %% which refuses a repeated key. Called through a variable: on OTPs
    %% before 27 the module does not exist.
    Json = json,
    Decoders = #{null => nil, float => fun(_) -> throw(float) end, object_finish => fun object_finish/2},
    try Json:decode(Text, ok, Decoders) of
        {Value, ok, Rest} ->
            case skip(Rest) of
                <<>> -> {ok, Value};
                _ -> error
            end
    catch
        throw:{duplicate_key, Key} -> {error, {duplicate_key, Key}};
        throw:float -> error;
        error:_ -> error
    end;
decode(Text, fallback) when is_binary(Text) ->
    try value(skip(Text)) of
        {ok, Value, Rest} ->
            case skip(Rest) of
                <<>> -> {ok, Value};
                _ -> error
            end;
        error ->
            error
    catch
        throw:{duplicate_key, Key} -> {error, {duplicate_key, Key}}
    end.

%% stdlib's object_finish: the object's pairs, last first. One map when
%% every key differs; else the first key named twice, in the text's order.
object_finish(Pairs, OldAcc) ->
    Map = maps:from_list(Pairs),
    map_size(Map) =:= length(Pairs) orelse throw({duplicate_key, repeated(lists:reverse(Pairs), #{})}),
    {Map, OldAcc}.

repeated([{Key, _} | Rest], Seen) ->
    case Seen of
        #{Key := _} -> Key;
        _ -> repeated(Rest, Seen#{Key => true})
    end.

skip(<<C, Rest/binary>>) when C =:= $\s; C =:= $\t; C =:= $\r; C =:= $\n -> skip(Rest);
skip(Rest) -> Rest.

value(<<"{", Rest/binary>>) -> members(skip(Rest), #{});
value(<<"[", Rest/binary>>) -> elements(skip(Rest), []);
value(<<"\"", Rest/binary>>) -> string(Rest, []);
value(<<"true", Rest/binary>>) -> {ok, true, Rest};
value(<<"false", Rest/binary>>) -> {ok, false, Rest};
value(<<"null", Rest/binary>>) -> {ok, nil, Rest};
value(<<"-", Rest/binary>>) -> integer(Rest, -1);
value(Text) -> integer(Text, 1).

%% -?(0|[1-9][0-9]*), and no fraction or exponent after it.
integer(Digits, Sign) ->
    N = count_digits(Digits, 0),
    case Digits of
        _ when N =:= 0 -> error;
        <<$0, _/binary>> when N > 1 -> error;
        <<_:N/binary, C, _/binary>> when C =:= $.; C =:= $e; C =:= $E -> error;
        <<Int:N/binary, Rest/binary>> -> {ok, Sign * binary_to_integer(Int), Rest}
    end.

count_digits(<<C, Rest/binary>>, N) when C >= $0, C =< $9 -> count_digits(Rest, N + 1);
count_digits(_, N) -> N.

members(<<"}", Rest/binary>>, Acc) when Acc =:= #{} -> {ok, Acc, Rest};
members(<<"\"", Text/binary>>, Acc) ->
    case string(Text, []) of
        {ok, Key, Rest} ->
            is_map_key(Key, Acc) andalso throw({duplicate_key, Key}),
            case skip(Rest) of
                <<":", Rest1/binary>> -> member_value(skip(Rest1), Key, Acc);
                _ -> error
            end;
        error ->
            error
    end;
members(_, _) -> error.

member_value(Text, Key, Acc) ->
    case value(Text) of
        {ok, Value, Rest} ->
            case skip(Rest) of
                <<",", Rest1/binary>> -> members(skip(Rest1), Acc#{Key => Value});
                <<"}", Rest1/binary>> -> {ok, Acc#{Key => Value}, Rest1};
                _ -> error
            end;
        error ->
            error
    end.

elements(<<"]", Rest/binary>>, []) -> {ok, [], Rest};
elements(Text, Acc) ->
    case value(Text) of
        {ok, Value, Rest} ->
            case skip(Rest) of
                <<",", Rest1/binary>> -> elements(skip(Rest1), [Value | Acc]);
                <<"]", Rest1/binary>> -> {ok, lists:reverse([Value | Acc]), Rest1};
                _ -> error
            end;
        error ->
            error
    end.

%% A string's body, in one pass: a run of plain characters is counted (Len
%% bytes from the start of the run, Orig) and taken whole as one
%% sub-binary when a quote or an escape ends it; the pieces gather as
%% iodata, nested to the left, and become the string once.
string(Text, Acc) -> str(Text, Text, 0, Acc).

str(<<$", Rest/binary>>, Orig, Len, Acc) ->
    {ok, iolist_to_binary([Acc, binary_part(Orig, 0, Len)]), Rest};
str(<<$\\, Rest/binary>>, Orig, Len, Acc) ->
    escape(Rest, [Acc, binary_part(Orig, 0, Len)]);
str(<<C, Rest/binary>>, Orig, Len, Acc) when C >= 16#20, C < 16#80 ->
    str(Rest, Orig, Len + 1, Acc);
str(<<C/utf8, Rest/binary>>, Orig, Len, Acc) when C >= 16#80 ->
    str(Rest, Orig, Len + byte_size(<<C/utf8>>), Acc);
str(_, _, _, _) ->
    error.

escape(<<C, Rest/binary>>, Acc) when C =:= $"; C =:= $\\; C =:= $/ -> string(Rest, [Acc, C]);
escape(<<$n, Rest/binary>>, Acc) -> string(Rest, [Acc, $\n]);
escape(<<$t, Rest/binary>>, Acc) -> string(Rest, [Acc, $\t]);
escape(<<$r, Rest/binary>>, Acc) -> string(Rest, [Acc, $\r]);
escape(<<$b, Rest/binary>>, Acc) -> string(Rest, [Acc, $\b]);
escape(<<$f, Rest/binary>>, Acc) -> string(Rest, [Acc, $\f]);
escape(<<$u, Hex:4/binary, Rest/binary>>, Acc) ->
    case hex(Hex) of
        Hi when Hi >= 16#D800, Hi =< 16#DBFF -> low_surrogate(Hi, Rest, Acc);
        Hi when Hi >= 16#DC00, Hi =< 16#DFFF -> error;
        Hi when is_integer(Hi) -> string(Rest, [Acc, <<Hi/utf8>>]);
        error -> error
    end;
escape(_, _) ->
    error.

%% A character past U+FFFF, escaped as a UTF-16 surrogate pair.
low_surrogate(Hi, <<"\\u", Hex:4/binary, Rest/binary>>, Acc) ->
    case hex(Hex) of
        Lo when is_integer(Lo), Lo >= 16#DC00, Lo =< 16#DFFF ->
            C = 16#10000 + ((Hi - 16#D800) bsl 10) + (Lo - 16#DC00),
            string(Rest, [Acc, <<C/utf8>>]);
        _ ->
            error
    end;
low_surrogate(_, _, _) ->
    error.

%% Four hex digits (no sign, no space), or error.
hex(Digits) ->
    case lists:all(fun(D) -> (D >= $0 andalso D =< $9) orelse (D >= $a andalso D =< $f) orelse
                                 (D >= $A andalso D =< $F) end, binary_to_list(Digits)) of
        true -> binary_to_integer(Digits, 16);
        false -> error
    end.
