%% @doc Files of tensors in the safetensors format, both ways: the Erlang API
%% of this door (TensorBlob.SafeTensors is its Elixir facade).
%%
%% open/2 maps a file privately and answers its tensors by name: no tensor
%% byte is read, and each tensor keeps the mapping alive (the mapping lives
%% until the last tensor, view, DLPack export or binary over it is gone).
%% Writes through a tensor go to pages of this VM's own (copied on first
%% write): the file is never written. Another program may shrink the file
%% while it is mapped: the library's own copies of it (to_binary, write/2,
%% to_device, write/3 here) then fail with an error instead of killing the
%% VM, and a zero-copy binary of it is refused unless asked for
%% (#{copy => false, unsafe_shared_memory => true}), as for shared-memory
%% regions.
%%
%% write/3 writes tensors into a temporary file beside the target, one
%% after another (no file image in memory), and renames it over the target:
%% a reader's mapping of the old file stays valid.
-module(tensor_blob_safetensors).

-export([open/1, open/2, info/1, write/2, write/3]).

-export_type([file/0, info/0]).

-include("tensor_blob_internal.hrl").

-import(tensor_blob_error, [badarg/3]).
-import(tensor_blob_options, [check/3]).

-type file() :: #{tensors := #{binary() => tensor_blob:tensor()}, metadata := #{binary() => binary()},
                  unsupported := #{binary() => unheld()}}.
-type unheld() :: #{dtype := binary(), shape := tuple(), opened := bytes | skipped, why := binary()}.
%% A tensor the linked libtorch cannot hold: its safetensors dtype, its shape as the file gives it,
%% whether it opened as its bytes or was left out, and why.
-type info() :: #{tensors := #{binary() => entry_info()}, metadata := #{binary() => binary()},
                  data_start => non_neg_integer(), file_size => non_neg_integer(),
                  shards => #{binary() => #{data_start := non_neg_integer(), file_size := non_neg_integer()}}}.
%% A file's header (data_start and file_size), or a sharded checkpoint's (shards).
-type entry_info() :: #{dtype := binary(), shape := tuple(), data_offsets := {non_neg_integer(), non_neg_integer()},
                        tensor_dtype := atom() | nil, opens := boolean(), shard => binary()}.
%% A tensor of a file's header: its safetensors dtype and shape, its offsets in the data buffer, the
%% library's dtype that holds it (nil where none does), whether this build opens it, and (of a sharded
%% checkpoint) the shard file that holds it.

