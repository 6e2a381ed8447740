%% The functions both builds of test/support/foreign_tensor_nif.c give
%% (foreign_tensor_nif and foreign_tensor_nif_v1): each module's stubs,
%% replaced when its NIF library loads.
-export([produce/2, read/1, release/1, take/2, take_with_version/2, counters/0, release_on_thread/1,
         cuda_produce/2, cuda_produce_late/3, cuda_stream/0, cuda_stream_destroy/1, cuda_read/2]).

-on_load(init/0).

-define(NOT_LOADED, erlang:nif_error({not_loaded, ?MODULE})).

%% The library: the OS variable LIBRARY_ENV names it (without .so), else
%% LIBRARY_DEFAULT, where make foreign-nif builds it.
init() ->
    Path = case os:getenv(?LIBRARY_ENV) of
               P when is_list(P), P =/= "" -> P;
               _ -> ?LIBRARY_DEFAULT
           end,
    erlang:load_nif(Path, 0).

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
