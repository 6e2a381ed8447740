%% @private
%% The library's tables as the facades see them: tables/0 (the NIF's
%% answer, read once and kept in persistent_term under {tensor_blob,
%% tables}) and the rows asked for by name. tensor_blob's tables/0 and
%% dtype_info/1 are these.
-module(tensor_blob_tables).

-export([tables/0, dtype_info/1, keeps_owner/1]).

-spec tables() -> #{dtypes := [tensor_blob:dtype_info()], devices := [tensor_blob:device_info()],
                    storage := [tensor_blob:storage_info()], reasons := [atom()],
                    safetensors := [tensor_blob:safetensors_dtype_info()]}.
tables() ->
    case persistent_term:get({tensor_blob, tables}, undefined) of
        undefined ->
            Tables = tensor_blob_nif:tables(),
            persistent_term:put({tensor_blob, tables}, Tables),
            Tables;
        Tables ->
            Tables
    end.

%% Whether a tensor whose memory/1 is Memory keeps its memory's owner alive: the storage table's
%% keeps_owner for the kinds memory/1 names Memory (they agree: the tests check it). The atoms
%% that do are kept beside the tables, under {tensor_blob, keeps_owner}.
-spec keeps_owner(tensor_blob:memory()) -> boolean().
keeps_owner(Memory) ->
    Keeping = case persistent_term:get({tensor_blob, keeps_owner}, undefined) of
                  undefined ->
                      #{storage := Kinds} = tables(),
                      K = lists:usort([M || #{memory := M, keeps_owner := true} <- Kinds]),
                      persistent_term:put({tensor_blob, keeps_owner}, K),
                      K;
                  K ->
                      K
              end,
    lists:member(Memory, Keeping).

-spec dtype_info(atom()) -> tensor_blob:dtype_info().
dtype_info(Name) ->
    #{dtypes := Dtypes} = tables(),
    case [D || #{name := N} = D <- Dtypes, N =:= Name] of
        [Info] -> Info;
        [] -> tensor_blob_error:badarg(bad_dtype, dtype, ["dtype: expected a canonical dtype, got ", {term, Name}])
    end.
