%% @private
%% Tensors between nodes: node_pack/3 and node_unpack/2, the keeper that
%% holds a packed region for its receiver, the file a mapped file's tensor
%% travels as, the pad that lands a binary aligned, and what makes two nodes share shared memory (same_host/1).
%% tensor_blob's node_* functions, host_id/0, shm_identity/0 and same_host/1
%% are these; this module calls the modules that implement what it needs,
%% never tensor_blob, except on other nodes: they reach this one, and it
%% reaches them, through tensor_blob (tensor_blob:node_learn_pad/2,
%% tensor_blob:shm_identity/0), so that nodes of other builds, where the
%% code lives elsewhere, still answer.
-module(tensor_blob_nodes).

-include_lib("kernel/include/file.hrl").
-include("tensor_blob_internal.hrl").

-export([node_pack/3, node_unpack/2, node_learn_pad/2, host_id/0, shm_identity/0, same_host/1]).
%% The watcher of other nodes' same_host/1 answers (its loop, for code upgrades), and for the tests
%% what it remembers.
-export([host_watch_loop/0, host_answers/0]).
%% For the tests: where the default path turns to a region.
-export([default_thresholds/0]).

-import(tensor_blob_error, [badarg/3, raise/4, not_a_tensor/1]).
-import(tensor_blob_options, [check/3]).
-import(tensor_blob_tensor, [binary_of/4, copy_to_binary/3, transferred/5, from_binary/3, from_binary/4,
                             to_device/2]).

%% The packed term's format: node_unpack/2 refuses the ones it does not know.
-define(NODE_FORMAT, 1).
-define(NODE_FORMATS, [1]).
%% Where the default path turns from a binary to a region (default_via/4),
%% measured with bench/nodes.exs.
-define(NODE_REGION_BYTES, 32768).
-define(NODE_COPY_BYTES, 67108864).
%% From where a file's tensor travels as its file by default: below it, the
%% bytes cost less than the receiver's open and mapping of the file.
-define(NODE_FILE_BYTES, 131072).

-spec node_pack(term(), term(), term()) -> map().
node_pack(T, _Node, _Opts) when not ?IS_TENSOR_TERM(T) ->
    not_a_tensor(T);
