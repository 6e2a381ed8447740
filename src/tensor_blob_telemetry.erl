%% @private
%% telemetry spans for copies and transfers (guides/telemetry.md).
%%
%% tensor_blob depends on no telemetry package: where the telemetry
%% library is on the code path (Nx, Phoenix and Ecto bring it), every copy
%% of tensor data and every transfer of a tensor to another framework,
%% OS process or node is reported in the shape of telemetry:span/3; where
%% it is not, nothing is reported and nothing fails. Whether it is there is
%% decided once, at the first event, and kept in persistent_term. An event
%% nobody listens to costs a lookup in telemetry's handler table, and is
%% neither measured nor built.
%%
%% Events, for Kind copy and transfer (as telemetry:span/3 makes them):
%%
%%   [tensor_blob, Kind, start]      measurements #{monotonic_time,
%%                                   system_time}: when it began
%%   [tensor_blob, Kind, stop]       measurements #{duration, monotonic_time,
%%                                   bytes} (transfer: and copied)
%%   [tensor_blob, Kind, exception]  measurements #{duration, monotonic_time};
%%                                   metadata adds kind, reason, stacktrace
%%
%% metadata: copy #{function, reason, dtype, shape}; transfer #{function,
%% zero_copy, dtype, shape} and what the function adds (backend, node,
%% via); every event of one span carries the same telemetry_span_context.
%% Whether a copy happens is known only once it is done (copy: if_needed):
%% a span's start event is emitted with its stop, its measurements giving
%% the time the operation began. duration is in native time units
%% (erlang:convert_time_unit/3).
%%
%% function names what the caller called: the Erlang function, or, for
%% the Elixir API, the Elixir function (as/2, which both APIs' functions
%% that copy or transfer run in). The exception event is emitted for an
%% operation that raises inside as/2.
-module(tensor_blob_telemetry).

-export([enabled/0, start/1, copy/5, transfer/5, transfer_of/5, as/2, unreported/1]).

-export_type([reason/0, token/0]).

%% Why a copy was made.
-type reason() :: requested | not_contiguous | shared_memory | device | misaligned | not_a_region | backend.

%% What start/1 gives: undefined where nothing is measured.
-type token() :: {copy | transfer, integer(), integer()} | undefined.

-define(KEY, {?MODULE, mode}).
%% In the process dictionary: the function the caller called (as/2), or
%% unreported (unreported/1); the spans started under as/2 and not ended.
-define(CALLER, {?MODULE, caller}).
-define(OPEN, {?MODULE, open}).

%% @doc Whether events are emitted: the telemetry module can be loaded.
%% Decided once, at the first call, and kept.
-spec enabled() -> boolean().
enabled() ->
    mode() =/= off.

%% off: no telemetry. handlers: telemetry, whose handler table says which
%% events have handlers. always: telemetry without that table (another
%% version): every event is emitted.
mode() ->
    case persistent_term:get(?KEY, undefined) of
        undefined ->
            %% The NIF library (and libtorch with it) is loaded here, once,
            %% so that no span measures loading it.
            _ = code:ensure_loaded(tensor_blob_nif),
            Mode = case code:ensure_loaded(telemetry) of
                       {module, telemetry} ->
                           _ = code:ensure_loaded(telemetry_handler_table),
                           case erlang:function_exported(telemetry_handler_table, list_for_event, 1) of
                               true -> handlers;
                               false -> always
                           end;
                       _ ->
                           off
                   end,
            persistent_term:put(?KEY, Mode),
            Mode;
        Mode ->
            Mode
    end.

%% @doc The token to pass to copy/5 (Kind copy) or transfer/5 (Kind
%% transfer), or undefined where that span has no handler, telemetry is
%% absent or the caller asked for none (unreported/1): then they do
%% nothing, and nothing is measured.
-spec start(copy | transfer) -> token().
start(Kind) ->
    case mode() of
        off ->
            undefined;
        Mode ->
            case get(?CALLER) of
                unreported -> undefined;
                Caller -> measure(Mode =:= always orelse listened(Kind), Kind, Caller)
            end
    end.

measure(false, _Kind, _Caller) ->
    undefined;
measure(true, Kind, Caller) ->
    Token = {Kind, erlang:monotonic_time(), erlang:system_time()},
    %% Under as/2, an exception before the span ends is reported.
    _ = Caller =:= undefined orelse put(?OPEN, [Token | open()]),
    Token.

listened(Kind) ->
    %% telemetry's own lookup (what telemetry:execute/3 does first), called
    %% by name: telemetry is not a dependency.
    Table = telemetry_handler_table,
    lists:any(fun(Event) -> Table:list_for_event([tensor_blob, Kind, Event]) =/= [] end, [stop, start, exception]).

%% @doc Reports a copy of Bytes bytes of the tensor T, made by Function
%% since Token, for Reason: the span [tensor_blob, copy]. T is a tensor
%% reference, or {Dtype, Shape}.
-spec copy(token(), {module(), atom(), arity()}, reason(), non_neg_integer(), term()) -> ok.
copy(undefined, _Function, _Reason, _Bytes, _T) ->
    ok;
