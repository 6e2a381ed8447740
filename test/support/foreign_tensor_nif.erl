%% @private
%% Loads the foreign NIF of test/support/foreign_tensor_nif.c, which the
%% test run builds (make foreign-nif) into build/foreign_tensor_nif.so.
%% FOREIGN_TENSOR_NIF names another build (without .so).
-module(foreign_tensor_nif).

%% The table the header keeps (this build's header alone).
-export([table_find/1, table_take/1]).
%% DLPack 1.3's exchange API over terms (this build's header alone).
-export([exchange_api/1, exchange_round/1, exchange_view/1, exchange_alloc/4, exchange_stream/2]).

-define(LIBRARY_ENV, "FOREIGN_TENSOR_NIF").
-define(LIBRARY_DEFAULT, "build/foreign_tensor_nif").
-include("foreign_tensor_nif.hrl").

table_find(_) -> ?NOT_LOADED.
table_take(_) -> ?NOT_LOADED.
exchange_api(_) -> ?NOT_LOADED.
exchange_round(_) -> ?NOT_LOADED.
exchange_view(_) -> ?NOT_LOADED.
exchange_alloc(_, _, _, _) -> ?NOT_LOADED.
exchange_stream(_, _) -> ?NOT_LOADED.