node_pack(T, Node, Opts0) when is_atom(Node) ->
    Opts = check(Opts0, [{via, {one_of, [region, binary, file]}}, {keep, {integer, 0, 16#FFFFFFFF}}], map),
    Keep = case Opts of
               %% The setting is read only when the call gives no keep: an option
               %% wins, even over a setting that would be refused.
               #{keep := K} -> K;
               #{} -> tensor_blob_config:get(node_keep)
           end,
    Start = tensor_blob_telemetry:start(transfer),
    Function = {tensor_blob, node_pack, 3},
    %% What the choice and the packed term need, in one crossing.
    {_, Shape, _, Dtype, Device, ElementSize, _, _} = ?NIF(tensor_blob_nif:blob_fields(T)),
    Bytes = lists:foldl(fun(D, N) -> D * N end, ElementSize, tuple_to_list(Shape)),
    Base = #{'__tensor_blob_node__' => ?NODE_FORMAT, dtype => Dtype, shape => Shape},
    {Via, Region} = case Opts of
                        #{via := region} -> {region, region_checked(T, Node, Device)};
                        #{via := file} -> {file, file_checked(T, Node, Device)};
                        #{via := binary} -> {binary, nil};
                        #{} -> default_via(T, Node, Device, Bytes)
                    end,
    {Packed, Copied} =
        case Via of
            file ->
                %% The file outlives the sender: no keeper.
                {Path, Identity, Offset, Strides} = Region,
                {Base#{via => file, path => Path, identity => Identity, offset => Offset, strides => Strides}, false};
            region ->
                #{handle := Name, tensor := Shared} =
                    tensor_blob_share:region_export(T, torch, Region, {Shape, Dtype}, Function),
                {Base#{via => region, handle => Name, tensor => Shared, keeper => node_keeper(Shared, Keep),
                       keep => Keep},
                 Shared =/= T};
            binary ->
                %% Below the size where the default turns to a region a
                %% copy costs next to nothing, and leaves T as it was (a
                %% view would freeze it: write/2 refuses memory a binary
                %% shows); above it, a view when T is a contiguous CPU
                %% tensor, else a copy. The pad goes before the bytes in
                %% the message (a tuple keeps its order): see
                %% node_learn_pad/2.
                {Binary, C} = case Bytes < ?NODE_REGION_BYTES of
                                  true -> {copy_to_binary(T, Function, small), true};
                                  false -> binary_of(T, false, node_pack, Function)
                              end,
                Pad = persistent_term:get({tensor_blob, node_pad, Node}, 0),
                {Base#{via => binary, binary => {binary:copy(<<0>>, Pad), Binary}, from => node()}, C}
        end,
    _ = Start =:= undefined orelse transferred(Start, Function, T, Copied, #{node => Node, via => Via}) =:= ok,
    Packed;
node_pack(_T, Node, _Opts) ->
    badarg(bad_value, node, ["node: expected a node name (an atom), got ", {term, Node} | node_name_hint(Node)]).

%% A node named by a string: the atom to give instead.
node_name_hint(Name) ->
    Chars = if is_binary(Name) -> unicode:characters_to_list(Name); true -> Name end,
    case is_list(Chars) andalso Chars =/= [] andalso io_lib:printable_unicode_list(Chars)
        andalso length(Chars) =< 255 andalso [C || C <- Chars, lists:member(C, "'\"\\")] =:= [] of
        true -> [": name it as an atom, ", {code, [$', Chars, $'], [$:, $", Chars, $"]}];
        false -> []
    end.

-spec default_thresholds() -> #{region := pos_integer(), copy := pos_integer(), file := pos_integer()}.
default_thresholds() ->
    #{region => ?NODE_REGION_BYTES, copy => ?NODE_COPY_BYTES, file => ?NODE_FILE_BYTES}.

%% via region, asked for: T's region name ({Name, Size}) when it is a whole
%% PyTorch-format region already, else nil (a copy into one is made).
region_checked(T, Node, Device) ->
    case {same_host(Node), Device} of
        {false, _} ->
            badarg(unsupported, options,
                   ["options: via region needs a node that can open this node's shared memory (the "
                    "same host, /dev/shm and user); ", {term, Node}, " cannot"]);
        {true, cpu} -> ?NIF(tensor_blob_nif:torch_shm_name(T));
        {true, _} ->
            badarg(wrong_device, tensor, ["tensor: via region shares CPU memory; this tensor is on ", {term, Device}])
    end.

%% via file, asked for: where the receiver maps T's bytes from (the file's
%% name and version, the offset and strides in it).
file_checked(T, Node, Device) ->
    case {same_host(Node), Device} of
        {false, _} ->
            badarg(unsupported, options,
                   ["options: via file needs a node on this host (the same host, /dev/shm and user); ", {term, Node},
                    " is not"]);
        {true, cpu} ->
            case ?NIF(tensor_blob_nif:file_source(T)) of
                {_, _, _, _} = Source ->
                    Source;
                not_file ->
                    badarg(bad_value, tensor,
                           ["tensor: via file sends a tensor of a file opened by ",
                            {code, "tensor_blob_safetensors:open/2", "TensorBlob.SafeTensors.open/2"},
                            " (or a view of one), as the file; this tensor's memory is ", {term, memory(T)}]);
                written ->
                    badarg(unsafe, tensor,
                           ["tensor: via file would send the file's bytes, but this tensor's were written on this "
                            "node (its pages are a private copy the file lacks); send it ",
                            {code, "#{via => binary}", "via: :binary"}, " or ",
                            {code, "#{via => region}", "via: :region"}]);
                changed ->
                    raise(badarg, gone, tensor,
                          ["tensor: its file was replaced or changed since it was opened (its name holds another "
                           "file now): the receiver would map other bytes; send it ",
                           {code, "#{via => binary}", "via: :binary"}])
            end;
        {true, _} ->
            badarg(wrong_device, tensor, ["tensor: via file shares CPU memory; this tensor is on ", {term, Device}])
    end.

%% The path that costs less, end to end (pack, the message, unpack there),
%% as bench/nodes.exs measures it: a binary for a small tensor, whatever
%% its memory (a region's name, its keeper and the receiver's mapping cost
%% more than the bytes); a region for a CPU tensor that already is one (no
%% copy at all) from ?NODE_REGION_BYTES, or for any other CPU tensor from
%% ?NODE_COPY_BYTES (where one copy into a new region costs less than the
%% distribution's copies of the bytes). Only to a node that can open this
%% node's shared memory. {Via, T's region name or nil}.
default_via(_T, _Node, Device, Bytes) when Device =/= cpu; Bytes < ?NODE_REGION_BYTES ->
    {binary, nil};
default_via(T, Node, cpu, Bytes) ->
    case Bytes >= ?NODE_FILE_BYTES andalso memory(T) =:= file andalso same_host(Node)
        andalso ?NIF(tensor_blob_nif:file_source(T)) of
        {_, _, _, _} = Source -> {file, Source};
        _ -> default_region(T, Node, Bytes)
    end.

%% A file's tensor that cannot travel as its file goes as any other tensor.
default_region(T, Node, Bytes) ->
    case ?NIF(tensor_blob_nif:torch_shm_name(T)) of
        nil when Bytes < ?NODE_COPY_BYTES -> {binary, nil};
        Region ->
            case same_host(Node) of
                true -> {region, Region};
                false -> {binary, nil}
            end
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
node_unpack(#{'__tensor_blob_node__' := ?NODE_FORMAT} = Packed, Opts) ->
    #{copy := Copy} = check(Opts, [{copy, boolean, false}], map),
    Start = tensor_blob_telemetry:start(transfer),
    T = node_unpack_checked(Packed, Copy),
    _ = Start =:= undefined orelse
        transferred(Start, {tensor_blob, node_unpack, 2}, T, memory(T) =:= owned,
                    #{node => node(), via => maps:get(via, Packed, undefined)}) =:= ok,
    T;
node_unpack(#{'__tensor_blob_node__' := Format}, _Opts) ->
    badarg(unsupported, packed,
           ["packed: its format is version ", {term, Format}, ", which this build of tensor_blob does not know "
            "(it unpacks version ", lists:join(", ", [integer_to_list(F) || F <- ?NODE_FORMATS]), "): the node "
            "that packed it runs another version of tensor_blob. Run one version on both nodes"]);
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
node_unpack_checked(#{via := file, path := Path, identity := Identity, offset := Offset, dtype := Dtype,
                      shape := Shape, strides := Strides}, Copy) when is_binary(Path) ->
    Mapped = ?NIF(tensor_blob_nif:file_view(Path, Identity, Offset, Dtype, Shape, Strides)),
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
    badarg(bad_value, packed,
           ["packed: expected what ", {code, "tensor_blob:node_pack/2", "TensorBlob.Nodes.pack/2"}, " made, got ",
            {term, Other}]).

%% What T's memory is (tensor_blob:memory/1).
memory(T) when is_reference(T) -> ?NIF(tensor_blob_nif:memory(T));
memory(T) -> not_a_tensor(T).

%% The region's mapping; a region that is gone says why it may be.
node_open(Packed, Name, Dtype, Shape) ->
    try
        ?DTYPE_CHECKED(Dtype, tensor_blob_nif:torch_shm_open(Name, Dtype, Shape))
    catch
        error:{Kind, Message}:Stack when is_binary(Message) ->
            case tensor_blob_error:error_reason(Stack) of
                #{reason := no_region} ->
                    Keep = maps:get(keep, Packed, 0),
                    raise(Kind, no_region, packed,
                          ["packed: its region ", {term, Name}, " is gone: every tensor over it on the sending node ",
                           "was freed before this node unpacked it (the packed term holds the sender's tensor ",
                           "only while the term lives on the sending node, and its keeper only until ",
                           integer_to_list(Keep), " ms after ",
                           {code, "tensor_blob:node_pack/3", "TensorBlob.Nodes.pack/3"},
                           " or the first unpack). Unpack it sooner, pack it with a longer keep, or keep the ",
                           "tensor on the sending node until it is unpacked"]);
                _ ->
                    erlang:raise(error, {Kind, Message}, Stack)
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
    {Ptr, _, _, _, _, _, _, _} = ?NIF(tensor_blob_nif:blob_fields(from_binary(Bin, uint8, {byte_size(Bin)},
                                                                              #{copy => false}))),
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
    end;
node_learn_pad(Node, _) when not is_atom(Node) ->
    badarg(bad_value, node, ["node: expected a node name (an atom), got ", {term, Node}]);
node_learn_pad(_, Pad) ->
    badarg(bad_value, pad, ["pad: expected an integer in 0..", integer_to_list(?NODE_ALIGN - 1), ", got ", {term, Pad}]).

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
%% cannot be reached, or when no boot id can be read here. Another node's
%% answer is remembered while the connection it came over lasts.
-spec same_host(node()) -> boolean().
same_host(Node) when Node =:= node() ->
    true;
same_host(Node) when is_atom(Node) ->
    case remembered(Node) of
        [{_, Same}] ->
            Same;
        [] ->
            Downs = host_watch(),
            case shm_identity() of
                {{<<>>, _, _}, _} -> false;
                {_, -1} -> false;
                Local ->
                    try erpc:call(Node, tensor_blob, shm_identity, [], 5000) of
                        Remote -> remember(Node, Downs, Remote =:= Local)
                    catch
                        _:_ -> false
                    end
            end
    end;
same_host(Node) ->
    badarg(bad_value, node, ["node: expected a node name (an atom), got ", {term, Node} | node_name_hint(Node)]).

%% Other nodes' same_host/1 answers, in an ETS table owned by a process of
%% their own (tensor_blob has no application to supervise one: it starts
%% at the first question and lives as long as the VM, its group leader
%% init's, so that no application's stop takes it). It watches the nodes
%% (net_kernel:monitor_nodes/2, hidden ones too) and forgets a node's
%% answer when its connection goes down: the next question asks the node
%% that answers to the name then. An answer is only kept when it came back
%% over a connection (an unreachable node gets no nodedown to forget it
%% by), and only when no connection went down between the question and
%% the answer (the row under ?DOWNS counts them): an answer from a
%% connection whose nodedown came first is never written after it. Node
%% names are atoms, and the count's key is a tuple: no node's name, and no
%% nodedown, reaches it.
-define(HOST_TABLE, tensor_blob_same_host).
-define(DOWNS, {tensor_blob, downs}).

remembered(Node) ->
    try ets:lookup(?HOST_TABLE, Node) catch error:badarg -> [] end.

%% How many connections went down so far; the watcher started if need be.
host_watch() ->
    try ets:lookup_element(?HOST_TABLE, ?DOWNS, 2)
    catch
        error:badarg ->
            Caller = self(),
            {Pid, Ref} = spawn_monitor(fun() -> host_watcher(Caller) end),
            receive
                {Pid, watching} -> erlang:demonitor(Ref, [flush]);
                {'DOWN', Ref, process, Pid, _} -> ok
            end,
            try ets:lookup_element(?HOST_TABLE, ?DOWNS, 2) catch error:badarg -> undefined end
    end.

remember(_Node, undefined, Same) ->
    Same;
remember(Node, Downs, Same) ->
    case whereis(?HOST_TABLE) of
        undefined ->
            Same;
        Watcher ->
            Ref = erlang:monitor(process, Watcher),
            Watcher ! {remember, self(), Ref, Node, Downs, Same},
            receive
                {Ref, _} -> erlang:demonitor(Ref, [flush]);
                {'DOWN', Ref, process, _, _} -> ok
            end,
            Same
    end.

host_watcher(Caller) ->
    %% The named table is the lock: one watcher; another exits at once.
    try ets:new(?HOST_TABLE, [named_table, protected, {read_concurrency, true}]) of
        ?HOST_TABLE ->
            true = register(?HOST_TABLE, self()),
            true = group_leader(whereis(init), self()),
            ok = net_kernel:monitor_nodes(true, [{node_type, all}]),
            true = ets:insert(?HOST_TABLE, {?DOWNS, 0}),
            Caller ! {self(), watching},
            ?MODULE:host_watch_loop()
    catch
        error:badarg -> ok
    end.

-spec host_watch_loop() -> no_return().
host_watch_loop() ->
    receive
        {nodedown, Node, _Info} ->
            %% The count first: an answer asked before this is not kept.
            _ = ets:update_counter(?HOST_TABLE, ?DOWNS, 1),
            true = ets:delete(?HOST_TABLE, Node);
        {remember, From, Ref, Node, Downs, Same} ->
            _ = is_atom(Node) andalso ets:lookup_element(?HOST_TABLE, ?DOWNS, 2) =:= Downs andalso
                ets:insert(?HOST_TABLE, {Node, Same}),
            From ! {Ref, ok};
        _ ->
            ok
    end,
    ?MODULE:host_watch_loop().

%% For the tests: the answers remembered now.
-spec host_answers() -> [{node(), boolean()}].
host_answers() ->
    try [E || {N, _} = E <- ets:tab2list(?HOST_TABLE), is_atom(N)] catch error:badarg -> [] end.
