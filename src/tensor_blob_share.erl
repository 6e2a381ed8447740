%% @private
%% How a tensor's memory is shared with another OS process, for
%% tensor_blob_ipc's exports and node_pack/3: by the kind of memory its
%% device type has (exporter/2), as a shared-memory region (region_export/5:
%% the tensor itself when it is a whole region, else a copy into a new one)
%% or by a CUDA IPC handle (cuda_ipc_share/2).
-module(tensor_blob_share).

-include("tensor_blob_internal.hrl").

-export([exporter/2, region_export/5, region_name/2, cuda_ipc_share/2, exported/4]).
%% For the tests: how a device's memory is exported, by the device table.
-export([exporters/0]).

-import(tensor_blob_error, [badarg/3]).

%% How memory is shared with another OS process, by the kind of memory
%% the device table's dlpack column says a device type has (tables/0):
%% host memory (kDLCPU, 1) as a shared-memory region, CUDA device memory
%% (kDLCUDA, 2) by a CUDA IPC handle. A device type of any other kind has
%% no export.
-define(IPC_EXPORTERS, #{1 => region, 2 => cuda_ipc}).

%% What an export gives: address is undefined for a region.
-type export() :: #{kind := ipc, handle := binary(), address := undefined | non_neg_integer(),
                    data_size := non_neg_integer(), tensor := tensor_blob:tensor()}.
-export_type([export/0]).

%% How tensor_blob_ipc:export/1 shares memory on Device, by the row of its
%% device type in Tables (tables/0): region or cuda_ipc, or a badarg naming
%% the device and the device types that have an export.
-spec exporter(tensor_blob:device(), #{devices := [tensor_blob:device_info()], atom() => term()}) ->
          region | cuda_ipc.
exporter(Device, #{devices := Rows}) ->
    Type = case Device of
               {Name, _Index} -> Name;
               Name -> Name
           end,
    case [maps:get(Code, ?IPC_EXPORTERS) || #{name := N, dlpack := Code} <- Rows, N =:= Type,
                                            is_map_key(Code, ?IPC_EXPORTERS)] of
        [Exporter] ->
            Exporter;
        [] ->
            Exporting = [N || #{name := N, dlpack := Code} <- Rows, is_map_key(Code, ?IPC_EXPORTERS)],
            badarg(wrong_device, tensor,
                   ["tensor: its memory is on ", {term, Device}, ", which ",
                    {code, "tensor_blob_ipc:export/1", "TensorBlob.IPC.export/1"},
                    " cannot share: it shares the memory of the device types ", {term, Exporting},
                    " only. Copy it to one of those first (",
                    {code, "tensor_blob:to_device(T, cpu)", "TensorBlob.Tensor.to_device(t, :cpu)"}, ")"])
    end.

%% The DLPack device codes (the device table's dlpack column) whose memory
%% tensor_blob_ipc:export/1 shares, and how.
-spec exporters() -> #{integer() => region | cuda_ipc}.
exporters() -> ?IPC_EXPORTERS.

%% T's device memory shared by a CUDA IPC handle, for tensor_blob_ipc's
%% export/1 and cuda_torch_export/1 alike: {Handle, Device, Size, Shared}.
%% Shared is T, or when T is not contiguous a contiguous copy on the device
%% (reported as made by Function).
-spec cuda_ipc_share(tensor_blob:tensor(), {module(), atom(), arity()}) ->
          {binary(), non_neg_integer(), non_neg_integer(), tensor_blob:tensor()}.
cuda_ipc_share(T, Function) ->
    Start = tensor_blob_telemetry:start(copy),
    {_, _, Size, Shared} = Share = ?NIF(tensor_blob_nif:cuda_ipc_export(T)),
    _ = Shared =:= T orelse tensor_blob_telemetry:copy(Start, Function, not_contiguous, Size, Shared) =:= ok,
    Share.

%% T shared as a region of Format (posix: tensor_blob_ipc:zeros/2's, torch:
%% PyTorch's CPU format, tensor_blob_ipc:torch_zeros/2's): T itself when it
%% is a whole region of that format (Region, its region_name/2, is {Name,
%% Size}), else a copy into a new one (Region is nil; reported as made by
%% Function), of T's {Shape, Dtype} when the caller has read them (else
%% undefined).
-spec region_export(tensor_blob:tensor(), posix | torch, nil | {binary(), non_neg_integer()},
                    undefined | {tensor_blob:shape(), tensor_blob:dtype()}, {module(), atom(), arity()}) ->
          export().
region_export(T, _Format, {Name, Size}, _Facts, _Function) ->
    #{kind => ipc, handle => Name, address => undefined, data_size => Size, tensor => T};
region_export(T, Format, nil, undefined, Function) ->
    {_, Shape, _, Dtype, _, _, _, _} = ?NIF(tensor_blob_nif:blob_fields(T)),
    region_export(T, Format, nil, {Shape, Dtype}, Function);
region_export(T, Format, nil, {Shape, Dtype}, Function) ->
    Shared = copy_into(T, region_zeros(Format, Shape, Dtype), Function),
    region_export(Shared, Format, region_name(Format, Shared), {Shape, Dtype}, Function).

%% T's elements written into Region, a new region of its shape and dtype:
%% one copy (not_a_region), read in place. T is any tensor term the NIF
%% reads (node_pack/3 takes the Elixir struct too).
copy_into(T, Region, Function) ->
    Start = tensor_blob_telemetry:start(copy),
    %% The NIF reads T in place: a binary view of T would freeze it (write/2
    %% refuses it) until the view is collected.
    _ = ?NIF(tensor_blob_nif:write(Region, T)),
    _ = Start =:= undefined orelse
        tensor_blob_telemetry:copy(Start, Function, not_a_region, tensor_blob_tensor:data_bytes(T), T) =:= ok,
    Region.

%% {Name, ByteSize} when T is a whole region of Format, else nil.
-spec region_name(posix | torch, tensor_blob:tensor()) -> nil | {binary(), non_neg_integer()}.
region_name(posix, T) -> ?NIF(tensor_blob_nif:ipc_name(T));
region_name(torch, T) -> ?NIF(tensor_blob_nif:torch_shm_name(T)).

region_zeros(posix, Shape, Dtype) -> ?DTYPE_CHECKED(Dtype, tensor_blob_nif:ipc_zeros(Shape, Dtype));
region_zeros(torch, Shape, Dtype) -> ?DTYPE_CHECKED(Dtype, tensor_blob_nif:torch_shm_zeros(Shape, Dtype)).

%% An export's transfer event, begun at Start: zero-copy when its tensor is
%% T itself. Returns Export.
-spec exported(tensor_blob_telemetry:token(), {module(), atom(), arity()}, tensor_blob:tensor(), export()) ->
          export().
exported(undefined, _Function, _T, Export) ->
    Export;
exported(Start, Function, T, #{tensor := Shared} = Export) ->
    tensor_blob_tensor:transferred(Start, Function, T, Shared =/= T, #{}),
    Export.
