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