%% @equiv open(Path, #{})
-spec open(file:name_all()) -> file().
open(Path) -> open(Path, #{}).

%% @doc The tensors of a safetensors file, by name, and its __metadata__
%% (an empty map when it has none). The header is checked as the format's
%% reference implementation checks it; a refusal is error({badarg,
%% Message}) naming the file and the tensor, with reason bad_file (the
%% format), bad_dtype (a dtype the format and this library do not share),
%% unsupported (one the linked libtorch lacks), missing (no such file, or a
%% name asked for that the file lacks). A symbolic link to a regular file is
%% followed; a FIFO, a device or a directory is refused without opening it.
%%
%% A sharded checkpoint opens whole: Path names its index
%% (model.safetensors.index.json, whose weight_map places each tensor in a
%% shard file beside it) or the folder that holds it. Every shard is mapped
%% once, its tensors pinning it, and the answer is one map of every shard's
%% tensors, with the index's metadata. A shard the index names that is
%% missing is refused (missing), and so is a tensor held by two shards, or
%% by another shard than the index says (bad_file); only => [Name] maps
%% only the shards that hold those names.
%%
%% Opts: only => [Name]: those tensors alone. nested => true: the tensors
%% as nested maps, each name split at its "." (the form write/3 takes). misaligned => copy (the
%% default) | refuse: a tensor whose offset in the file does not fit its
%% element size cannot be viewed without a misaligned pointer; it is copied
%% once, read from the file straight into its own memory (a copy event,
%% reason misaligned, with telemetry), or refused before any byte is read.
%% unsupported => refuse (the default) | skip | bytes: a tensor whose dtype
%% the linked libtorch cannot hold (tables/0's safetensors list: F6_E2M3
%% and F6_E3M2 have no libtorch dtype, the others one of a release) refuses
%% the file, is left out, or opens as its bytes (uint8, its last dimension
%% in bytes: never read as another dtype); either way the answer's
%% unsupported map names it, with its dtype, its shape and why.
-spec open(file:name_all(), #{only => [iodata() | atom()], misaligned => copy | refuse, nested => boolean(),
                              unsupported => refuse | skip | bytes}) ->
          file().
open(Path, Opts) ->
    #{misaligned := Misaligned, nested := Nested, unsupported := Unsupported} = Checked =
        check(Opts, [{only, {list, {satisfies, "tensor names (strings or atoms)", fun is_name/1}}},
                     {misaligned, {one_of, [copy, refuse]}, copy}, {nested, boolean, false},
                     {unsupported, {one_of, [refuse, skip, bytes]}, refuse}], map),
    Name = path(Path),
    Only = case Checked of
               #{only := Names} -> lists:usort([name(only, N) || N <- Names]);
               _ -> all
           end,
    How = {Misaligned, Unsupported},
    {ByName, Meta, Unheld} = case index_of(Name) of
                                 none -> open_file(Name, Only, How);
                                 Index -> open_index(Index, Only, How)
                             end,
    #{tensors => case Nested of
                     true -> nest(lists:sort(maps:to_list(ByName)), #{});
                     false -> ByName
                 end,
      metadata => Meta, unsupported => Unheld}.

%% @doc The header of a safetensors file alone, neither mapped nor read beyond
%% it, checked as open/2 checks it: each tensor's safetensors dtype, shape
%% and offsets in the data buffer, the dtype of the library that holds it
%% (tensor_dtype, nil where none does: F6_E2M3, F6_E3M2) and whether this
%% build opens it (opens: the linked libtorch holds that dtype), the
%% metadata, where the data start and the file's size. Of a sharded
%% checkpoint (its index, or the folder holding it), every shard's header:
%% each tensor also names its shard, the metadata is the index's, and
%% shards maps each shard file to its data_start and file_size.
-spec info(file:name_all()) -> info().
info(Path) ->
    Name = path(Path),
    case index_of(Name) of
        none -> file_info(Name);
        Index -> index_info(Index)
    end.

file_info(Name) ->
    {Entries, Meta, DataStart, Size} = ?NIF(tensor_blob_nif:safetensors_info(Name)),
    #{tensors => maps:from_list([{N, #{dtype => D, shape => Shape, data_offsets => {B, E}, tensor_dtype => T,
                                       opens => Held}}
                                 || {N, D, Shape, B, E, T, Held} <- Entries]),
      metadata => metadata(Meta), data_start => DataStart, file_size => Size}.

