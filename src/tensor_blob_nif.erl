%% @private
%% The NIF module: loads priv/tensor_blob_nif.so. Stubs only; call the
%% tensor_blob module instead.
-module(tensor_blob_nif).

-on_load(init/0).

-define(NOT_LOADED, erlang:nif_error(not_loaded())).

%% The NIFs of c_src/beam/tb_nifs.h, written by scripts/gen_nifs.py: edit the list, not these lines.
-export([
    load_failures/0,
    nx_type/1,
    stats/0,
    torch_version/0,
    dtypes/0,
    tables/0,
    zeros/2,
    from_binary/3,
    to_binary/1,
    write/2,
    to_device/2,
    narrow/4,
    transpose/3,
    shape/1,
    strides/1,
    dtype/1,
    device/1,
    memory/1,
    overlaps/2,
    writable/1,
    from_binary_view/4,
    to_binary_view/3,
    blob_fields/1,
    from_blob/3,
    from_blob_fields/7,
    to_dlpack/4,
    from_dlpack/5,
    consume_dlpack/1,
    dlpack_version/1,
    dlpack_info/1,
    python_capsule_abi/1,
    python_slot_export/2,
    python_slot_receive/0,
    python_slot_close/2,
    python_slot_export_many/2,
    python_slot_export_tree/2,
    python_slot_receive_many/0,
    ipc_zeros/2,
    ipc_name/1,
    ipc_open/3,
    ipc_reclaim/0,
    torch_shm_zeros/2,
    torch_shm_open/3,
    torch_shm_name/1,
    safetensors_open/4,
    safetensors_info/1,
    safetensors_write/3,
    file_source/1,
    file_view/6,
    cuda_info/0,
    cuda_synchronize/1,
    cuda_memory/1,
    cuda_ipc_export/1,
    cuda_ipc_open/4,
    cuda_torch_open/10
]).

load_failures() -> ?NOT_LOADED.
nx_type(_) -> ?NOT_LOADED.
stats() -> ?NOT_LOADED.
torch_version() -> ?NOT_LOADED.
dtypes() -> ?NOT_LOADED.
tables() -> ?NOT_LOADED.
zeros(_, _) -> ?NOT_LOADED.
from_binary(_, _, _) -> ?NOT_LOADED.
to_binary(_) -> ?NOT_LOADED.
write(_, _) -> ?NOT_LOADED.
to_device(_, _) -> ?NOT_LOADED.
narrow(_, _, _, _) -> ?NOT_LOADED.
transpose(_, _, _) -> ?NOT_LOADED.
shape(_) -> ?NOT_LOADED.
strides(_) -> ?NOT_LOADED.
dtype(_) -> ?NOT_LOADED.
device(_) -> ?NOT_LOADED.
memory(_) -> ?NOT_LOADED.
overlaps(_, _) -> ?NOT_LOADED.
writable(_) -> ?NOT_LOADED.
from_binary_view(_, _, _, _) -> ?NOT_LOADED.
to_binary_view(_, _, _) -> ?NOT_LOADED.
blob_fields(_) -> ?NOT_LOADED.
from_blob(_, _, _) -> ?NOT_LOADED.
from_blob_fields(_, _, _, _, _, _, _) -> ?NOT_LOADED.
to_dlpack(_, _, _, _) -> ?NOT_LOADED.
from_dlpack(_, _, _, _, _) -> ?NOT_LOADED.
consume_dlpack(_) -> ?NOT_LOADED.
dlpack_version(_) -> ?NOT_LOADED.
dlpack_info(_) -> ?NOT_LOADED.
python_capsule_abi(_) -> ?NOT_LOADED.
python_slot_export(_, _) -> ?NOT_LOADED.
python_slot_receive() -> ?NOT_LOADED.
python_slot_close(_, _) -> ?NOT_LOADED.
python_slot_export_many(_, _) -> ?NOT_LOADED.
python_slot_export_tree(_, _) -> ?NOT_LOADED.
python_slot_receive_many() -> ?NOT_LOADED.
ipc_zeros(_, _) -> ?NOT_LOADED.
ipc_name(_) -> ?NOT_LOADED.
ipc_open(_, _, _) -> ?NOT_LOADED.
ipc_reclaim() -> ?NOT_LOADED.
torch_shm_zeros(_, _) -> ?NOT_LOADED.
torch_shm_open(_, _, _) -> ?NOT_LOADED.
torch_shm_name(_) -> ?NOT_LOADED.
safetensors_open(_, _, _, _) -> ?NOT_LOADED.
safetensors_info(_) -> ?NOT_LOADED.
safetensors_write(_, _, _) -> ?NOT_LOADED.
file_source(_) -> ?NOT_LOADED.
file_view(_, _, _, _, _, _) -> ?NOT_LOADED.
cuda_info() -> ?NOT_LOADED.
cuda_synchronize(_) -> ?NOT_LOADED.
cuda_memory(_) -> ?NOT_LOADED.
cuda_ipc_export(_) -> ?NOT_LOADED.
cuda_ipc_open(_, _, _, _) -> ?NOT_LOADED.
cuda_torch_open(_, _, _, _, _, _, _, _, _, _) -> ?NOT_LOADED.
%% End of the NIFs of c_src/beam/tb_nifs.h.

