%% @private
%% test/support/foreign_tensor_nif.c built against the bridge's first
%% header (test/support/bridge_v1/tensor_blob.h), as a consumer built
%% before the table would be: make foreign-nif builds it into
%% build/foreign_tensor_nif_v1.so (FOREIGN_TENSOR_NIF_V1 names another).
-module(foreign_tensor_nif_v1).

-define(LIBRARY_ENV, "FOREIGN_TENSOR_NIF_V1").
-define(LIBRARY_DEFAULT, "build/foreign_tensor_nif_v1").
-include("foreign_tensor_nif.hrl").

