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

-export([open/1, open/2, write/2, write/3]).

-export_type([file/0]).

-include("tensor_blob_internal.hrl").

-import(tensor_blob_error, [badarg/3]).
-import(tensor_blob_options, [check/3]).

-type file() :: #{tensors := #{binary() => tensor_blob:tensor()}, metadata := #{binary() => binary()}}.

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
%% Opts: only => [Name]: those tensors alone. nested => true: the tensors
%% as nested maps, each name split at its "." (the form write/3 takes). misaligned => copy (the
%% default) | refuse: a tensor whose offset in the file does not fit its
%% element size cannot be viewed without a misaligned pointer; it is copied
%% once (a copy event, reason misaligned, with telemetry), or refused.
-spec open(file:name_all(), #{only => [iodata() | atom()], misaligned => copy | refuse, nested => boolean()}) ->
          file().
open(Path, Opts) ->
    #{misaligned := Misaligned, nested := Nested} = Checked =
        check(Opts, [{only, {list, {satisfies, "tensor names (strings or atoms)", fun is_name/1}}},
                     {misaligned, {one_of, [copy, refuse]}, copy}, {nested, boolean, false}], map),
    Name = path(Path),
    Only = case Checked of
               #{only := Names} -> lists:usort([name(only, N) || N <- Names]);
               _ -> all
           end,
    Start = tensor_blob_telemetry:start(copy),
    {Tensors, Meta, Copied} = ?NIF(tensor_blob_nif:safetensors_open(Name, Only)),
    ByName = maps:from_list(Tensors),
    case {Misaligned, Copied} of
        {refuse, [First | _]} ->
            badarg(misaligned, path,
                   ["path: ", {term, Name}, ": tensor ", {term, First}, " starts at an offset that does not fit its "
                    "element size, and misaligned => refuse"]);
        _ ->
            [tensor_blob_telemetry:copy(Start, {?MODULE, open, 2}, misaligned, data_bytes(maps:get(C, ByName)),
                                        maps:get(C, ByName)) || C <- Copied],
            ok
    end,
    #{tensors => case Nested of
                     true -> nest(lists:sort(maps:to_list(ByName)), #{});
                     false -> ByName
                 end,
      metadata => case Meta of nil -> #{}; _ -> maps:from_list(Meta) end}.

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
