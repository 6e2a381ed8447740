%% @doc What a door builds on: a facade in another language (the Elixir
%% modules of lib/) or a bridge to another runtime calls the Erlang API,
%% tensor_blob, for every decision, tensor_blob_options for its options,
%% and this module for the two things it does in its own name:
%%
%% Telemetry. A door that copies or transfers a tensor reports it in its
%% own function's name (guides/telemetry.md): span/2 runs its body so that
%% the spans the Erlang API starts inside name the door's function, and an
%% error raised inside ends them with an exception event; start/1,
%% transferred/5 and copied/5 report a transfer or copy the door makes
%% itself; unreported/1 runs code whose copies are none the caller made;
%% copy_into/4 is the library's guarded copy into a tensor the door made.
%%
%% Layouts and copies in the door's name. to_blob_struct/3 and
%% blob_fields/1 give a tensor's layout with no option map to build;
%% blob_view/2 is from_blob/2 with the owner it keeps (the door's own
%% wrapper decides on it); copy_from_binary/5, copy_to_binary/3 and
%% binary_of/4 copy (or view) as tensor_blob's from_binary/3 and
%% to_binary/1,2 do, reported in the door's name.
%%
%% JSON. decode_json/1 reads JSON as the library does (the maps of shared
%% tensors, a sharded checkpoint's index), for a door that takes JSON.
%%
%% Handing memory over. A door that gives a tensor's memory to a library
%% that writes it with no guard of ours (ExTorch's from_blob) asks
%% writable/1 first: read-only memory, or memory a binary shows, must go
%% as a copy.
%%
%% Errors. An error of the Erlang API carries its reason, argument and
%% message as data (tensor_blob:error_reason/1); message/2 gives the
%% message as segments, for a door to print terms and code its own
%% language's way: text (a binary), {term, Pruned} (a term cut down to a
%% bounded tree by prune/1) and {code, Erlang, Elixir}.
-module(tensor_blob_door).

-export([span/2, start/1, transferred/5, copied/5, unreported/1, copy_into/4, writable/1]).
-export([message/2, prune/1, big_integer_text/2]).
-export([to_blob_struct/3, blob_fields/1, blob_view/2, copy_from_binary/5, copy_to_binary/3, binary_of/4,
         data_bytes/1]).
-export([decode_json/1, decode_json/2]).

-include("tensor_blob_internal.hrl").

-import(tensor_blob_error, [badarg/3]).

%% @doc Runs Fun as Function ({Module, Name, Arity}, the door's own): the
%% telemetry spans started inside name it.
-spec span({module(), atom(), arity()}, fun(() -> Result)) -> Result.
span(Function, Fun) ->
    check_function(Function),
    check_fun(Fun),
    tensor_blob_telemetry:as(Function, Fun).

%% @doc The token that transferred/5 (Kind transfer) or copied/5 (Kind
%% copy) ends; undefined where nothing listens, and then they do nothing.
-spec start(copy | transfer) -> tensor_blob_telemetry:token().
start(Kind) when Kind =:= copy; Kind =:= transfer -> tensor_blob_telemetry:start(Kind);
start(Kind) -> badarg(bad_value, kind, ["kind: expected copy or transfer, got ", {term, Kind}]).

%% @doc Reports the transfer of tensor T by Function since Token; Copied:
%% whether its data was copied on the way. Meta adds what the door names
%% (backend, node, ...).
-spec transferred(tensor_blob_telemetry:token(), {module(), atom(), arity()}, reference(), boolean(), map()) -> ok.
transferred(Token, Function, T, Copied, Meta) ->
    check_token(Token),
    check_function(Function),
    is_reference(T) orelse tensor_blob_error:not_a_tensor(T),
    is_boolean(Copied) orelse badarg(bad_value, copied, ["copied: expected a boolean, got ", {term, Copied}]),
    is_map(Meta) orelse badarg(bad_value, meta, ["meta: expected a map, got ", {term, Meta}]),
    tensor_blob_telemetry:transfer_of(Token, Function, T, Copied, Meta).

%% @doc Reports a copy of Bytes bytes of tensor T (a reference, or {Dtype,
%% Shape}) made by Function since Token, for Reason.
-spec copied(tensor_blob_telemetry:token(), {module(), atom(), arity()}, tensor_blob_telemetry:reason(),
             non_neg_integer(), term()) -> ok.
copied(Token, Function, Reason, Bytes, T) ->
    check_token(Token),
    check_function(Function),
    is_atom(Reason) orelse badarg(bad_value, reason, ["reason: expected an atom, got ", {term, Reason}]),
    (is_integer(Bytes) andalso Bytes >= 0)
        orelse badarg(bad_value, bytes, ["bytes: expected a non-negative integer, got ", {term, Bytes}]),
    is_reference(T) orelse is_tuple(T) andalso tuple_size(T) =:= 2
        orelse badarg(not_a_tensor, tensor, ["tensor: expected a tensor or {Dtype, Shape}, got ", {term, T}]),
    tensor_blob_telemetry:copy(Token, Function, Reason, Bytes, T).

%% @doc Runs Fun reporting nothing.
-spec unreported(fun(() -> Result)) -> Result.
unreported(Fun) ->
    check_fun(Fun),
    tensor_blob_telemetry:unreported(Fun).

%% @doc Source's elements written into Target, a contiguous CPU tensor of
%% the same dtype and element count, read in place under the SIGBUS guard
%% (a region shrunk under the copy raises, as tensor_blob:to_binary/1
%% does), reported as a copy made by Function for Reason. Returns Target.
-spec copy_into(reference(), reference(), {module(), atom(), arity()}, tensor_blob_telemetry:reason()) -> reference().
copy_into(Target, Source, Function, Reason) ->
    check_function(Function),
    tensor_blob_tensor:copy_into(Target, Source, Function, Reason).

%% @doc Whether tensor_blob:write/2 would write T now: true; read_only (a
%% view of a binary's bytes, a read-only DLPack import, or memory such a
%% tensor shares); frozen (a binary of to_binary(T, #{copy => false})
%% shows it).
-spec writable(reference()) -> true | read_only | frozen.
writable(T) when is_reference(T) -> tensor_blob_tensor:writable(T);
writable(T) -> tensor_blob_error:not_a_tensor(T).

%% @doc The segments of an error of the Erlang API ({Kind, Message} and its
%% stacktrace), or none for an error that has none.
-spec message(term(), erlang:stacktrace()) ->
          [binary() | {term, tensor_blob_error:pruned()} | {code, binary(), binary()}] | none.
message(Error, Stack) -> tensor_blob_error:error_message(Error, Stack).

%% @doc Term cut down to a bounded tree (see message/2), in time bounded by
%% that tree's size whatever Term is.
-spec prune(term()) -> tensor_blob_error:pruned().
prune(Term) -> tensor_blob_error:prune(Term).

%% @doc How a pruned {big_integer, Sign, Bits} is shown.
-spec big_integer_text(1 | -1, pos_integer()) -> binary().
big_integer_text(Sign, Bits) when (Sign =:= 1 orelse Sign =:= -1), is_integer(Bits), Bits > 0 ->
    tensor_blob_error:big_integer_text(Sign, Bits);
big_integer_text(Sign, _) when Sign =/= 1, Sign =/= -1 ->
    badarg(bad_value, sign, ["sign: expected 1 or -1, got ", {term, Sign}]);
big_integer_text(_, Bits) ->
    badarg(bad_value, bits, ["bits: expected a positive integer, got ", {term, Bits}]).

%% @doc tensor_blob:to_blob(T, #{owner => Owner, struct => Struct}) (the Elixir facade's call: it
%% gives both).
-spec to_blob_struct(tensor_blob:tensor(), term(), atom()) -> tensor_blob:blob().
to_blob_struct(T, Owner, Struct) -> tensor_blob_tensor:to_blob_struct(T, Owner, Struct).

%% @doc The values of T's blob as a tuple, {Ptr, Shape, Strides, Dtype,
%% Device, ElementSize, ByteSize, Alignment}: a tensor's whole layout in
%% one call, with no map to build.
-spec blob_fields(tensor_blob:tensor()) ->
          {non_neg_integer(), tensor_blob:shape(), [non_neg_integer()], atom(), tensor_blob:device(),
           pos_integer(), non_neg_integer(), pos_integer()}.
blob_fields(T) when is_reference(T) -> ?NIF(tensor_blob_nif:blob_fields(T));
blob_fields(T) -> tensor_blob_error:not_a_tensor(T).

%% @doc tensor_blob:from_blob/2, returning the tensor together with the
%% owner it keeps, or none for an unpinned view (what the Elixir facade
%% turns into a BlobView or a bare tensor). The owner decision is made
%% here only.
-spec blob_view(tensor_blob:spec(), #{owner => term()}) -> {tensor_blob:tensor(), Owner :: term()}.
blob_view(Spec, Opts) -> tensor_blob_tensor:blob_view(Spec, Opts).

%% @doc tensor_blob:from_binary/3, reported (where telemetry is loaded) as
%% a [tensor_blob, copy] span made by Function for Reason
%% (guides/telemetry.md).
-spec copy_from_binary(binary(), tensor_blob:dtype(), tensor_blob:shape(), {module(), atom(), arity()},
                       tensor_blob_telemetry:reason()) -> tensor_blob:tensor().
copy_from_binary(Binary, Dtype, Shape, Function, Reason) ->
    check_function(Function),
    tensor_blob_tensor:copy_from_binary(Binary, Dtype, Shape, Function, Reason).

%% @doc tensor_blob:to_binary/1, reported as a copy made by Function for
%% Reason, as copy_from_binary/5.
-spec copy_to_binary(tensor_blob:tensor(), {module(), atom(), arity()}, tensor_blob_telemetry:reason()) -> binary().
copy_to_binary(T, Function, Reason) ->
    check_function(Function),
    tensor_blob_tensor:copy_to_binary(T, Function, Reason).

%% @doc {Binary, Copied}: a view of T's bytes where one can be made
%% (tensor_blob:to_binary/2 with copy if_needed, unsafe_shared_memory
%% Unguarded), else a copy, reported as made by Function for the reason
%% no view could be: not_contiguous, device or shared_memory. Maker
%% (to_binary, node_pack, to_nx) is the call that a write refused while
%% the view lives names.
-spec binary_of(tensor_blob:tensor(), boolean(), to_binary | node_pack | to_nx, {module(), atom(), arity()}) ->
          {binary(), boolean()}.
binary_of(T, Unguarded, Maker, Function) -> tensor_blob_tensor:binary_of(T, Unguarded, Maker, Function).

%% @doc The bytes T's elements take (shape times element size; what a
%% transfer span reports).
-spec data_bytes(tensor_blob:tensor()) -> non_neg_integer().
data_bytes(T) -> tensor_blob_tensor:data_bytes(T).


%% @doc JSON text as terms, as the library reads it: objects as maps with
%% binary keys, arrays as lists, strings as binaries, integers, true,
%% false, and null as nil. A number with a fraction or an exponent is
%% refused (error), and so is an object that names a key twice ({error,
%% {duplicate_key, Key}}): decoders differ on which value such a key has.
%% Linear in the text's length, which the caller bounds. OTP 27's json
%% decodes where it is there (backend stdlib), a decoder of the library's
%% own elsewhere (fallback).
-spec decode_json(binary()) -> {ok, term()} | {error, {duplicate_key, binary()}} | error.
decode_json(Text) -> decode_json(Text, tensor_blob_json:backend()).

%% @doc decode_json/1 by the decoder named: stdlib (OTP 27 and later) or
%% fallback.
-spec decode_json(binary(), stdlib | fallback) -> {ok, term()} | {error, {duplicate_key, binary()}} | error.
decode_json(Text, Backend) when is_binary(Text), (Backend =:= fallback orelse Backend =:= stdlib) ->
    tensor_blob_json:decode(Text, Backend);
decode_json(Text, _Backend) when not is_binary(Text) ->
    badarg(bad_value, text, ["text: expected a binary, got ", {term, Text}]);
decode_json(_Text, Backend) ->
    badarg(bad_value, backend, ["backend: expected stdlib or fallback, got ", {term, Backend}]).

%% The arguments every door passes: its own function, a body, the token of
%% start/1. Checked here, so that a door's mistake is an error of the
%% contract, not a crash inside the telemetry.
check_function({M, F, A}) when is_atom(M), is_atom(F), is_integer(A), A >= 0 -> ok;
check_function(Function) ->
    badarg(bad_value, function, ["function: expected {Module, Name, Arity}, got ", {term, Function}]).

check_fun(Fun) when is_function(Fun, 0) -> ok;
check_fun(Fun) -> badarg(bad_value, 'fun', ["fun: expected a function of no arguments, got ", {term, Fun}]).

check_token(undefined) -> ok;
check_token({Kind, Began, Id}) when (Kind =:= copy orelse Kind =:= transfer), is_integer(Began), is_integer(Id) -> ok;
check_token(Token) -> badarg(bad_value, token, ["token: expected what start/1 returned, got ", {term, Token}]).