copy(Token, Function, Reason, Bytes, T) ->
    {Dtype, Shape} = layout(T),
    span(Token, #{bytes => Bytes},
         #{function => caller(Function), reason => Reason, dtype => Dtype, shape => Shape}).

%% @doc Reports a transfer by Function since Token of a tensor whose data
%% is Bytes bytes, of which Copied were copied on the way (0: zero-copy):
%% the span [tensor_blob, transfer]. Meta holds dtype and shape, and what
%% the function adds.
-spec transfer(token(), {module(), atom(), arity()}, non_neg_integer(), non_neg_integer(), map()) -> ok.
transfer(undefined, _Function, _Bytes, _Copied, _Meta) ->
    ok;
transfer(Token, Function, Bytes, Copied, Meta) ->
    span(Token, #{bytes => Bytes, copied => Copied},
         Meta#{function => caller(Function), zero_copy => Copied =:= 0}).

%% @doc transfer/5 of the tensor T, its bytes, dtype and shape asked of the
%% library (one call), Copied saying whether its data was copied on the way.
-spec transfer_of(token(), {module(), atom(), arity()}, reference(), boolean(), map()) -> ok.
transfer_of(undefined, _Function, _T, _Copied, _Meta) ->
    ok;
transfer_of(Token, Function, T, Copied, Meta) ->
    {_, Shape, _, Dtype, _, ElementSize, _, _} = tensor_blob_nif:blob_fields(T),
    Bytes = lists:foldl(fun(D, Acc) -> D * Acc end, ElementSize, tuple_to_list(Shape)),
    transfer(Token, Function, Bytes, case Copied of true -> Bytes; false -> 0 end, Meta#{dtype => Dtype, shape => Shape}).

%% @doc Runs Fun, reporting the copies and transfers it makes as made by
%% Function (the Elixir API's function, which the caller called), and, if
%% it raises, an exception event for each span it started and did not end.
%% Inside another as/2, the outer function is the one named.
-spec as({module(), atom(), arity()}, fun(() -> Result)) -> Result.
as(Function, Fun) ->
    case get(?CALLER) of
        undefined ->
            case mode() of
                off ->
                    Fun();
                _ ->
                    put(?CALLER, Function),
                    try Fun() of
                        Result ->
                            erase(?CALLER),
                            erase(?OPEN),
                            Result
                    catch
                        Class:Reason:Stacktrace ->
                            erase(?CALLER),
                            Open = open(),
                            erase(?OPEN),
                            lists:foreach(fun(Token) -> exception(Token, Function, Class, Reason, Stacktrace) end,
                                          lists:reverse(Open)),
                            erlang:raise(Class, Reason, Stacktrace)
                    end
            end;
        _ ->
            Fun()
    end.

%% @doc Runs Fun reporting nothing: what it copies is no copy the caller
%% made (inspect's preview of a tensor's first elements).
-spec unreported(fun(() -> Result)) -> Result.
unreported(Fun) ->
    Old = put(?CALLER, unreported),
    try
        Fun()
    after
        case Old of
            undefined -> erase(?CALLER);
            _ -> put(?CALLER, Old)
        end
    end.

caller(Function) ->
    case get(?CALLER) of
        {_, _, _} = Caller -> Caller;
        _ -> Function
    end.

open() ->
    case get(?OPEN) of
        undefined -> [];
        Open -> Open
    end.

%% The start and stop events of the span that began at Token.
span({Kind, Start, SystemStart} = Token, Measurements, Meta0) ->
    Stop = erlang:monotonic_time(),
    case get(?OPEN) of
        undefined -> ok;
        Open -> put(?OPEN, lists:delete(Token, Open))
    end,
    Meta = Meta0#{telemetry_span_context => make_ref()},
    execute([tensor_blob, Kind, start], #{monotonic_time => Start, system_time => SystemStart}, Meta),
    execute([tensor_blob, Kind, stop], Measurements#{duration => Stop - Start, monotonic_time => Stop}, Meta).

exception({Kind, Start, SystemStart}, Function, Class, Reason, Stacktrace) ->
    Stop = erlang:monotonic_time(),
    Meta = #{function => Function, telemetry_span_context => make_ref()},
    execute([tensor_blob, Kind, start], #{monotonic_time => Start, system_time => SystemStart}, Meta),
    execute([tensor_blob, Kind, exception], #{duration => Stop - Start, monotonic_time => Stop},
            Meta#{kind => Class, reason => Reason, stacktrace => Stacktrace}).

layout({Dtype, Shape}) ->
    {Dtype, Shape};
layout(T) ->
    %% One NIF call for both.
    try tensor_blob_nif:blob_fields(T) of
        {_Ptr, Shape, _Strides, Dtype, _Device, _ElementSize, _ByteSize, _Alignment} -> {Dtype, Shape}
    catch error:_ -> {undefined, undefined}
    end.

%% telemetry is not a dependency: called by name, so that neither the
%% compiler nor xref needs it.
execute(Event, Measurements, Metadata) ->
    Module = telemetry,
    try Module:execute(Event, Measurements, Metadata)
    catch error:undef -> ok
    end.
