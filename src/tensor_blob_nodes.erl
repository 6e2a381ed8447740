%% @private
%% Tensors between nodes: node_pack/3 and node_unpack/2, the keeper that
%% holds a packed region for its receiver, the pad that lands a binary
%% aligned, and what makes two nodes share shared memory (same_host/1).
%% tensor_blob's node_* functions, host_id/0, shm_identity/0 and same_host/1
%% are these. Other nodes reach this one through tensor_blob
%% (tensor_blob:node_learn_pad/2, tensor_blob:shm_identity/0), so that
%% nodes of other builds, where the code lives elsewhere, still answer.
-module(tensor_blob_nodes).

-include_lib("kernel/include/file.hrl").
-include("tensor_blob_internal.hrl").

-export([node_pack/3, node_unpack/2, node_learn_pad/2, host_id/0, shm_identity/0, same_host/1]).

-import(tensor_blob_error, [badarg/1, raise/2, not_a_tensor/1]).
-import(tensor_blob_options, [check_options/2]).
-import(tensor_blob, [device/1, dtype/1, shape/1, memory/1, from_binary/3, from_binary/4, to_blob/1,
                      to_device/2, ipc_torch_open/3]).
-import(tensor_blob_tensor, [binary_of/3, transferred/5]).

-spec node_pack(term(), term(), term()) -> map().
node_pack(T, _Node, _Opts) when not ?IS_TENSOR_TERM(T) ->
    not_a_tensor(T);
