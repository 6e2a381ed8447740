%% @private
%% test/support/foreign_tensor_nif.c built against the bridge's first
%% header (test/support/bridge_v1/tensor_blob.h), as a consumer built
%% before the table would be: make foreign-nif builds it into
%% build/foreign_tensor_nif_v1.so (FOREIGN_TENSOR_NIF_V1 names another).
-module(foreign_tensor_nif_v1).

-export([produce/2, read/1, release/1, take/2, take_with_version/2, counters/0, release_on_thread/1,
         cuda_produce/2, cuda_produce_late/3, cuda_stream/0, cuda_stream_destroy/1, cuda_read/2]).

-on_load(init/0).

init() ->
    Path = case os:getenv("FOREIGN_TENSOR_NIF_V1") of
               P when is_list(P), P =/= "" -> P;
               _ -> "build/foreign_tensor_nif_v1"
           end,
    erlang:load_nif(Path, 0).

-define(NOT_LOADED, erlang:nif_error({not_loaded, ?MODULE})).

produce(_, _) -> ?NOT_LOADED.
read(_) -> ?NOT_LOADED.
release(_) -> ?NOT_LOADED.
take(_, _) -> ?NOT_LOADED.
take_with_version(_, _) -> ?NOT_LOADED.
counters() -> ?NOT_LOADED.
release_on_thread(_) -> ?NOT_LOADED.
cuda_produce(_, _) -> ?NOT_LOADED.
cuda_produce_late(_, _, _) -> ?NOT_LOADED.
cuda_stream() -> ?NOT_LOADED.
cuda_stream_destroy(_) -> ?NOT_LOADED.
cuda_read(_, _) -> ?NOT_LOADED.