init() ->
    {Path, Source} = library(),
    case Source of
        {argument, Text} ->
            failed([tensor_blob_config:argument_text(nif_path, Text),
                    ": the NIF library did not load. Give the path as an Erlang string "
                    "(-tensor_blob nif_path '\"/path/to/tensor_blob_nif\"'). See guides/configuration.md"]);
        _ ->
            case Source =:= default orelse (Path =/= [] andalso io_lib:printable_unicode_list(Path)) of
                true -> load(Path, Source);
                false -> failed([setting_name(Source), " is ", io_lib:format("~0tp", [Path]),
                                 ": expected the path of the NIF library (a string). See guides/configuration.md"])
            end
    end.

load(Path, Source) ->
    case erlang:load_nif(Path, 0) of
        {error, {Kind, Why}} when Kind =:= load_failed; Kind =:= bad_lib ->
            %% The dynamic loader refused the library, most often for a
            %% shared library it needs (libtorch) that is not where it
            %% looks (load_failed), or the library is not tensor_blob's:
            %% another NIF library, or none (bad_lib). The module loads all
            %% the same, so that every call says why and what to do,
            %% rather than "not available" or an undefined function.
            failed(load_failed_message(Kind, Why, Path, Source));
        Result ->
            _ = Result =:= ok andalso persistent_term:get({?MODULE, load_failed}, undefined) =/= undefined
                andalso persistent_term:erase({?MODULE, load_failed}),
            Result
    end.

failed(Text) ->
    Message = unicode:characters_to_binary(Text),
    io:format(standard_error, "tensor_blob: ~ts~n", [Message]),
    persistent_term:put({?MODULE, load_failed}, Message),
    ok.

%% A library named by the configuration (TENSOR_BLOB_NIF, or the nif_path
%% setting) that is not there: say which setting names it, and how to fix
%% it; nothing to rebuild.
load_failed_message(Kind, Why, Path, Source) when Source =/= default ->
    case {Kind, filelib:is_regular(Path ++ ".so")} of
        {_, false} ->
            [setting_name(Source), " names ", Path, ", and there is no ", Path,
             ".so: the NIF library did not load. ", set_it()];
        {bad_lib, true} ->
            [setting_name(Source), " names ", Path, ", and ", Path, ".so is not tensor_blob's NIF library (",
             why_text(Why), "): the NIF library did not load. ", set_it()];
        {load_failed, true} ->
            [load_failed_message(Why), " (", setting_name(Source), " names ", Path, ".so)"]
    end;
load_failed_message(_Kind, Why, _Path, default) ->
    load_failed_message(Why).

set_it() ->
    ["Set it to a build of the library (its path, with or without .so), or unset it to load the one in ",
     filename:join(priv_dir(), "tensor_blob_nif.so"), ". See guides/configuration.md"].

why_text(Why) ->
    unicode:characters_to_list(io_lib:format("~ts", [Why])).

setting_name({os, Var}) -> [Var, " (an OS environment variable)"];
setting_name(app_env) -> "the application environment's nif_path".

load_failed_message(Why) ->
    Text = why_text(Why),
    Fix = case string:find(Text, "libtorch") =/= nomatch orelse string:find(Text, "libc10") =/= nomatch of
              true ->
                  "it needs libtorch's shared libraries (libtorch.so, libtorch_cpu.so, libc10.so) where the "
                  "dynamic loader finds them: install the libtorch it was built against on this machine, or "
                  "set LD_LIBRARY_PATH to its lib folder";
              false ->
                  "build it (make, or mix compile) for this machine"
          end,
    ["the NIF library did not load (", Text, "); ", Fix,
     ". See \"Deployment\" in guides/building.md"].

%% The library to load (the path without .so) and the setting that names
%% it: TENSOR_BLOB_NIF or the application environment's nif_path
%% (tensor_blob_config), for example the AddressSanitizer build that make
%% asan-test runs; by default priv/tensor_blob_nif.so. A path given with
%% .so is taken without it (erlang:load_nif/2 adds it).
library() ->
    case tensor_blob_config:lookup(nif_path) of
        {_, default} ->
            {default_library(), default};
        {Path, Source} ->
            Chars = if is_binary(Path) -> unicode:characters_to_list(Path); true -> Path end,
            case Chars =/= [] andalso io_lib:printable_unicode_list(Chars) of
                true -> {filename:rootname(Chars, ".so"), Source};
                false -> {Path, Source}
            end
    end.

default_library() ->
    filename:join(priv_dir(), "tensor_blob_nif").

priv_dir() ->
    case code:priv_dir(tensor_blob) of
        {error, bad_name} ->
            %% Loaded outside an application (a bare code path): ../priv.
            filename:join(filename:dirname(filename:dirname(code:which(?MODULE))), "priv");
        Dir ->
            Dir
    end.

%% A stub raises why the library did not load, where init/0 knows it
%% (erlang:nif_error/1 raises its argument, and tells dialyzer that the
%% NIF returns what its spec says).
not_loaded() ->
    case persistent_term:get({?MODULE, load_failed}, undefined) of
        undefined -> {not_loaded, ?MODULE};
        Message -> {tensor_blob, Message}
    end.
