%% Hot code reload of the NIF module while tensors and pinned views are alive.
%%
%% code:load_file/1 of a module that is loaded makes the running instance
%% old code and loads a new one; the new instance's on_load calls
%% erlang:load_nif/2, and because the old instance has a NIF library loaded,
%% ERTS runs the library's upgrade callback (not load), which takes the
%% tensor resource type over (ERL_NIF_RT_TAKEOVER in c_src/nif/tb_nif.c). A
%% library without an upgrade callback, or one whose upgrade fails, makes
%% on_load fail, and then load_file returns {error, on_load_failure} and the
%% new instance has no NIFs: so {module, _} back, old code present, and NIF
%% calls answering in the new instance together show that upgrade ran and
%% succeeded.
%%
%% Then: the tensors made before still work (to_binary, to_blob, from_blob,
%% views of them), new ones work, the live counts carried over, purging the
%% old instance (which unloads its NIF library) changes none of that, a
%% second reload works too, and once everything is dropped and collected the
%% destructors (now the new instance's) bring stats() back to the start.
-module(tensor_blob_reload_tests).

-import(tensor_blob_test_util, [run_isolated/1, settled_stats/0]).

-include_lib("eunit/include/eunit.hrl").

-define(M, tensor_blob_nif).

reload_test_() ->
    {timeout, 60, fun reload/0}.

reload() ->
    Start = settled_stats(),
    run_isolated(fun live_through_reloads/0),
    %% Everything made above is garbage now, and freed by the code loaded
    %% last: the counts come back.
    ?assertEqual(Start, settled_stats()),
    %% Leave no old code behind for other tests.
    _ = code:purge(?M),
    ?assertNot(erlang:check_old_code(?M)).

live_through_reloads() ->
    Vs = lists:seq(1, 12),
    T = tensor_blob:from_binary(f32(Vs), float32, {3, 4}),
    Kept = make_views(T),
    check_views(Kept, Vs),
    %% DLPack capsules made before the reload (when this build has DLPack):
    %% one imported after it, one dropped unconsumed (its deleter runs from
    %% the capsule destructor of the new code).
    Capsules = make_capsules(maps:get(view, Kept)),
    Live = settled_stats(),
    %% 7 tensors (a capsule is counted apart); 1 pin: the env-pinned
    %% view's. The views of T share T's storage.
    ?assertMatch(#{tensors := 7, pins := 1}, maps:without([capsules], Live)),
    ?assertEqual(length(Capsules), maps:get(capsules, Live, 0)),

    reload_nif(),
    %% The counters live in the library, which stayed mapped: carried over.
    ?assertEqual(Live, settled_stats()),
    check_views(Kept, Vs),
    %% New tensors, and new views of old tensors, work too.
    New = make_views(tensor_blob:from_binary(f32(Vs), float32, {3, 4})),
    check_views(New, Vs),
    Newer = make_views(maps:get(view, Kept)),
    check_views(Newer, Vs),

    %% Purging the old instance unloads its NIF library: no process runs
    %% old code, so none is killed, and the tensors do not notice.
    ?assert(erlang:check_old_code(?M)),
    ?assertEqual(false, code:purge(?M)),
    ?assertNot(erlang:check_old_code(?M)),
    check_views(Kept, Vs),
    check_views(New, Vs),
    check_capsules(Capsules, Vs),

    %% A second upgrade, over the first.
    reload_nif(),
    check_views(Kept, Vs),
    check_views(Newer, Vs),
    _ = code:purge(?M),

    %% Dropping some of them now runs the destructors of the new code while
    %% this process lives on.
    Before = settled_stats(),
    drop(New),
    After = settled_stats(),
    ?assert(maps:get(tensors, After) < maps:get(tensors, Before)),
    ?assert(maps:get(pins, After) < maps:get(pins, Before)),
    check_views(Kept, Vs),
    check_views(Newer, Vs),
    ok.

%% Reloads the NIF module's beam and checks that a new instance with a
%% working NIF library replaced the old one.
reload_nif() ->
    {file, Beam} = code:is_loaded(?M),
    ?assertNotEqual(preloaded, Beam),
    Md5 = ?M:module_info(md5),
    ?assertNot(erlang:check_old_code(?M)),
    %% on_load failing (an upgrade callback missing or failing) would give
    %% {error, on_load_failure} here.
    ?assertEqual({module, ?M}, code:load_file(?M)),
    %% The same beam, now loaded twice: the instance before is old code.
    ?assertEqual(Md5, ?M:module_info(md5)),
    ?assertEqual({file, Beam}, code:is_loaded(?M)),
    ?assert(erlang:check_old_code(?M)),
    ?assert(erlang:module_loaded(?M)),
    %% The new instance has its NIFs (a stub would raise not_loaded).
    ?assertMatch(#{tensors := _, pins := _}, ?M:stats()),
    ?assertEqual({f, 32}, ?M:nx_type(float32)),
    ok.

%% A tensor-pinning view, an env-pinned view (the owner is a tuple, so it is
%% copied into a pin environment), a transpose and a narrow of the view, a
%% narrow whose view was dropped, and an unpinned view with T kept by hand.
make_views(T) ->
    Blob = tensor_blob:to_blob(T),
    %% Another dtype of the same width: a new tensor over T's storage (the
    %% blob itself as it is would give T back).
    View = tensor_blob:from_blob(Blob#{dtype => int32}),
    EnvPinned = tensor_blob:from_blob(maps:remove(owner, Blob), #{owner => {keep, T}}),
    Slice = tensor_blob:narrow(tensor_blob:from_blob(Blob), 0, 1, 2),
    #{source => T, source_memory => tensor_blob:memory(T), view => View, env_pinned => EnvPinned, slice => Slice,
      transposed => tensor_blob:transpose(View, 0, 1),
      narrowed => tensor_blob:narrow(View, 1, 1, 2),
      unpinned => tensor_blob:from_blob(Blob#{owner => none})}.

check_views(#{source := T, source_memory := SourceMemory, view := View, env_pinned := EnvPinned, slice := Slice, transposed := Tr,
              narrowed := Nar, unpinned := Unpinned}, Vs) ->
    All = f32(Vs),
    ?assertEqual(All, tensor_blob:to_binary(T)),
    ?assertEqual(All, tensor_blob:to_binary(View)),
    ?assertEqual(All, tensor_blob:to_binary(EnvPinned)),
    ?assertEqual(All, tensor_blob:to_binary(Unpinned)),
    ?assertEqual(f32(lists:sublist(Vs, 5, 8)), tensor_blob:to_binary(Slice)),
    ?assertEqual(f32([lists:nth(R * 4 + C + 1, Vs) || C <- lists:seq(0, 3), R <- lists:seq(0, 2)]),
                 tensor_blob:to_binary(Tr)),
    ?assertEqual(f32([lists:nth(R * 4 + C + 1, Vs) || R <- lists:seq(0, 2), C <- [1, 2]]),
                 tensor_blob:to_binary(Nar)),
    %% A view of our own tensor shares its storage: it answers as T does.
    ?assertEqual(SourceMemory, tensor_blob:memory(View)),
    ?assertEqual(pinned, tensor_blob:memory(EnvPinned)),
    ?assertEqual(SourceMemory, tensor_blob:memory(Slice)),
    ?assertEqual(SourceMemory, tensor_blob:memory(Tr)),
    ?assertEqual(unpinned, tensor_blob:memory(Unpinned)),
    ?assertEqual(SourceMemory, tensor_blob:memory(T)),
    %% The round trip, on each of them: same memory, same bytes.
    lists:foreach(fun(X) ->
                          Blob = tensor_blob:to_blob(X),
                          Y = tensor_blob:from_blob(Blob),
                          ?assertEqual(maps:get(ptr, Blob), maps:get(ptr, tensor_blob:to_blob(Y))),
                          ?assertEqual(tensor_blob:to_binary(X), tensor_blob:to_binary(Y))
                  end, [T, View, EnvPinned, Slice, Tr, Nar, Unpinned]),
    ok.

drop(Views) when is_map(Views) -> ok.

make_capsules(View) ->
    [tensor_blob:to_dlpack(View), tensor_blob:to_dlpack(View)].

%% Imports the first capsule (made before the reload) and checks its bytes.
check_capsules([Capsule | _Dropped], Vs) ->
    Imported = tensor_blob:from_dlpack(Capsule),
    ?assertEqual(f32(Vs), tensor_blob:to_binary(Imported)),
    ok.

f32(Vs) -> << <<V:32/float-native>> || V <- Vs >>.


%% A release upgrade loads a new build of the library from another path: a
%% second copy of the code, with its own function addresses. What tensors
%% are (read-only, pinned, a DLPack import, a region) travels with them, the
%% live counts carry over, and the guards still hold.
other_build_test_() ->
    {timeout, 60, fun other_build/0}.

other_build() ->
    Start = settled_stats(),
    run_isolated(fun live_through_other_build/0),
    ?assertEqual(Start, settled_stats()),
    _ = code:purge(?M),
    ?assertNot(erlang:check_old_code(?M)).

live_through_other_build() ->
    Bin = binary:copy(<<1, 2, 3, 4>>, 64),
    RoView = tensor_blob:from_binary(Bin, uint8, {256}, #{copy => false}),
    Src = tensor_blob:from_binary(binary:copy(<<5>>, 64), uint8, {64}),
    RoImport = tensor_blob:from_dlpack(tensor_blob:to_dlpack(Src, #{read_only => true})),
    Pinned = tensor_blob:from_blob(maps:remove(owner, tensor_blob:to_blob(Src)), #{owner => {keep, Src}}),
    Region = tensor_blob_ipc:zeros({16}, uint8),
    Frozen = tensor_blob:zeros({16}, uint8),
    FrozenBin = tensor_blob:to_binary(Frozen, #{copy => false}),
    Kinds = [tensor_blob:memory(X) || X <- [RoView, RoImport, Pinned, Region, Src]],
    ?assertEqual([binary, dlpack, pinned, ipc, owned], Kinds),
    %% Another NIF library holding this build's bridge table, and an export
    %% from it that outlives the build's code.
    Bridged = tensor_blob:from_binary(binary:copy(<<7>>, 16), uint8, {16}),
    ok = foreign_tensor_nif:table_find(Bridged),
    {ok, TakenBefore} = foreign_tensor_nif:take(Bridged, false),
    Live = settled_stats(),

    load_other_build(),
    ?assertEqual(Live, settled_stats()),
    ?assertEqual(Kinds, [tensor_blob:memory(X) || X <- [RoView, RoImport, Pinned, Region, Src]]),
    ?assertError({badarg, _}, tensor_blob:write(RoView, binary:copy(<<0>>, 256))),
    ?assertError({badarg, _}, tensor_blob:write(RoImport, binary:copy(<<0>>, 64))),
    ?assertError({badarg, _}, tensor_blob:write(Frozen, binary:copy(<<9>>, 16))),
    ?assertEqual(binary:copy(<<1, 2, 3, 4>>, 64), tensor_blob:to_binary(RoView)),
    ?assertEqual(binary:copy(<<0>>, 16), FrozenBin),
    ?assertMatch({_, 16}, tensor_blob_nif:ipc_name(Region)),
    %% Until the old build's code is purged, its table serves.
    {ok, TakenBetween} = foreign_tensor_nif:table_take(Bridged),
    %% The old build's code is purged; its storages still release through it.
    ?assertEqual(false, code:purge(?M)),
    %% Its table retires (its types may go with it), and a consumer's next
    %% call finds the new build by itself.
    ?assertEqual({error, 4}, foreign_tensor_nif:table_take(Bridged)),
    {ok, TakenAfter} = foreign_tensor_nif:take(Bridged, false),
    ok = foreign_tensor_nif:table_find(Bridged),
    {ok, TakenNew} = foreign_tensor_nif:table_take(Bridged),
    Taken = [TakenBefore, TakenBetween, TakenAfter, TakenNew],
    [?assertEqual({binary:copy(<<7>>, 16), [16], false}, foreign_tensor_nif:read(A)) || A <- Taken],
    [ok = foreign_tensor_nif:release(A) || A <- Taken],
    ok.

%% Loads the NIF module again, its on_load pointed at a copy of the library
%% under another path (TENSOR_BLOB_NIF), as a release upgrade does.
load_other_build() ->
    Dir = filename:join(["/tmp", "tensor_blob_other_build_" ++ os:getpid()]),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    Current = case os:getenv("TENSOR_BLOB_NIF") of
                  false -> filename:join(code:priv_dir(tensor_blob), "tensor_blob_nif");
                  Path -> Path
              end,
    Copy = filename:join(Dir, "tensor_blob_nif"),
    {ok, _} = file:copy(Current ++ ".so", Copy ++ ".so"),
    true = os:putenv("TENSOR_BLOB_NIF", Copy),
    try
        ?assertEqual({module, ?M}, code:load_file(?M)),
        ?assertEqual({f, 32}, ?M:nx_type(float32))
    after
        case Current of
            _ when Current =:= Copy -> ok;
            _ -> restore_env(Current)
        end
    end.

restore_env(Current) ->
    case filename:join(code:priv_dir(tensor_blob), "tensor_blob_nif") of
        Current -> os:unsetenv("TENSOR_BLOB_NIF");
        _ -> os:putenv("TENSOR_BLOB_NIF", Current)
    end.

%% A build loaded from another path after the module was deleted and purged
%% is loaded, not upgraded: nothing is handed over. It finds the state of
%% the builds before it all the same: the counts go on, and memory that a
%% binary of the earlier build shows stays guarded against the new build's
%% writes.
other_path_test_() ->
    {timeout, 60, fun other_path/0}.

other_path() ->
    Start = settled_stats(),
    Original = os:getenv("TENSOR_BLOB_NIF"),
    Current = case Original of
                  false -> filename:join(code:priv_dir(tensor_blob), "tensor_blob_nif");
                  Path -> Path
              end,
    Dir = filename:join(filename:basedir(user_cache, "tensor_blob_test"), os:getpid()),
    Copy = filename:join(Dir, "tensor_blob_nif"),
    ok = filelib:ensure_dir(Copy),
    {ok, _} = file:copy(Current ++ ".so", Copy ++ ".so"),
    try
        run_isolated(fun() -> guarded_across_builds(Copy) end)
    after
        restore_library(Original),
        _ = file:del_dir_r(Dir)
    end,
    ?assertEqual(Start, settled_stats()).

guarded_across_builds(Copy) ->
    T = tensor_blob:zeros({16}, uint8),
    Bin = tensor_blob:to_binary(T, #{copy => false}),
    #{ptr := Ptr} = tensor_blob:to_blob(T),
    Before = settled_stats(),
    ?assertMatch(#{binaries := 1}, maps:with([binaries], Before)),
    os:putenv("TENSOR_BLOB_NIF", Copy),
    replace_module(),
    ?assertEqual(Copy ++ ".so", loaded_library()),
    ?assertEqual(Before, tensor_blob:stats()),
    V = tensor_blob:from_blob(#{ptr => Ptr, shape => {16}, dtype => uint8, owner => none}),
    ?assertError({badarg, _}, tensor_blob:write(V, binary:copy(<<9>>, 16))),
    ?assertEqual(binary:copy(<<0>>, 16), Bin),
    ?assertEqual(binary:copy(<<0>>, 16), tensor_blob:to_binary(V)).

%% Deleted, purged, and loaded again: load, not upgrade.
replace_module() ->
    true = code:delete(?M),
    _ = code:purge(?M),
    {module, ?M} = code:load_file(?M).

restore_library(false) ->
    os:unsetenv("TENSOR_BLOB_NIF"),
    replace_module();
restore_library(Path) ->
    os:putenv("TENSOR_BLOB_NIF", Path),
    replace_module().

%% The file of the NIF library this VM maps for the module's current code.
loaded_library() ->
    Wanted = case os:getenv("TENSOR_BLOB_NIF") of
                 false -> filename:join(code:priv_dir(tensor_blob), "tensor_blob_nif");
                 P -> P
             end ++ ".so",
    {ok, Maps} = file:read_file("/proc/self/maps"),
    case binary:match(Maps, list_to_binary(Wanted)) of
        nomatch -> not_mapped;
        _ -> Wanted
    end.
