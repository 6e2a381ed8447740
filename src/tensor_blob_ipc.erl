%% @doc Tensors shared with other OS processes: the Erlang API of shared
%% memory and CUDA IPC (TensorBlob.IPC and TensorBlob.CUDA's PyTorch
%% sharing are its Elixir facade).
%%
%% A CPU tensor is shared as a named shared-memory region: zeros/2 makes a
%% tensor in a new POSIX region, torch_zeros/2 one in a region of PyTorch's
%% CPU sharing format; export/1 and torch_export/1 give the handle another
%% process opens with open/3 (a PyTorch process with
%% torch.UntypedStorage._new_shared_filename_cpu), copying a tensor once
%% into a new region when it is not one already. A CUDA tensor is shared by
%% a CUDA IPC handle (export/1, open/3), or in PyTorch's CUDA sharing format
%% (cuda_torch_export/1, cuda_torch_open/3). reclaim/0 removes what creators
%% that are gone left in shared memory. Bad input raises error({badarg,
%% Message}), as tensor_blob's functions do (tensor_blob:error_reason/1
%% reads its reason and argument).
-module(tensor_blob_ipc).

-include("tensor_blob_internal.hrl").

-export([zeros/2, reclaim/0, export/1, name/1, open/3, torch_zeros/2, torch_export/1, torch_open/3,
         cuda_torch_open/3, cuda_torch_export/1, cuda_torch_pending/1]).

-export_type([handle/0]).

-import(tensor_blob_error, [badarg/3, not_a_tensor/1]).
-import(tensor_blob_share, [region_export/5, region_name/2, cuda_ipc_share/2, exported/4]).

-type handle() :: #{kind := ipc, handle := binary(), address := undefined | non_neg_integer(),
                    data_size := non_neg_integer(), tensor := tensor_blob:tensor()}.