node_pack(T, Node, Opts) when is_atom(Node), is_map(Opts) ->
    check_options(Opts, [via, keep]),
    Keep = case maps:get(keep, Opts, tensor_blob_config:get(node_keep)) of
               K when is_integer(K), K >= 0, K =< 16#FFFFFFFF -> K;
               K -> badarg(["keep: expected milliseconds (an integer in 0..4294967295), got ", {term, K}])
           end,
    Via = case Opts of
              #{via := V} when V =:= region; V =:= binary -> V;
              #{via := V} -> badarg(["options: via must be region or binary, got ", {term, V}]);
              #{} -> default_via(T, Node)
          end,
    Start = tensor_blob_telemetry:start(transfer),
    Function = {tensor_blob, node_pack, 3},
    Base = #{'__tensor_blob_node__' => 1, dtype => dtype(T), shape => shape(T)},
    {Packed, Copied} =
        case Via of
            region ->
                case {same_host(Node), device(T)} of
                    {false, _} ->
                        badarg(["options: via region needs a node that can open this node's shared memory (the "
                                "same host, /dev/shm and user); ", {term, Node}, " cannot"]);
                    {true, cpu} -> ok;
                    {true, Device} -> badarg(["tensor: via region shares CPU memory; this tensor is on ", {term, Device}])
                end,
                #{handle := Name, tensor := Shared} = tensor_blob_ipc:region_export(T, torch, Function),
                {Base#{via => region, handle => Name, tensor => Shared, keeper => node_keeper(Shared, Keep),
                       keep => Keep},
                 Shared =/= T};
            binary ->
                %% A view when T is a contiguous CPU tensor, else a copy.
                %% The pad goes before the bytes in the message (a tuple
                %% keeps its order): see node_learn_pad/2.
                {Binary, C} = binary_of(T, false, Function),
                Pad = persistent_term:get({tensor_blob, node_pad, Node}, 0),
                {Base#{via => binary, binary => {binary:copy(<<0>>, Pad), Binary}, from => node()}, C}
        end,
    _ = Start =:= undefined orelse transferred(Start, Function, T, Copied, #{node => Node, via => Via}) =:= ok,
    Packed;
node_pack(_T, Node, Opts) when is_atom(Node) ->
    badarg(["options: expected a map, got ", {term, Opts}]);
node_pack(_T, Node, _Opts) ->
    badarg(["node: expected a node name (an atom), got ", {term, Node} | node_name_hint(Node)]).

%% A node named by a string: the atom to give instead.
node_name_hint(Name) ->
    Chars = if is_binary(Name) -> unicode:characters_to_list(Name); true -> Name end,
    case is_list(Chars) andalso Chars =/= [] andalso io_lib:printable_unicode_list(Chars)
        andalso length(Chars) =< 255 andalso [C || C <- Chars, lists:member(C, "'\"\\")] =:= [] of
        true -> [": name it as an atom, ", {code, [$', Chars, $'], [$:, $", Chars, $"]}];
        false -> []
    end.

default_via(T, Node) ->
    case device(T) =:= cpu andalso same_host(Node) of
        true -> region;
        false -> binary
    end.

%% A process that holds Shared until a node_unpack/1 of its packed term
%% says it has its own reference, or Keep milliseconds pass: the region
%% outlives the process that packed it, for a bounded time.
node_keeper(Shared, Keep) ->
    spawn(fun() ->
                  put(tensor_blob_kept, Shared),
                  receive
                      {tensor_blob_unpacked, _} -> ok
                  after Keep -> ok
                  end
          end).

-spec node_unpack(term(), term()) -> tensor_blob:tensor().
node_unpack(#{'__tensor_blob_node__' := 1} = Packed, Opts) when is_map(Opts) ->
    check_options(Opts, [copy]),
    Copy = case maps:get(copy, Opts, false) of
               C when is_boolean(C) -> C;
               C -> badarg(["copy: expected a boolean, got ", {term, C}])
           end,
    Start = tensor_blob_telemetry:start(transfer),
    T = node_unpack_checked(Packed, Copy),
    _ = Start =:= undefined orelse
        transferred(Start, {tensor_blob, node_unpack, 2}, T, memory(T) =:= owned,
                    #{node => node(), via => maps:get(via, Packed, undefined)}) =:= ok,
    T;
node_unpack(#{'__tensor_blob_node__' := 1}, Opts) ->
    badarg(["options: expected a map, got ", {term, Opts}]);
node_unpack(Other, _Opts) ->
    node_unpack_checked(Other, false).

node_unpack_checked(#{via := region, handle := Name, dtype := Dtype, shape := Shape} = Packed, Copy) ->
    Mapped = node_open(Packed, Name, Dtype, Shape),
    _ = case Packed of
            #{keeper := Keeper} when is_pid(Keeper) -> Keeper ! {tensor_blob_unpacked, node()};
            #{} -> ok
        end,
    case Copy of
        true -> to_device(Mapped, cpu);
        false -> Mapped
    end;
node_unpack_checked(#{via := binary, binary := {Pad, Bin}} = Packed, Copy) when is_binary(Pad), is_binary(Bin) ->
    node_unpack_binary(Packed, byte_size(Pad), Bin, Copy);
node_unpack_checked(#{via := binary, binary := Bin} = Packed, Copy) when is_binary(Bin) ->
    %% From a node that sends no pad.
    node_unpack_binary(Packed, 0, Bin, Copy);
node_unpack_checked(Other, _Copy) ->
    node_unpack_bad(Other).

node_unpack_binary(#{dtype := Dtype, shape := Shape}, _PadBytes, Bin, true) ->
    from_binary(Bin, Dtype, Shape);
node_unpack_binary(#{dtype := Dtype, shape := Shape} = Packed, PadBytes, Bin, false) ->
    T = from_binary(Bin, Dtype, Shape, #{copy => if_needed}),
    ok = case memory(T) of
             owned -> node_misaligned(Packed, PadBytes, Bin);
             _ -> ok
         end,
    T;
node_unpack_binary(Other, _PadBytes, _Bin, _Copy) ->
    node_unpack_bad(Other).

-spec node_unpack_bad(term()) -> no_return().
node_unpack_bad(Other) ->
    badarg(["packed: expected what ", {code, "tensor_blob:node_pack/2", "TensorBlob.Nodes.pack/2"}, " made, got ",
            {term, Other}]).

%% The region's mapping; a region that is gone says why it may be.
node_open(Packed, Name, Dtype, Shape) ->
    try
        ipc_torch_open(Name, Dtype, Shape)
    catch
        error:{Kind, Message}:Stack when is_binary(Message) ->
            case binary:match(Message, <<"no shared memory named">>) of
                nomatch ->
                    erlang:raise(error, {Kind, Message}, Stack);
                _ ->
                    Keep = maps:get(keep, Packed, 0),
                    raise(Kind,
                          ["packed: its region ", {term, Name}, " is gone: every tensor over it on the sending node ",
                           "was freed before this node unpacked it (the packed term holds the sender's tensor ",
                           "only while the term lives on the sending node, and its keeper only until ",
                           integer_to_list(Keep), " ms after ",
                           {code, "tensor_blob:node_pack/3", "TensorBlob.Nodes.pack/3"},
                           " or the first unpack). Unpack it sooner, pack it with a longer keep, or keep the ",
                           "tensor on the sending node until it is unpacked"])
            end
    end.

%% Where the distribution puts a binary's bytes in the buffer a message
%% arrives in depends on what the message holds before them (its header,
%% the control message, the terms ahead), which stays the same from one
%% message to the next on one path (erpc, a send), but is not known to the
%% sender. So node_pack/3 puts a pad before the bytes, and a receiver that
%% had to copy them tells the sender the pad that would have landed them on
%% a multiple of ?NODE_ALIGN: from the next message on that path, the
%% receiver's tensor views them. Only for bytes that make up most of the
%% message (the distribution copies a small binary into its own buffer).
-define(NODE_ALIGN, 64).
-define(NODE_LEARN_BYTES, 1048576).

node_misaligned(#{from := From}, PadBytes, Bin) when is_atom(From), From =/= node(),
                                                      byte_size(Bin) >= ?NODE_LEARN_BYTES ->
    #{ptr := Ptr} = to_blob(from_binary(Bin, uint8, {byte_size(Bin)}, #{copy => false})),
    Pad = (PadBytes + ?NODE_ALIGN - Ptr rem ?NODE_ALIGN) rem ?NODE_ALIGN,
    erpc:cast(From, tensor_blob, node_learn_pad, [node(), Pad]);
node_misaligned(_, _, _) ->
    ok.

%% On the sender: the pad that lands the bytes of node_pack/3's
%% binary aligned on Node. Written only when it changes.
-spec node_learn_pad(node(), 0..63) -> ok.
node_learn_pad(Node, Pad) when is_atom(Node), is_integer(Pad), Pad >= 0, Pad < ?NODE_ALIGN ->
    Key = {tensor_blob, node_pad, Node},
    case persistent_term:get(Key, 0) of
        Pad -> ok;
        _ -> persistent_term:put(Key, Pad)
    end.

%% This host's boot id and the identity of its /dev/shm.
-spec host_id() -> {binary(), integer(), integer()}.
host_id() ->
    Boot = case file:read_file("/proc/sys/kernel/random/boot_id") of
               {ok, B} -> string:trim(B);
               {error, _} -> <<>>
           end,
    case file:read_file_info("/dev/shm", [raw]) of
        {ok, #file_info{major_device = Dev, inode = Ino}} -> {Boot, Dev, Ino};
        {error, _} -> {Boot, 0, 0}
    end.

%% What another node compares with its own: host_id/0 and this VM's
%% effective user (a region is its creator's, mode 0600).
-spec shm_identity() -> {{binary(), integer(), integer()}, integer()}.
shm_identity() ->
    {host_id(), effective_uid()}.

effective_uid() ->
    %% "Uid:\treal\teffective\tsaved\tfs" in /proc/self/status.
    case file:read_file("/proc/self/status") of
        {ok, Status} ->
            case re:run(Status, "^Uid:\\s+\\d+\\s+(\\d+)", [multiline, {capture, all_but_first, binary}]) of
                {match, [Uid]} -> binary_to_integer(Uid);
                nomatch -> -1
            end;
        {error, _} -> -1
    end.

%% The same host, /dev/shm and effective user; false for a node that
%% cannot be reached, or when no boot id can be read here.
-spec same_host(node()) -> boolean().
same_host(Node) when Node =:= node() ->
    true;
same_host(Node) when is_atom(Node) ->
    case shm_identity() of
        {{<<>>, _, _}, _} -> false;
        {_, -1} -> false;
        Local -> try erpc:call(Node, tensor_blob, shm_identity, [], 5000) =:= Local catch _:_ -> false end
    end;
same_host(Node) ->
    badarg(["node: expected a node name (an atom), got ", {term, Node} | node_name_hint(Node)]).
