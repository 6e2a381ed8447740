%% @private
%% The other OS process of the IPC tests: a fresh BEAM, started with
%%
%%   erl -noshell -pa <ebin> -eval 'tensor_blob_ipc_peer:main("<Args>")'
%%
%% where Args is term_to_binary(#{handle, dtype, shape, view, write}) in
%% base64 (with probe_shape, it first tries that shape and reports the
%% error). It opens the handle (a CPU region's or a CUDA IPC handle),
%% reports what it reads, drops the opened tensor but keeps a view of its
%% first View rows, writes Write through that view once the opened tensor
%% is collected, and reports what is left once the view is dropped too. The
%% report is printed as one line "RESULT:" followed by a term in base64; the
%% BEAM then halts.
-module(tensor_blob_ipc_peer).

-export([main/1, run/1]).

main(Encoded) ->
    Report = try run(binary_to_term(base64:decode(Encoded)))
             catch Class:Reason:Stack -> #{failed => {Class, Reason, Stack}}
             end,
    io:format("RESULT:~s~n", [base64:encode(term_to_binary(Report))]),
    halt(0).

run(#{handle := Handle, dtype := Dtype, shape := Shape, view := Rows, write := Write} = Args) ->
    Probe = case Args of
                #{probe_shape := Other} ->
                    try tensor_blob_ipc:open(Handle, Dtype, Other) of _ -> opened
                    catch error:{Kind, Message} -> {Kind, Message}
                    end;
                _ -> none
            end,
    Start = tensor_blob_test_util:settled_stats(),
    Parent = self(),
    {Holder, Ref} = spawn_monitor(fun() -> hold(Parent, Handle, Dtype, Shape, Rows) end),
    Opened = receive {Holder, opened, Info} -> Info;
                     {'DOWN', Ref, process, Holder, Why} -> exit({holder_died, Why})
             end,
    %% The opened tensor is garbage in the holder: collect it.
    WithView = tensor_blob_test_util:settled_stats(),
    MappingsWithView = mappings(),
    Holder ! {write, Write},
    Written = receive {Holder, written, Bytes} -> Bytes end,
    Holder ! stop,
    receive {'DOWN', Ref, process, Holder, _} -> ok end,
    End = tensor_blob_test_util:settled_stats(),
    Opened#{probe => Probe,
            view_after_drop => Written,
            tensors_with_view => maps:get(tensors, WithView) - maps:get(tensors, Start),
            mappings_with_view => MappingsWithView,
            tensors_left => maps:get(tensors, End) - maps:get(tensors, Start),
            mappings_left => mappings()}.

%% Opens, reports, and keeps only a view of the first Rows rows.
hold(Parent, Handle, Dtype, Shape, Rows) ->
    {View, Info} = open(Handle, Dtype, Shape, Rows),
    Parent ! {self(), opened, Info},
    Write = receive {write, Bytes} -> Bytes end,
    erlang:garbage_collect(),
    _ = tensor_blob:write(View, Write),
    Parent ! {self(), written, tensor_blob:to_binary(View)},
    receive stop -> ok end.

open(Handle, Dtype, Shape, Rows) ->
    T = tensor_blob_ipc:open(Handle, Dtype, Shape),
    Info = #{bytes => tensor_blob:to_binary(T),
             device => tensor_blob:device(T),
             memory => tensor_blob:memory(T),
             mappings_open => mappings()},
    {tensor_blob:narrow(T, 0, 0, Rows), Info}.

mappings() ->
    maps:get(ipc_mappings, tensor_blob:cuda_info()).