%% What export/1 and torch_export/1 give (the keys of Nx's %Nx.Pointer{kind: ipc}): the handle (a
%% region's name, or a CUDA IPC handle), address (undefined, or the CUDA device index), the size of
%% the data in bytes, and the tensor that keeps the memory alive here.

%% @doc A tensor of zeros in a new POSIX shared-memory region (created with owner-only permissions),
%% which export/1 shares without a copy.
-spec zeros(tensor_blob:shape(), tensor_blob:dtype()) -> tensor_blob:tensor().
zeros(Shape, Dtype) -> ?DTYPE_CHECKED(Dtype, tensor_blob_nif:ipc_zeros(Shape, Dtype)).

%% @doc Releases what creators that are gone left in shared memory: the references their journals
%% list in PyTorch-format headers (each name whose count that takes to zero is removed), then their
%% plain names; returns how many plain names were removed. A creator is judged alive by a lock it
%% holds on a file in the same /dev/shm, never by its pid. A reaper process does this for a dead VM
%% within moments; this covers what it could not (a VM that was its PID namespace's init takes its
%% reaper with it). Done at load too.
-spec reclaim() -> non_neg_integer().
reclaim() -> ?NIF(tensor_blob_nif:ipc_reclaim()).

%% @doc A handle another OS process opens with open/3 (keys as Nx's %Nx.Pointer{kind: ipc}).
%%
%% A CPU tensor: handle is the name of a POSIX shared-memory region and address is undefined. A
%% tensor made by zeros/2 or open/3 (whole, contiguous) is shared as it is; any other CPU tensor is
%% copied once into a new region. The name lives while the handle's tensor is reachable here: open
%% it elsewhere before dropping the handle (an open mapping stays valid after that).
%%
%% A CUDA tensor: handle is the cudaIpcMemHandle_t of its allocation (64 bytes when the tensor
%% starts at the allocation's base, as Torchx's handles do; otherwise 72: the handle, then the
%% tensor's byte offset in the allocation, unsigned 64-bit little-endian), and address is the device
%% index. No copy, unless the tensor is not contiguous (then a contiguous copy on the device is
%% shared: the handle's tensor). The work libtorch queued on the memory is finished first. Keep the
%% handle's tensor reachable here until every opener has dropped its tensors: the memory returns to
%% libtorch's allocator when it is freed here, and an opener would then read whatever is put there
%% next. A handle opens only in another OS process.
-spec export(tensor_blob:tensor()) -> handle().
export(T) -> ?SPANS(export, 1, export_tensor(T)).

export_tensor(T) when not is_reference(T) ->
    not_a_tensor(T);
export_tensor(T) ->
    Start = tensor_blob_telemetry:start(transfer),
    Function = {?MODULE, export, 1},
    %% What the export needs of T, in one crossing.
    {_, Shape, _, Dtype, Device, _, _, _} = ?NIF(tensor_blob_nif:blob_fields(T)),
    Handle = case tensor_blob_share:exporter(Device, tensor_blob_tables:tables()) of
                 region -> region_export(T, posix, region_name(posix, T), {Shape, Dtype}, Function);
                 cuda_ipc ->
                     {Name, Address, Size, Shared} = cuda_ipc_share(T, Function),
                     #{kind => ipc, handle => Name, address => Address, data_size => Size, tensor => Shared}
             end,
    exported(Start, Function, T, Handle).

%% @doc {Name, ByteSize} when T is a whole region (made by zeros/2 or open/3, contiguous, from its
%% start): what export/1 shares without a copy. nil otherwise. Nothing is created or copied.
-spec name(tensor_blob:tensor()) -> {binary(), non_neg_integer()} | nil.
name(T) -> region_name(posix, T).

%% @doc A tensor over the memory a handle names (a handle map, an Nx pointer map with kind ipc, or a
%% region's name), in another OS process (a CPU region opens in this one too). Writes are seen by
%% every process that mapped it. A name that starts with torch_ is a region of PyTorch's format,
%% opened as torch_open/3 opens it.
%%
%% With an integer address, the handle is a CUDA IPC handle of that device (see export/1): the
%% tensor is a CUDA tensor over the exporter's device memory, from the handle's offset, which must
%% hold Shape of Dtype. Its memory is ipc (tensor_blob:memory/1); the last tensor over it closes the
%% mapping (cudaIpcCloseMemHandle, once). A build or machine without CUDA (TB_CUDA=0, a libtorch
%% without CUDA, no runtime or GPU) raises a tensor_blob error saying which; a CUDA handle is never
%% read as a region's name.
-spec open(map() | binary(), tensor_blob:dtype(), tensor_blob:shape()) -> tensor_blob:tensor().
open(#{kind := ipc, address := Device} = Handle, Dtype, Shape) when is_integer(Device) ->
    ?DTYPE_CHECKED(Dtype, tensor_blob_nif:cuda_ipc_open(maps:get(handle, Handle, undefined), Device, Dtype, Shape));
open(#{kind := ipc, handle := Name}, Dtype, Shape) ->
    open(Name, Dtype, Shape);
open(#{} = Handle, _Dtype, _Shape) ->
    badarg(bad_value, handle, ["handle: expected an IPC handle (kind ipc, handle), got ", {term, Handle}]);
open(<<"/torch_", _/binary>> = Name, Dtype, Shape) ->
    torch_open(Name, Dtype, Shape);
open(<<"torch_", _/binary>> = Name, Dtype, Shape) ->
    torch_open(Name, Dtype, Shape);
open(Name, Dtype, Shape) ->
    ?DTYPE_CHECKED(Dtype, tensor_blob_nif:ipc_open(Name, Dtype, Shape)).

%% @doc A tensor of zeros in a new region of PyTorch's CPU sharing format (the file_system strategy:
%% a 64-byte header holding a reference count, then the data), named "/torch_tensor_blob.TOKEN.N"
%% and created with owner-only permissions. This tensor holds one reference.
-spec torch_zeros(tensor_blob:shape(), tensor_blob:dtype()) -> tensor_blob:tensor().
torch_zeros(Shape, Dtype) -> ?DTYPE_CHECKED(Dtype, tensor_blob_nif:torch_shm_zeros(Shape, Dtype)).

%% @doc A handle a PyTorch process opens with torch.UntypedStorage._new_shared_filename_cpu(b"",
%% Handle, DataSize) (what torch.multiprocessing's rebuild_storage_filename calls), and another VM
%% with open/3. A tensor made by torch_zeros/2 or by open/3 of a PyTorch region (whole, contiguous)
%% is shared as it is; any other CPU tensor is copied once into a new region. The handle's tensor
%% holds one reference in the region's header until it is freed; each opener holds its own, and
%% whoever drops the last one removes the name, in any order.
-spec torch_export(tensor_blob:tensor()) -> handle().
torch_export(T) -> ?SPANS(torch_export, 1, torch_export_tensor(T)).

torch_export_tensor(T) when is_reference(T) ->
    Start = tensor_blob_telemetry:start(transfer),
    Function = {?MODULE, torch_export, 1},
    exported(Start, Function, T, region_export(T, torch, region_name(torch, T), undefined, Function));
torch_export_tensor(T) ->
    not_a_tensor(T).

%% @doc A tensor over the data of a region in PyTorch's CPU sharing format, as PyTorch's own openers
%% map it: the data after the 64-byte header, and one reference taken in the header until the last
%% tensor over the mapping (slices included) is freed; the holder that drops the count to zero
%% removes the name, as PyTorch does. PyTorch's regions are named "/torch_PID_N_K" (the second
%% element of what storage._share_filename_cpu_() returns); open/3 opens every name that starts
%% with torch_ this way. A region whose count is already zero (its last user is removing it) is
%% refused.
-spec torch_open(binary(), tensor_blob:dtype(), tensor_blob:shape()) -> tensor_blob:tensor().
torch_open(Name, Dtype, Shape) -> ?DTYPE_CHECKED(Dtype, tensor_blob_nif:torch_shm_open(Name, Dtype, Shape)).

%% @doc A CUDA tensor over a storage PyTorch shared with torch.multiprocessing: Share holds the
%% eight fields of storage._share_cuda_(), by name (device, handle, storage_size_bytes,
%% storage_offset_bytes, ref_counter_handle, ref_counter_offset, event_handle, event_sync_required;
%% the handle's bytes are 64, or 66 in PyTorch 2.4 and later), and Dtype and Shape say what the
%% storage's bytes are, from its start (a tensor at a storage offset is a tensor_blob:narrow/4 of
%% it).
%%
%% As PyTorch's own receivers do: when event_sync_required, libtorch's current stream of the device
%% waits on the producer's event first; the caching allocator's block is mapped
%% (cudaIpcOpenMemHandle) and the tensor starts storage_offset_bytes into it. The producer counted
%% this receiver in the counter file when it shared (the counter is 1): opening takes no count,
%% checks that one is there (a share opens once), and holds the file mapped; when the last tensor
%% over the storage is freed, the work queued on it is waited for, the block unmapped and the
%% counter dropped by one (never below zero), so that the producer may free it. A build or machine
%% without CUDA raises a tensor_blob error saying which, after the fields are checked.
-spec cuda_torch_open(map(), tensor_blob:dtype(), tensor_blob:shape()) -> tensor_blob:tensor().
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

%% @doc T, a CUDA tensor, in PyTorch's CUDA sharing format: the eight fields that
%% torch.UntypedStorage._new_shared_cuda(device, handle, storage_size_bytes, storage_offset_bytes,
%% ref_counter_handle, ref_counter_offset, event_handle, event_sync_required) takes (what
%% torch.multiprocessing.reductions.rebuild_cuda_tensor calls), and tensor and counter, which this
%% process keeps.
%%
%% handle is the 64-byte cudaIpcMemHandle_t of T's allocation (every PyTorch reads that form) and
%% storage_offset_bytes T's offset in it; storage_size_bytes covers T's elements, row-major (a
%% contiguous copy on the device is shared when T is not contiguous: tensor). The work libtorch
%% queued on the memory is finished before this returns, so event_sync_required is false (PyTorch's
%% own fallback when it runs out of events) and event_handle zeros. The counter file is a region of
%% PyTorch's file_system format whose first counter is 1, the receiver's; the receiver drops it to 0
%% when it frees its storage. Keep tensor and counter reachable until cuda_torch_pending/1 says 0:
%% the memory returns to libtorch's allocator when tensor is freed here. The file is removed when
%% the last of counter and the receiver's mapping lets it go.
-spec cuda_torch_export(tensor_blob:tensor()) ->
          #{device := non_neg_integer(), handle := binary(), storage_size_bytes := non_neg_integer(),
            storage_offset_bytes := non_neg_integer(), ref_counter_handle := binary(), ref_counter_offset := 0,
            event_handle := binary(), event_sync_required := false, tensor := tensor_blob:tensor(),
            counter := tensor_blob:tensor()}.
cuda_torch_export(T) -> ?SPANS(cuda_torch_export, 1, cuda_torch_export_tensor(T)).

cuda_torch_export_tensor(T) when not is_reference(T) ->
    not_a_tensor(T);
cuda_torch_export_tensor(T) ->
    {Handle, Device, Size, Shared} = cuda_ipc_share(T, {?MODULE, cuda_torch_export, 1}),
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
    Counter = torch_zeros({Slots}, int64),
    _ = tensor_blob_tensor:write(Counter, <<1:64/native-signed, 0:((Slots - 1) * 64)>>),
    Counter.

%% @doc How many receivers of an export of cuda_torch_export/1 still hold it: 1 until the receiver
%% frees its storage, then 0.
-spec cuda_torch_pending(#{counter := tensor_blob:tensor(), ref_counter_offset := non_neg_integer()}) -> integer().
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
