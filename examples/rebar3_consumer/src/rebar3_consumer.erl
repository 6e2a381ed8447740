%% @doc Uses tensor_blob as a dependency: a zero-copy round trip.
-module(rebar3_consumer).

-export([exchange/0]).

%% @doc Makes a 2x3 uint8 tensor, views its memory through its blob, writes
%% through the view, and returns {the original tensor's bytes, the view}: the
%% original sees the write because both share one buffer.
-spec exchange() -> {binary(), tensor_blob:tensor()}.
exchange() ->
    T = tensor_blob:from_binary(<<1, 2, 3, 4, 5, 6>>, uint8, {2, 3}),
    Blob = tensor_blob:to_blob(T),
    View = tensor_blob:from_blob(Blob),
    View = tensor_blob:write(View, <<10, 20, 30, 40, 50, 60>>),
    {tensor_blob:to_binary(T), View}.
