%% @private
%% Sharing with other OS processes: exports and opens of shared-memory
%% regions (POSIX and PyTorch's CPU format), CUDA IPC handles, and
%% PyTorch's CUDA sharing format. tensor_blob's ipc_* and cuda_torch_*
%% functions are these; node_pack/3 shares through region_export/5.
-module(tensor_blob_ipc).

-include("tensor_blob_internal.hrl").

-export([ipc_export/1, ipc_open/3, ipc_torch_export/1, cuda_torch_open/3, cuda_torch_export/1,
         cuda_torch_pending/1, region_export/5]).
%% For the tests: how a device's memory is exported, by the device table.
-export([ipc_exporter/2, ipc_exporters/0]).

-import(tensor_blob_error, [badarg/3, not_a_tensor/1]).

%% How memory is shared with another OS process, by the kind of memory
%% the device table's dlpack column says a device type has (tables/0):
%% host memory (kDLCPU, 1) as a shared-memory region, CUDA device memory
%% (kDLCUDA, 2) by a CUDA IPC handle. A device type of any other kind has
%% no export.
-define(IPC_EXPORTERS, #{1 => region, 2 => cuda_ipc}).

%% What an export gives: address is undefined for a region.
-type export() :: #{kind := ipc, handle := binary(), address := undefined | non_neg_integer(),
                    data_size := non_neg_integer(), tensor := tensor_blob:tensor()}.

-spec ipc_export(term()) -> export().
ipc_export(T) when not is_reference(T) ->
    not_a_tensor(T);
ipc_export(T) ->
    Start = tensor_blob_telemetry:start(transfer),
    Function = {tensor_blob, ipc_export, 1},
    %% What the export needs of T, in one crossing.
    {_, Shape, _, Dtype, Device, _, _, _} = ?NIF(tensor_blob_nif:blob_fields(T)),
    Handle = case ipc_exporter(Device, tensor_blob:tables()) of
                 region -> region_export(T, posix, region_name(posix, T), {Shape, Dtype}, Function);
                 cuda_ipc ->
                     {Name, Address, Size, Shared} = cuda_ipc_share(T, Function),
                     #{kind => ipc, handle => Name, address => Address, data_size => Size, tensor => Shared}
             end,
    exported(Start, Function, T, Handle).

%% How ipc_export/1 shares memory on Device, by the row of its device type
%% in Tables (tables/0): region or cuda_ipc, or a badarg naming the device
%% and the device types that have an export.
-spec ipc_exporter(tensor_blob:device(), #{devices := [tensor_blob:device_info()], atom() => term()}) ->
          region | cuda_ipc.
ipc_exporter(Device, #{devices := Rows}) ->
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
                    {code, "tensor_blob:ipc_export/1", "TensorBlob.IPC.export/1"},
                    " cannot share: it shares the memory of the device types ", {term, Exporting},
                    " only. Copy it to one of those first (",
                    {code, "tensor_blob:to_device(T, cpu)", "TensorBlob.Tensor.to_device(t, :cpu)"}, ")"])
    end.

%% The DLPack device codes (the device table's dlpack column) whose memory
%% ipc_export/1 shares, and how.
-spec ipc_exporters() -> #{integer() => region | cuda_ipc}.
ipc_exporters() -> ?IPC_EXPORTERS.

%% T's device memory shared by a CUDA IPC handle, for ipc_export/1 and
%% cuda_torch_export/1 alike: {Handle, Device, Size, Shared}. Shared is T,
%% or when T is not contiguous a contiguous copy on the device (reported
%% as made by Function).
cuda_ipc_share(T, Function) ->
    Start = tensor_blob_telemetry:start(copy),
    {_, _, Size, Shared} = Share = ?NIF(tensor_blob_nif:cuda_ipc_export(T)),
    _ = Shared =:= T orelse tensor_blob_telemetry:copy(Start, Function, not_contiguous, Size, Shared) =:= ok,
    Share.

%% T shared as a region of Format (posix: ipc_zeros/2's, torch: PyTorch's
%% CPU format, ipc_torch_zeros/2's): T itself when it is a whole region of
%% that format (Region, its region_name/2, is {Name, Size}), else a copy
%% into a new one (Region is nil; reported as made by Function), of T's
%% {Shape, Dtype} when the caller has read them (else undefined).
-spec region_export(tensor_blob:tensor(), posix | torch, nil | {binary(), non_neg_integer()},
                    undefined | {tensor_blob:shape(), tensor_blob:dtype()}, {module(), atom(), arity()}) ->
          #{kind := ipc, handle := binary(), address := undefined, data_size := non_neg_integer(),
            tensor := tensor_blob:tensor()}.
region_export(T, _Format, {Name, Size}, _Facts, _Function) ->
    #{kind => ipc, handle => Name, address => undefined, data_size => Size, tensor => T};
region_export(T, Format, nil, undefined, Function) ->
    {_, Shape, _, Dtype, _, _, _, _} = ?NIF(tensor_blob_nif:blob_fields(T)),
    region_export(T, Format, nil, {Shape, Dtype}, Function);
region_export(T, Format, nil, {Shape, Dtype}, Function) ->
    Shared = copy_into(T, region_zeros(Format, Shape, Dtype), Function),
    region_export(Shared, Format, region_name(Format, Shared), {Shape, Dtype}, Function).

region_name(posix, T) -> ?NIF(tensor_blob_nif:ipc_name(T));
region_name(torch, T) -> ?NIF(tensor_blob_nif:torch_shm_name(T)).

region_zeros(posix, Shape, Dtype) -> tensor_blob:ipc_zeros(Shape, Dtype);
region_zeros(torch, Shape, Dtype) -> tensor_blob:ipc_torch_zeros(Shape, Dtype).

%% T's elements written into Region, a new region of its shape and dtype:
%% one copy (not_a_region), read in place.
copy_into(T, Region, Function) ->
    Start = tensor_blob_telemetry:start(copy),
    %% The NIF reads T in place: a binary view of T would freeze it (write/2
    %% refuses it) until the view is collected.
    _ = ?NIF(tensor_blob_nif:write(Region, T)),
    _ = Start =:= undefined orelse
        tensor_blob_telemetry:copy(Start, Function, not_a_region, tensor_blob_tensor:data_bytes(T), T) =:= ok,
    Region.

%% An export's transfer event: zero-copy when its tensor is T itself.
exported(undefined, _Function, _T, Export) ->
    Export;
exported(Start, Function, T, #{tensor := Shared} = Export) ->
    tensor_blob_tensor:transferred(Start, Function, T, Shared =/= T, #{}),
    Export.

-spec ipc_open(term(), tensor_blob:dtype(), tensor_blob:shape()) -> tensor_blob:tensor().
ipc_open(#{kind := ipc, address := Device} = Handle, Dtype, Shape) when is_integer(Device) ->
    ?DTYPE_CHECKED(Dtype, tensor_blob_nif:cuda_ipc_open(maps:get(handle, Handle, undefined), Device, Dtype, Shape));
ipc_open(#{kind := ipc, handle := Name}, Dtype, Shape) ->
    ipc_open(Name, Dtype, Shape);
ipc_open(#{} = Handle, _Dtype, _Shape) ->
    badarg(bad_value, handle, ["handle: expected an IPC handle (kind ipc, handle), got ", {term, Handle}]);
ipc_open(<<"/torch_", _/binary>> = Name, Dtype, Shape) ->
    tensor_blob:ipc_torch_open(Name, Dtype, Shape);
ipc_open(<<"torch_", _/binary>> = Name, Dtype, Shape) ->
    tensor_blob:ipc_torch_open(Name, Dtype, Shape);
ipc_open(Name, Dtype, Shape) ->
    ?DTYPE_CHECKED(Dtype, tensor_blob_nif:ipc_open(Name, Dtype, Shape)).

-spec ipc_torch_export(term()) -> export().
ipc_torch_export(T) when is_reference(T) ->
    Start = tensor_blob_telemetry:start(transfer),
    Function = {tensor_blob, ipc_torch_export, 1},
    exported(Start, Function, T, region_export(T, torch, region_name(torch, T), undefined, Function));
ipc_torch_export(T) ->
    not_a_tensor(T).

-spec cuda_torch_open(term(), tensor_blob:dtype(), tensor_blob:shape()) -> tensor_blob:tensor().
cuda_torch_open(#{device := Device, handle := Handle, storage_size_bytes := Size,
                  storage_offset_bytes := Offset, ref_counter_handle := Counter,
                  ref_counter_offset := Slot, event_handle := Event,
                  event_sync_required := Sync}, Dtype, Shape) ->
    ?DTYPE_CHECKED(Dtype, tensor_blob_nif:cuda_torch_open(Device, Handle, Size, Offset, Counter, Slot,
                                                          Event, Sync, Dtype, Shape));
cuda_torch_open(Share, _Dtype, _Shape) ->
    badarg(bad_value, share, ["share: expected the fields of storage._share_cuda_() as a map (device, handle, "
                              "storage_size_bytes, storage_offset_bytes, ref_counter_handle, ref_counter_offset, "
                              "event_handle, event_sync_required), got ", {term, Share}]).

-spec cuda_torch_export(term()) -> map().
cuda_torch_export(T) when not is_reference(T) ->
    not_a_tensor(T);
cuda_torch_export(T) ->
    {Handle, Device, Size, Shared} = cuda_ipc_share(T, {tensor_blob, cuda_torch_export, 1}),
    {Raw, Offset} = case Handle of
                        <<R:64/binary>> -> {R, 0};
                        <<R:64/binary, O:64/little-unsigned>> -> {R, O}
                    end,
    Counter = cuda_torch_counter(),
    {Name, _} = region_name(torch, Counter),
    #{device => Device, handle => Raw, storage_size_bytes => Size, storage_offset_bytes => Offset,
      ref_counter_handle => Name, ref_counter_offset => 0, event_handle => <<0:512>>,
      event_sync_required => false, tensor => Shared, counter => Counter}.

%% A counter file as PyTorch's producers make one (CUDA_IPC_REF_COUNTER_FILE_SIZE
%% int64 counters after the header), its first counter the receiver's 1.
cuda_torch_counter() ->
    Slots = 10000,
    Counter = tensor_blob:ipc_torch_zeros({Slots}, int64),
    _ = tensor_blob:write(Counter, <<1:64/native-signed, 0:((Slots - 1) * 64)>>),
    Counter.

-spec cuda_torch_pending(map()) -> integer().
cuda_torch_pending(#{counter := Counter, ref_counter_offset := Slot}) when is_integer(Slot), Slot >= 0 ->
    case tensor_blob:to_binary(Counter) of
        <<_:Slot/binary-unit:64, N:64/native-signed, _/binary>> -> N;
        Bytes -> badarg(out_of_extent, ref_counter_offset,
                        ["ref_counter_offset: ", integer_to_list(Slot), " is past the counter's ",
                         integer_to_list(byte_size(Bytes) div 8), " slots"])
    end;
cuda_torch_pending(#{counter := _, ref_counter_offset := Slot}) ->
    badarg(bad_value, ref_counter_offset, ["ref_counter_offset: expected a non-negative integer, got ", {term, Slot}]);
cuda_torch_pending(Export) ->
    badarg(bad_value, export, ["export: expected cuda_torch_export/1's map (counter and ref_counter_offset), got ",
                               {term, Export}]).
