%% @private
%% telemetry events for copies and transfers (guides/telemetry.md).
%%
%% tensor_blob depends on no telemetry package: where the telemetry
%% library is on the code path (Nx, Phoenix and Ecto bring it), every copy
%% of tensor data and every transfer of a tensor to another framework,
%% OS process or node is reported through telemetry:execute/3; where it is
%% not, nothing is reported and nothing fails. Whether it is there is
%% decided once, at the first event, and kept in persistent_term. An event
%% nobody listens to costs a lookup in telemetry's handler table, and is
%% neither measured nor built.
%%
%% Events:
%%
%%   [tensor_blob, copy]      measurements #{bytes, duration}; metadata
%%                            #{function, reason, dtype, shape}
%%   [tensor_blob, transfer]  measurements #{bytes, copied, duration};
%%                            metadata #{function, zero_copy, dtype, shape}
%%                            and what the function adds (backend, node, via)
%%
%% duration is in native time units (erlang:convert_time_unit/3).
-module(tensor_blob_telemetry).

-export([enabled/0, start/1, copy/5, transfer/5, reset/0]).

-export_type([reason/0]).

%% Why a copy was made.
-type reason() :: requested | not_contiguous | shared_memory | device | misaligned | not_a_region | backend.

-define(KEY, {?MODULE, mode}).

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

%% @doc The start time to pass to copy/5 (Kind copy) or transfer/5 (Kind
%% transfer), or undefined where that event has no handler or telemetry
%% is absent: then they do nothing, and nothing is measured.
-spec start(copy | transfer) -> integer() | undefined.
start(Kind) ->
    case mode() of
        off -> undefined;
        always -> erlang:monotonic_time();
        handlers -> listened(Kind)
    end.

listened(Kind) ->
    %% telemetry's own lookup (what telemetry:execute/3 does first), called
    %% by name: telemetry is not a dependency.
    Table = telemetry_handler_table,
    case Table:list_for_event([tensor_blob, Kind]) of
        [] -> undefined;
        _ -> erlang:monotonic_time()
    end.

%% @doc Reports a copy of Bytes bytes of the tensor T, made by Function
%% since Start, for Reason. T is a tensor reference, or {Dtype, Shape}.
-spec copy(integer() | undefined, {module(), atom(), arity()}, reason(), non_neg_integer(), term()) -> ok.
copy(undefined, _Function, _Reason, _Bytes, _T) ->
    ok;
copy(Start, Function, Reason, Bytes, T) ->
    Duration = erlang:monotonic_time() - Start,
    {Dtype, Shape} = layout(T),
    execute([tensor_blob, copy], #{bytes => Bytes, duration => Duration},
            #{function => Function, reason => Reason, dtype => Dtype, shape => Shape}).

%% @doc Reports a transfer by Function since Start of a tensor whose data
%% is Bytes bytes, of which Copied were copied on the way (0: zero-copy).
%% Meta holds dtype and shape, and what the function adds.
-spec transfer(integer() | undefined, {module(), atom(), arity()}, non_neg_integer(), non_neg_integer(), map()) -> ok.
transfer(undefined, _Function, _Bytes, _Copied, _Meta) ->
    ok;
transfer(Start, Function, Bytes, Copied, Meta) ->
    Duration = erlang:monotonic_time() - Start,
    execute([tensor_blob, transfer], #{bytes => Bytes, copied => Copied, duration => Duration},
            Meta#{function => Function, zero_copy => Copied =:= 0}).

%% @private Forgets the decision, so that the next event decides again
%% (for tests that load or unload telemetry).
-spec reset() -> ok.
reset() ->
    _ = persistent_term:erase(?KEY),
    ok.

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
