%% EUnit tests of what an error carries as data: its reason (a row of the
%% reason table, tensor_blob:tables/0's reasons, c_src/beam/tb_raise.h) and
%% the argument it is about, beside its message. A caller decides on those,
%% never on the message's text.
-module(tensor_blob_errors_tests).

-include_lib("eunit/include/eunit.hrl").

reasons() -> maps:get(reasons, tensor_blob:tables()).

%% One representative error of each reason: {Reason, Kind, Argument, Fun}.
%% Where the machine decides (CUDA or not), Kind and Argument are lists of
%% what each machine gives.
cases() ->
    [{not_a_tensor, badarg, tensor, fun() -> tensor_blob:shape(make_ref()) end},
     {not_a_tensor, badarg, tensor, fun() -> tensor_blob:shape(not_a_tensor) end},
     {bad_value, badarg, ptr, fun() -> tensor_blob:from_blob(#{ptr => -1, shape => {1}, dtype => float32, owner => none}) end},
     {bad_value, badarg, copy, fun() -> tensor_blob:to_binary(tensor_blob:zeros({1}, float32), #{copy => 'maybe'}) end},
     {missing, badarg, shape, fun() -> tensor_blob:from_blob(#{ptr => 64, dtype => float32, owner => none}) end},
     {bad_option, badarg, nope, fun() -> tensor_blob:to_binary(tensor_blob:zeros({1}, float32), #{nope => 1}) end},
     {bad_dtype, badarg, dtype, fun() -> tensor_blob:zeros({1}, nope) end},
     {bad_shape, badarg, shape, fun() -> tensor_blob:zeros({-1}, float32) end},
     {bad_strides, badarg, strides,
      fun() -> tensor_blob:from_blob(#{ptr => 64, shape => {2, 3}, strides => [1], dtype => float32, owner => none}) end},
     {not_contiguous, badarg, tensor,
      fun() -> tensor_blob:to_binary(tensor_blob:transpose(tensor_blob:zeros({2, 3}, float32), 0, 1), #{copy => false}) end},
     {out_of_extent, badarg, binary, fun() -> tensor_blob:from_binary(<<1, 2>>, float32, {4}) end},
     {misaligned, badarg, ptr, fun() -> tensor_blob:from_blob(#{ptr => 65, shape => {1}, dtype => float32, owner => none}) end},
     {wrong_device, badarg, tensor, fun() -> tensor_blob_ipc:cuda_torch_export(tensor_blob:zeros({1}, float32)) end},
     %% No CUDA device at all is not the caller's fault; a device index
     %% past those there is.
     {no_device, [tensor_blob, badarg], [none, device], fun() -> tensor_blob:cuda_synchronize(1000) end},
     {no_region, badarg, handle, fun() -> tensor_blob_ipc:torch_open(region_name(), float32, {1}) end},
     {gone, badarg, capsule,
      fun() ->
              C = tensor_blob:to_dlpack(tensor_blob:zeros({1}, float32)),
              _ = tensor_blob:from_dlpack(C),
              tensor_blob:from_dlpack(C)
      end},
     {read_only, badarg, tensor,
      fun() ->
              T = tensor_blob:from_binary(binary:copy(<<0>>, 1024), float32, {256}, #{copy => false}),
              tensor_blob:write(T, binary:copy(<<1>>, 1024))
      end},
     {bad_file, badarg, path, fun() -> tensor_blob_safetensors:open("/") end},
     {unsafe, badarg, tensor, fun() -> tensor_blob:to_binary(tensor_blob_ipc:zeros({4}, float32), #{copy => false}) end},
     {unsupported, badarg, read_only,
      fun() -> tensor_blob:to_dlpack(tensor_blob:zeros({1}, float32), #{version => legacy, read_only => true}) end},
     %% 1 PiB does not fit in shared memory.
     {no_memory, tensor_blob, shape, fun() -> tensor_blob_ipc:zeros({1 bsl 48}, float32) end},
     %% 4 PiB cannot be allocated: said as such, not in libtorch's words.
     {no_memory, tensor_blob, shape, fun() -> tensor_blob:zeros({1 bsl 40, 1 bsl 10}, float32) end}].

%% The reasons no test here can make happen on demand, and why.
not_made_here() ->
    [{runtime, "a CUDA runtime call that fails"},
     {libtorch, "a libtorch call that fails on arguments checked before it (a failed allocation is no_memory)"},
     {system, "an operating-system call that fails (shm_open, mmap) for want of a right or a resource"}].

region_name() ->
    iolist_to_binary(io_lib:format("/torch_tensor_blob_errors_test.~s.gone", [os:getpid()])).

%% {Kind, Message, ErrorReason}: what Fun raises, and what
%% tensor_blob:error_reason/1 reads from its stacktrace.
raised(Fun) ->
    try Fun() of
        Result -> erlang:error({expected_an_error, Result})
    catch
        error:{Kind, Message}:Stack -> {Kind, Message, tensor_blob:error_reason(Stack)}
    end.

one_of(Expected, Got) when is_list(Expected) -> ?assert(lists:member(Got, Expected));
one_of(Expected, Got) -> ?assertEqual(Expected, Got).

%% Every case raises its reason and argument as data, beside a rendered
%% message that names the argument first, as it always did.
reason_and_argument_test_() ->
    [{atom_to_list(Reason) ++ " " ++ integer_to_list(N),
      fun() ->
              {Kind, Message, Data} = raised(Fun),
              ?assert(is_binary(Message)),
              one_of(ExpectedKind, Kind),
              ?assertMatch(#{reason := Reason}, Data),
              #{argument := Argument} = Data,
              one_of(ExpectedArgument, Argument),
              case Argument of
                  none -> ok;
                  _ -> ?assertMatch({0, _}, binary:match(Message, <<(atom_to_binary(Argument))/binary, ":">>))
              end
      end}
     || {N, {Reason, ExpectedKind, ExpectedArgument, Fun}} <- lists:enumerate(cases())].

%% The table is a list of distinct atoms, and each of its reasons is made
%% here or said to be out of a test's reach: a reason added to the table
%% without a case fails here.
every_reason_has_a_case_test() ->
    Reasons = reasons(),
    ?assert(lists:all(fun is_atom/1, Reasons)),
    ?assertEqual(length(Reasons), length(lists:usort(Reasons))),
    Made = lists:usort([R || {R, _, _, _} <- cases()]),
    NotMade = [R || {R, _} <- not_made_here()],
    ?assertEqual([], Made -- Reasons),
    ?assertEqual([], NotMade -- Reasons),
    ?assertEqual([], Reasons -- (Made ++ NotMade)).

%% An error that is not the library's has no reason, though it may carry
%% error_info of its own.
foreign_error_has_no_reason_test() ->
    try ets:lookup(tensor_blob_errors_no_such_table, key) of
        Result -> erlang:error({expected_an_error, Result})
    catch
        error:badarg:Stack -> ?assertEqual(none, tensor_blob:error_reason(Stack))
    end.

%% What error_reason/1 cannot read (a frame whose information is an
%% improper or malformed list, a stacktrace that is no list) is none, as
%% for an error of anyone else; a readable frame after such junk still
%% answers.
unreadable_stacktrace_has_no_reason_test() ->
    Cause = #{module => tensor_blob, cause => #{reason => bad_value, argument => shape}},
    [?assertEqual(none, tensor_blob:error_reason(Stack))
     || Stack <- [[{m, f, 1, [file | "x.erl"]}], [{m, f, 1, [{line, 3} | bad]}], [{m, f, 1, not_a_list}],
                  [{m, f, 1, [{error_info} | {error_info, Cause}]}], [bad | tail], {m, f, 1, []}, []]],
    ?assertEqual(#{reason => bad_value, argument => shape},
                 tensor_blob:error_reason([{m, f, 1, [{line, 3}, junk, {error_info, Cause} | tail]}])).

%% The two decisions the facade makes on an error: a reference of another
%% node where a tensor was expected (not_a_tensor), and a region gone
%% before it was unpacked (no_region). Each keeps its reason and argument.
other_node_reference_test() ->
    Ref = other_node_ref('peer1@elsewhere'),
    ?assertEqual('peer1@elsewhere', node(Ref)),
    {badarg, Message, Data} = raised(fun() -> tensor_blob:narrow(Ref, 0, 0, 1) end),
    ?assertEqual(#{reason => not_a_tensor, argument => tensor}, Data),
    ?assertMatch({0, _}, binary:match(Message, <<"tensor: ">>)),
    ?assertMatch({_, _}, binary:match(Message, <<"is a reference made on node peer1@elsewhere">>)),
    %% A reference of this node is no tensor either, and says only that.
    {badarg, Local, LocalData} = raised(fun() -> tensor_blob:shape(make_ref()) end),
    ?assertEqual(#{reason => not_a_tensor, argument => tensor}, LocalData),
    ?assertEqual(nomatch, binary:match(Local, <<"made on node">>)).

%% A reference of Node, spelled in the external term format (what a tensor
%% sent to another node as it is becomes there), with no distribution
%% needed.
other_node_ref(Node) ->
    Name = atom_to_binary(Node),
    binary_to_term(<<131, 90, 3:16, 119, (byte_size(Name)), Name/binary, 1:32, 1:32, 2:32, 3:32>>).

gone_region_test() ->
    Packed = #{'__tensor_blob_node__' => 1, via => region, handle => region_name(), dtype => float32,
               shape => {1}, keep => 0},
    {Kind, Message, Data} = raised(fun() -> tensor_blob:node_unpack(Packed) end),
    ?assertEqual(badarg, Kind),
    ?assertEqual(#{reason => no_region, argument => packed}, Data),
    ?assertMatch({0, _}, binary:match(Message, <<"packed: its region ">>)),
    ?assertMatch({_, _}, binary:match(Message, <<"is gone">>)).

%% A spec a JSON decoder made has binary keys: from_blob refuses it as such
%% (its keys must be atoms, naming the ones it found), whether the owner
%% is among its keys, given as an option, or none; never for a field it
%% seems to lack, though "owner" and "ptr" are there.
string_keyed_spec_test_() ->
    T = tensor_blob:from_binary(<<1, 2, 3, 4>>, uint8, {4}),
    #{ptr := Ptr} = tensor_blob:to_blob(T),
    Spec = #{<<"ptr">> => Ptr, <<"shape">> => [4], <<"dtype">> => <<"uint8">>},
    Calls = [{"owner in the spec", fun() -> tensor_blob:from_blob(Spec#{<<"owner">> => T}) end,
              [<<"ptr">>, <<"shape">>, <<"dtype">>, <<"owner">>]},
             {"owner as an option", fun() -> tensor_blob_door:blob_view(Spec, #{owner => T}) end,
              [<<"ptr">>, <<"shape">>, <<"dtype">>]},
             {"unpinned", fun() -> tensor_blob_door:blob_view(Spec, #{owner => none}) end,
              [<<"ptr">>, <<"shape">>, <<"dtype">>]},
             {"atom ptr, string owner",
              fun() -> tensor_blob:from_blob(#{ptr => Ptr, shape => {4}, dtype => uint8, <<"owner">> => T}) end,
              [<<"owner">>]}],
    [{Name,
      fun() ->
              {badarg, Message, Data} = raised(Fun),
              ?assertEqual(#{reason => bad_value, argument => spec}, Data),
              ?assertMatch({0, _}, binary:match(Message, <<"spec: its keys must be atoms">>)),
              Listed = iolist_to_binary(io_lib:format("~0p", [Keys])),
              ?assertMatch({_, _}, binary:match(Message, Listed)),
              ?assertMatch({_, _}, binary:match(Message, <<"tensor_blob_ipc:open/3">>))
      end}
     || {Name, Fun, Keys} <- Calls].
