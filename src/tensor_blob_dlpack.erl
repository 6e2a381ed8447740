%% @private
%% DLPack: the options of to_dlpack/2 and from_dlpack/2 (the version a
%% consumer's max_version allows, read_only, streams, unsafe addresses).
%% The capsules themselves are the NIF's (c_src/nif/tb_dlpack.c); tensor_blob
%% documents the whole exchange.
-module(tensor_blob_dlpack).

-include("tensor_blob_internal.hrl").

-export([to_dlpack/2, from_dlpack/2]).

-import(tensor_blob_error, [badarg/3, raise/4, not_a_tensor/1]).
-import(tensor_blob_options, [check/3]).

-define(STREAM, {stream, {satisfies, "an integer (a cudaStream_t, 1 or 2 for the default streams, -1 for no "
                                      "synchronization)", fun is_stream/1}, undefined}).

%%--------------------------------------------------------------------
%% DLPack
%%
%% to_dlpack/1,2 returns a capsule: a resource that owns one
%% DLManagedTensorVersioned (or, with version => legacy, a DLManagedTensor)
%% holding a strong libtorch reference to T. The capsule calls the managed
%% tensor's deleter when it is garbage-collected, unless it was consumed:
%% consume_dlpack/1 disarms it and returns the address for a consumer, which
%% then owes the deleter one call. from_dlpack/1,2 imports a capsule
%% (consuming it) or an address; the producer's deleter runs exactly once,
%% when libtorch frees the imported storage. An address this library handed
%% out (consume_dlpack/1, the C bridge) is known until one import takes it
%% or its deleter runs: imported once, refused after. Any other address is
%% refused unless #{unsafe_address => true} says the caller answers for it:
%% then it is trusted, and a forged, freed or twice-imported one cannot be
%% detected.
%%--------------------------------------------------------------------

-spec to_dlpack(term(), term()) -> tensor_blob:capsule().
to_dlpack(T, _Opts) when not ?IS_TENSOR_TERM(T) ->
    not_a_tensor(T);
to_dlpack(T, Opts) ->
    #{version := V, max_version := Max, read_only := ReadOnly, stream := Stream} =
        check(Opts, [{max_version, any, undefined}, {version, any, undefined}, {read_only, boolean, false},
                     ?STREAM], map),
    Version = export_version(V, negotiate(Max)),
    ?NIF(tensor_blob_nif:to_dlpack(T, Version, ReadOnly, stream(Stream))).

-spec from_dlpack(term(), term()) -> tensor_blob:tensor().
from_dlpack(Source, Opts) ->
    #{version := Version, read_only := ReadOnly, stream := Stream, unsafe_address := Unsafe,
      defer_release := Defer} =
        check(Opts, [{version, {one_of, [versioned, legacy, undefined]}, undefined}, {read_only, boolean, false}, ?STREAM,
                     {unsafe_address, boolean, false}, {defer_release, boolean, false}], map),
    Given = case Unsafe of
                true when is_integer(Source) -> {unsafe_address, Source};
                _ -> Source
            end,
    ?NIF(tensor_blob_nif:from_dlpack(Given, Version, ReadOnly, stream(Stream), Defer)).

%% A stream: an integer, checked in C (its meaning depends on the device).
stream(nil) -> undefined;
stream(S) -> S.

is_stream(S) -> is_integer(S) orelse S =:= undefined orelse S =:= nil.

%% What a consumer's max_version allows.
negotiate(undefined) -> undefined;
negotiate(nil) -> undefined;
negotiate(legacy) -> legacy;
negotiate({0, Minor}) when is_integer(Minor), Minor >= 0 -> legacy;
negotiate({1, Minor}) when is_integer(Minor), Minor >= 0 -> versioned;
negotiate({Major, Minor} = V) when is_integer(Major), Major > 1, is_integer(Minor), Minor >= 0 ->
    raise(tensor_blob, unsupported, max_version,
          ["max_version: ", {term, V}, ": this library exports DLPack 1.3 and legacy tensors only; "
           "a consumer of major version ", integer_to_binary(Major), " cannot be given either"]);
negotiate(Other) ->
    badarg(bad_value, max_version,
           ["max_version: expected {Major, Minor} (non-negative integers) or legacy, got ", {term, Other}]).

export_version(undefined, undefined) -> versioned;
export_version(undefined, Negotiated) -> Negotiated;
export_version(V, undefined) when V =:= versioned; V =:= legacy -> V;
export_version(V, V) -> V;
export_version(V, Negotiated) when V =:= versioned; V =:= legacy ->
    badarg(bad_option, version,
           ["version: ", {term, V}, " contradicts max_version, which allows ", {term, Negotiated}, " only"]);
export_version(V, _) ->
    badarg(bad_value, version, ["version: expected versioned or legacy, got ", {term, V}]).