%% Every shard's header, each tensor where the index places it.
index_info(Index) ->
    {WeightMap, Meta} = read_index(Index),
    Dir = filename:dirname(Index),
    Shards = lists:usort(maps:values(WeightMap)),
    Infos = [{Shard, begin
                         Path = filename:join(Dir, Shard),
                         open_shard_check(Index, Path),
                         file_info(Path)
                     end} || Shard <- Shards],
    Tensors = lists:foldl(fun({Shard, #{tensors := Ts}}, Acc) ->
                                  merge_shard(Index, WeightMap, Shard,
                                              maps:map(fun(_, I) -> I#{shard => Shard} end, Ts), Acc)
                          end, #{}, Infos),
    [badarg(bad_file, path, ["path: the index ", {term, Index}, " places ", {term, N}, " in ", {term, Shard},
                             ", which does not hold it"])
     || {N, Shard} <- lists:sort(maps:to_list(WeightMap)), not is_map_key(N, Tensors)],
    #{tensors => Tensors, metadata => Meta,
      shards => maps:from_list([{S, maps:with([data_start, file_size], I)} || {S, I} <- Infos])}.

metadata(nil) -> #{};
metadata(Meta) -> maps:from_list(Meta).

%% One file's tensors (Only: all, or the names asked for), metadata and
%% the tensors the linked libtorch cannot hold.
open_file(Name, Only, {Misaligned, Unsupported}) ->
    Start = tensor_blob_telemetry:start(copy),
    %% misaligned => refuse is refused by the NIF before any byte is read.
    {Tensors, Meta, Copied, Unheld} = ?NIF(tensor_blob_nif:safetensors_open(Name, Only, Unsupported, Misaligned)),
    ByName = maps:from_list(Tensors),
    [tensor_blob_telemetry:copy(Start, {?MODULE, open, 2}, misaligned, data_bytes(maps:get(C, ByName)),
                                maps:get(C, ByName)) || C <- Copied],
    {ByName, metadata(Meta), maps:from_list([unheld(Unsupported, U) || U <- Unheld])}.

%% A tensor the linked libtorch cannot hold, as open/2 reports it.
unheld(Unsupported, {Name, Dtype, Shape, TableDtype}) ->
    Why = case TableDtype of
              nil -> [Dtype, " has no dtype in libtorch"];
              _ -> [Dtype, " is libtorch's ", atom_to_binary(TableDtype), " (libtorch ",
                    maps:get(since, tensor_blob:dtype_info(TableDtype)), "+), which the linked libtorch lacks"]
          end,
    {Name, #{dtype => Dtype, shape => Shape, why => iolist_to_binary(Why),
             opened => case Unsupported of bytes -> bytes; _ -> skipped end}}.

%% A sharded checkpoint's index: the path of one (NAME.safetensors.index.json),
%% or of a folder holding exactly one. none for anything else.
index_of(Name) ->
    case filelib:is_dir(Name) of
        true ->
            case filelib:wildcard("*.safetensors.index.json", binary_to_list(Name)) of
                [One] -> filename:join(Name, One);
                [] -> badarg(bad_file, path, ["path: ", {term, Name}, " is a directory, not a safetensors file, "
                                              "and holds no sharded checkpoint's index (*.safetensors.index.json)"]);
                Many -> badarg(bad_file, path, ["path: ", {term, Name}, " holds more than one index: ",
                                                {term, [list_to_binary(M) || M <- Many]}, "; name one"])
            end;
        false ->
            case lists:suffix(".index.json", binary_to_list(Name)) of
                true -> Name;
                false -> none
            end
    end.

%% The largest index read: a checkpoint of a million tensors has an index
%% of some tens of MiB.
-define(INDEX_BYTES, (256 bsl 20)).

%% The tensors of every shard an index names (Only: those shards that hold
%% the names asked for), each shard mapped once; the index's metadata.
open_index(Index, Only, How) ->
    {WeightMap, Meta} = read_index(Index),
    Wanted = case Only of
                 all -> WeightMap;
                 Names -> maps:from_list([{N, index_entry(Index, WeightMap, N)} || N <- Names])
             end,
    Shards = maps:groups_from_list(fun({_, Shard}) -> Shard end, fun({N, _}) -> N end, maps:to_list(Wanted)),
    Dir = filename:dirname(Index),
    Opened = [{Shard, open_shard(Index, filename:join(Dir, Shard), Only, Names, How)}
              || {Shard, Names} <- lists:sort(maps:to_list(Shards))],
    All = lists:foldl(fun({Shard, {Tensors, _}}, Acc) -> merge_shard(Index, WeightMap, Shard, Tensors, Acc) end, #{},
                      Opened),
    Unheld = maps:from_list(lists:append([maps:to_list(U) || {_, {_, U}} <- Opened])),
    [badarg(bad_file, path, ["path: the index ", {term, Index}, " places ", {term, N}, " in ", {term, Shard},
                             ", which does not hold it"])
     || {N, Shard} <- lists:sort(maps:to_list(Wanted)), not is_map_key(N, All), not is_map_key(N, Unheld)],
    {All, Meta, Unheld}.

index_entry(Index, WeightMap, N) ->
    case WeightMap of
        #{N := Shard} -> Shard;
        _ -> badarg(missing, only, ["only: ", {term, N}, " is no tensor of the index ", {term, Index}])
    end.

open_shard(Index, Path, Only, Names, How) ->
    open_shard_check(Index, Path),
    ShardOnly = case Only of
                    all -> all;
                    _ -> lists:usort(Names)
                end,
    {Tensors, _Meta, Unheld} = open_file(Path, ShardOnly, How),
    {Tensors, Unheld}.

open_shard_check(Index, Path) ->
    filelib:is_regular(Path) orelse
        badarg(missing, path, ["path: the index ", {term, Index}, " names the shard ", {term, Path},
                               ", which is missing"]).

%% A shard's tensors into the whole: each where the index places it, and
%% in one shard only.
merge_shard(Index, WeightMap, Shard, Tensors, Acc) ->
    maps:fold(fun(N, T, A) ->
                      is_map_key(N, A) andalso
                          badarg(bad_file, path, ["path: the shards of ", {term, Index}, " hold ", {term, N},
                                                  " twice"]),
                      case WeightMap of
                          #{N := Shard} -> A#{N => T};
                          #{N := Other} ->
                              badarg(bad_file, path, ["path: the index ", {term, Index}, " places ", {term, N},
                                                      " in ", {term, Other}, ", but ", {term, Shard}, " holds it"]);
                          _ ->
                              badarg(bad_file, path, ["path: the shard ", {term, Shard}, " holds ", {term, N},
                                                      ", which the index ", {term, Index}, " does not name"])
                      end
              end, Acc, Tensors).

%% The index: {"weight_map": {Name: ShardFile}, "metadata": {...}}, a
%% shard a plain file name beside the index (never a path out of its
%% folder). Metadata values are kept as strings (an integer as its
%% digits).
read_index(Index) ->
    Text = case filelib:file_size(Index) of
               Size when Size > ?INDEX_BYTES ->
                   badarg(bad_file, path, ["path: the index ", {term, Index}, " is over ",
                                           integer_to_binary(?INDEX_BYTES), " bytes"]);
               _ ->
                   case file:read_file(Index) of
                       {ok, Bytes} -> Bytes;
                       {error, enoent} -> badarg(missing, path, ["path: no such file: ", {term, Index}]);
                       {error, Why} -> badarg(bad_file, path, ["path: ", {term, Index}, ": ",
                                                               list_to_binary(file:format_error(Why))])
                   end
           end,
    case tensor_blob_json:decode(Text) of
        {ok, #{<<"weight_map">> := WeightMap} = Json} when is_map(WeightMap) ->
            [bad_index(Index, ["the tensor ", {term, N}, " has no shard file name: ", {term, S}])
             || {N, S} <- maps:to_list(WeightMap), not shard_name(S)],
            {WeightMap, index_metadata(Index, maps:get(<<"metadata">>, Json, #{}))};
        {ok, _} ->
            bad_index(Index, ["it has no \"weight_map\" of tensor names to shard files"]);
        {error, {duplicate_key, Key}} ->
            bad_index(Index, ["it names ", {term, Key}, " twice"]);
        error ->
            bad_index(Index, ["it is not JSON this library reads (objects, strings, integers)"])
    end.

shard_name(S) ->
    is_binary(S) andalso S =/= <<>> andalso filename:basename(S) =:= S andalso S =/= <<".">> andalso S =/= <<"..">>.

index_metadata(_Index, Meta) when is_map(Meta) ->
    maps:from_list([{K, if is_integer(V) -> integer_to_binary(V); true -> V end}
                    || {K, V} <- maps:to_list(Meta), is_binary(V) orelse is_integer(V)]);
index_metadata(Index, _Meta) ->
    bad_index(Index, ["its \"metadata\" is not an object"]).

-spec bad_index(binary(), list()) -> no_return().
bad_index(Index, Why) ->
    badarg(bad_file, path, ["path: ", {term, Index}, " is not a sharded checkpoint's index: " | Why]).

%% The tensors by name as nested maps, a name split at each ".": the form
%% write/3 takes, and a model's parameters have.
nest([], Nested) -> Nested;
nest([{Name, T} | Rest], Nested) -> nest(Rest, nest_one(binary:split(Name, <<".">>, [global]), Name, T, Nested)).

nest_one([Key], _Name, T, Map) when not is_map_key(Key, Map) -> Map#{Key => T};
nest_one([Key | Keys], Name, T, Map) when Keys =/= [] ->
    case maps:get(Key, Map, #{}) of
        Inner when is_map(Inner) -> Map#{Key => nest_one(Keys, Name, T, Inner)};
        _ -> nest_clash(Name)
    end;
nest_one(_, Name, _T, _Map) -> nest_clash(Name).

-spec nest_clash(binary()) -> no_return().
nest_clash(Name) ->
    badarg(bad_value, nested, ["nested: the file's names do not nest: ", {term, Name}, " starts with another "
                               "tensor's name and a \".\" (or is the start of one)"]).

%% @equiv write(Path, Tensors, #{})
-spec write(file:name_all(), tensors()) -> ok.
write(Path, Tensors) -> write(Path, Tensors, #{}).

-type tensors() :: #{iodata() | atom() => entry()} | [{iodata() | atom(), entry()}].
-type entry() :: tensor_blob:tensor() | {binary(), tensor_blob:dtype(), tensor_blob:shape()}
               | #{iodata() | atom() => entry()}.

%% @doc Writes Tensors (a map or a list of name and tensor) and Metadata (a
%% map of strings to strings: the header's __metadata__, left out when
%% empty) as a safetensors file at Path, replacing it. A map in place of a
%% tensor holds tensors (or maps of them) by name, and its names are joined
%% to its own with "." (a tensor under "kernel" in a map under "dense" is
%% written as "dense.kernel"), as a model's parameters are saved. A tensor may be any
%% tensor of the library: a strided view (written row-major), a region, a
%% file's tensor, a device's tensor (copied to the host, one at a time), or
%% {Binary, Dtype, Shape} (its bytes, not copied first). Tensors are
%% written largest element first, then by name, as the reference
%% implementation orders them, so each one's offset fits its element size.
-spec write(file:name_all(), tensors(), #{iodata() | atom() => iodata() | atom()}) -> ok.
write(Path, Tensors, Metadata) when is_map(Tensors) ->
    write(Path, maps:to_list(Tensors), Metadata);
write(Path, Tensors, Metadata) when is_list(Tensors), is_map(Metadata) ->
    Name = path(Path),
    Named = lists:append([entries(<<>>, T) || T <- Tensors]),
    case length(lists:usort([N || {N, _} <- Named])) =:= length(Named) of
        true -> ok;
        false -> badarg(bad_value, tensors, ["tensors: a name appears twice in ", {term, [N || {N, _} <- Named]}])
    end,
    Ordered = lists:sort(fun({A, TA}, {B, TB}) -> {-element_size(TA), A} =< {-element_size(TB), B} end, Named),
    Meta = case maps:size(Metadata) of
               0 -> nil;
               _ -> [{name(metadata, K), name(metadata, V)} || {K, V} <- maps:to_list(Metadata)]
           end,
    ?NIF(tensor_blob_nif:safetensors_write(Name, Ordered, Meta));
write(_Path, Tensors, Metadata) when is_list(Tensors) ->
    badarg(bad_value, metadata, ["metadata: expected a map of strings to strings, got ", {term, Metadata}]);
write(_Path, Tensors, _Metadata) ->
    badarg(bad_value, tensors, ["tensors: expected a map or a list of {Name, Tensor}, got ", {term, Tensors}]).

%% The named tensors of one entry: a nested map of them (the parameters of
%% a model, layer by layer) is flattened, its names joined with ".", as
%% the reference's save_model and Bumblebee name them.
entries(Prefix, {Name, {Binary, Dtype, Shape}}) when is_binary(Binary) ->
    [{full_name(Prefix, Name), tensor_blob:from_binary(Binary, Dtype, Shape, #{copy => if_needed})}];
entries(Prefix, {Name, T}) when ?IS_TENSOR_TERM(T) ->
    [{full_name(Prefix, Name), T}];
entries(Prefix, {Name, Nested}) when is_map(Nested), not is_map_key('__struct__', Nested), map_size(Nested) > 0 ->
    Inner = <<(full_name(Prefix, Name))/binary, ".">>,
    lists:append([entries(Inner, E) || E <- lists:sort(maps:to_list(Nested))]);
entries(_Prefix, Other) ->
    badarg(not_a_tensor, tensors, ["tensors: expected {Name, Tensor} (or {Name, a map of them}), got ",
                                   {term, Other}]).

full_name(Prefix, Name) -> <<Prefix/binary, (name(tensors, Name))/binary>>.

element_size(T) -> maps:get(element_size, tensor_blob:dtype_info(tensor_blob:dtype(T))).

data_bytes(T) -> element_size(T) * lists:foldl(fun(D, N) -> D * N end, 1, tuple_to_list(tensor_blob:shape(T))).

%% A file name as the bytes the OS takes.
path(Path) ->
    try filename:flatten(Path) of
        Flat ->
            case unicode:characters_to_binary(Flat, unicode, file:native_name_encoding()) of
                Bin when is_binary(Bin), Bin =/= <<>> -> Bin;
                _ -> bad_path(Path)
            end
    catch
        error:_ -> bad_path(Path)
    end.

-spec bad_path(term()) -> no_return().
bad_path(Path) ->
    badarg(bad_value, path, ["path: expected a file name, got ", {term, Path}]).

%% A term name/2 may take: an atom, a binary or a list (whose content
%% name/2 checks).
is_name(N) -> is_atom(N) orelse is_binary(N) orelse is_list(N).

%% A name or a string as UTF-8.
name(_Argument, A) when is_atom(A) -> atom_to_binary(A, utf8);
name(Argument, S) ->
    try unicode:characters_to_binary(S) of
        Bin when is_binary(Bin) -> Bin;
        _ -> bad_name(Argument, S)
    catch
        error:_ -> bad_name(Argument, S)
    end.

-spec bad_name(atom(), term()) -> no_return().
bad_name(Argument, S) ->
    badarg(bad_value, Argument, [atom_to_binary(Argument, utf8), ": expected a UTF-8 string, got ", {term, S}]).
