%% EUnit tests of the Erlang API (src/tensor_blob.erl).
%%
%% Each test checks what a caller relies on: the bytes a tensor holds, the
%% fields of a blob, which tensors share memory, what keeps memory alive, and
%% the exact error raised for bad input. Tensors are made inside the test
%% functions (never in generators) so that EUnit's own processes hold no
%% tensor references, and the stats/0 leak checks see only what a test made.
-module(tensor_blob_tests).

-import(tensor_blob_test_util, [wait_for_stats/1, run_isolated/1, settled_stats/0]).

-include_lib("eunit/include/eunit.hrl").

%% Every canonical dtype of the design, supported by the linked libtorch or
%% not: the contract that the library's table (tensor_blob:tables/0) must
%% meet. Every other list of dtypes in the tests derives from that table.
-define(CANONICAL, [bool, uint8, int8, int16, int32, int64, uint16, uint32, uint64,
                    float16, bfloat16, float32, float64, complex32, complex64, complex128,
                    float8_e4m3fn, float8_e5m2, float8_e5m2fnuz, float8_e4m3fnuz, float8_e8m0fnu,
                    float4_e2m1fn_x2]).

%% The device types of the design: the contract of the device table.
-define(DEVICE_TYPES, [cpu, cuda]).

%% The rows of the library's dtype table.
dtype_rows() -> maps:get(dtypes, tensor_blob:tables()).

%% What libtorch 1.13 (the oldest supported) holds: always in dtypes().
base_dtypes() -> [N || #{name := N, since := <<"1.13">>} <- dtype_rows()].

%% Expr raises error({badarg, Msg}): Msg is a binary that leads with the
%% name of the offending field ("Field: ..."), and mentions each of Words.
-define(assertBadarg(Field, Expr), ?assertBadarg(Field, [], Expr)).
-define(assertBadarg(Field, Words, Expr),
        begin
            ?assertError({badarg, _}, Expr),
            assert_names_field(Field, Words, badarg_message(fun() -> Expr end))
        end).

%% Expr raises error({tensor_blob, Msg}) with Msg a binary that mentions Word.
-define(assertTensorBlobError(Word, Expr),
        begin
            ?assertError({tensor_blob, _}, Expr),
            assert_mentions(Word, tensor_blob_message(fun() -> Expr end))
        end).

%%====================================================================
%% Helpers
%%====================================================================

%% The message of the error {Kind, Message} that Fun raises.
error_message(Kind, Fun) ->
    try Fun() of
        Result -> erlang:error({expected_error, Kind, Result})
    catch
        error:{Kind, Msg} -> Msg
    end.

badarg_message(Fun) -> error_message(badarg, Fun).

tensor_blob_message(Fun) -> error_message(tensor_blob, Fun).

assert_names_field(Field, Words, Msg) ->
    ?assert(is_binary(Msg)),
    case binary:match(Msg, <<Field/binary, ":">>) of
        {0, _} -> ok;
        _ -> erlang:error({message_does_not_lead_with_field, Field, Msg})
    end,
    lists:foreach(fun(Word) -> assert_mentions(Word, Msg) end, Words).

assert_mentions(Word, Msg) when is_atom(Word) ->
    assert_mentions(atom_to_binary(Word, utf8), Msg);
assert_mentions(Word, Msg) ->
    ?assert(is_binary(Msg)),
    case binary:match(Msg, Word) of
        nomatch -> erlang:error({message_does_not_mention, Word, Msg});
        _ -> ok
    end.

%% The element size, from the library's own dtype table.
element_size(D) -> maps:get(element_size, tensor_blob:to_blob(tensor_blob:zeros({1}, D))).

%% Six distinct values of each dtype, all exactly representable in it; the
%% kind of a dtype comes from its Nx type (tensor_blob:nx_type/1, the
%% library's table), so a dtype the table gains is covered here too.
values(D) -> values_of(kind(D)).

%% The Nx type, or for complex32 (Nx has none) what it is: two float16.
kind(complex32) -> {c, 32};
kind(D) -> tensor_blob:nx_type(D).

values_of(nil) -> [1, 0, 0, 1, 1, 0];
values_of({u, Bits}) -> [0, 1, 42, 128, 200, (1 bsl Bits) - 1];
values_of({s, Bits}) -> [-(1 bsl (Bits - 1)), -1, 0, 1, 42, (1 bsl (Bits - 1)) - 1];
values_of({c, _}) -> [{1.0, -1.0}, {0.5, 2.0}, {-2.5, 0.0}, {0.0, 1.5}, {1024.0, -0.25}, {3.0, 4.0}];
%% 8-bit floats have no Erlang bit syntax: their bytes, as bit patterns.
values_of({_, 8}) -> [16#00, 16#38, 16#3C, 16#40, 16#B8, 16#44];
values_of(_Float) -> [-2.5, -1.0, 0.0, 0.5, 1.5, 1024.0].

%% Native-endian bytes of a list of values, written independently of the NIF.
encode(D, Vs) ->
    Type = kind(D),
    << <<(encode1(Type, V))/binary>> || V <- Vs >>.

encode1(nil, V) -> <<V:8>>;
encode1({u, Bits}, V) -> <<V:Bits/unsigned-native>>;
encode1({s, Bits}, V) -> <<V:Bits/signed-native>>;
encode1({bf, 16}, V) ->
    %% bfloat16 is the top half of a float32.
    <<Hi:16, _:16>> = <<V:32/float-big>>,
    <<Hi:16/native>>;
encode1({c, Bits}, {Re, Im}) -> <<Re:(Bits div 2)/float-native, Im:(Bits div 2)/float-native>>;
encode1({_, 8}, V) -> <<V:8>>;
encode1({f, Bits}, V) -> <<V:Bits/float-native>>.

f32(Vs) -> encode(float32, Vs).
i32(Vs) -> encode(int32, Vs).

%% The row-major element list of the transpose of a Rows x Cols matrix.
transposed(Vs, Rows, Cols) ->
    [lists:nth(R * Cols + C + 1, Vs) || C <- lists:seq(0, Cols - 1), R <- lists:seq(0, Rows - 1)].

%% A {3,4} float32 tensor holding 1.0 .. 12.0.
matrix34() ->
    tensor_blob:from_binary(f32(lists:seq(1, 12)), float32, {3, 4}).

ptr(T) -> maps:get(ptr, tensor_blob:to_blob(T)).


%% Start with DT more live tensors and DP more pins (other counts unchanged).
plus(#{tensors := T, pins := P} = Stats, DT, DP) -> Stats#{tensors := T + DT, pins := P + DP}.

%%====================================================================
%% 1. dtypes and round trips
%%====================================================================

dtypes_test() ->
    Ds = tensor_blob:dtypes(),
    ?assertEqual(length(Ds), length(lists:usort(Ds))),
    ?assertEqual([], Ds -- ?CANONICAL),
    ?assertEqual([], base_dtypes() -- Ds),
    ?assertNotEqual([], base_dtypes()).

%% The tables hold every canonical dtype once, and every device type; what they say of a dtype agrees with itself and with
%% the library's other answers.
tables_test() ->
    #{dtypes := Rows, devices := Devices} = tensor_blob:tables(),
    ?assertEqual(lists:sort(?CANONICAL), lists:sort([N || #{name := N} <- Rows])),
    ?assertEqual(length(?CANONICAL), length(Rows)),
    ?assertEqual(tensor_blob:dtypes(), [N || #{name := N, available := true} <- Rows]),
    [begin
         {_Code, Bits, Lanes} = Dl,
         ?assertEqual(Size * 8, Bits * Lanes),
         ?assertEqual(Bits, B),
         ?assertEqual(Nx, tensor_blob:nx_type(N)),
         [?assertEqual(N, canonical_of(A)) || A <- Aliases]
     end
     || #{name := N, element_size := Size, dlpack := Dl, bits := B, nx := Nx, aliases := Aliases} <- Rows],
    ?assertEqual(?DEVICE_TYPES, [N || #{name := N} <- Devices]),
    ?assertMatch([#{name := cpu, dlpack := 1, indexed := false}, #{name := cuda, dlpack := 2, indexed := true}],
                 Devices),
    %% The facade's copy (kept in a persistent term) is what the loaded library says now, and dtype_info/1 answers from it.
    ?assertEqual(tensor_blob_nif:tables(), tensor_blob:tables()),
    [?assertEqual(Row, tensor_blob:dtype_info(N)) || #{name := N} = Row <- Rows],
    ?assertMatch(#{name := float32, element_size := 4, kind := float}, tensor_blob:dtype_info(float32)),
    ?assertBadarg(<<"dtype">>, tensor_blob:dtype_info(float)).

%% The storage kind table: each kind once, kinds that memory/1 names alike agree on keeping their
%% owner, and every kind a tensor here can be of answers memory/1 with an atom of the table and
%% pinned/1 with its kind's keeps_owner.
storage_table_test() ->
    #{storage := Kinds} = tensor_blob:tables(),
    Names = [N || #{name := N} <- Kinds],
    ?assertEqual(length(Names), length(lists:usort(Names))),
    Keeps = fun(M) -> lists:usort([K || #{memory := M2, keeps_owner := K} <- Kinds, M2 =:= M]) end,
    [?assertEqual({M, [K]}, {M, Keeps(M)}) || #{memory := M, keeps_owner := K} <- Kinds],
    T = matrix34(),
    Spec = maps:remove(owner, tensor_blob:to_blob(T)),
    Import = tensor_blob:from_dlpack(tensor_blob:consume_dlpack(tensor_blob:to_dlpack(T))),
    File = filename:join(filename:basedir(user_cache, "tensor_blob_tests"),
                         "storage_" ++ os:getpid() ++ ".safetensors"),
    ok = filelib:ensure_dir(File),
    ok = tensor_blob_safetensors:write(File, #{<<"t">> => T}),
    #{tensors := #{<<"t">> := Mapped}} = tensor_blob_safetensors:open(File),
    ok = file:delete(File),
    Tensors = [T, Mapped, tensor_blob:from_blob(Spec, #{owner => {keep, T}}), tensor_blob:from_blob(Spec, #{owner => none}),
               tensor_blob:from_binary(<<0:128>>, float32, {4}, #{copy => false}), Import,
               tensor_blob_ipc:zeros({4}, float32), tensor_blob_ipc:torch_zeros({4}, float32)],
    Seen = [begin
                M = tensor_blob:memory(X),
                ?assertEqual({M, Keeps(M)}, {M, [tensor_blob:pinned(X)]}),
                M
            end || X <- Tensors],
    %% Every answer of the table but what only CUDA IPC makes.
    ?assertEqual(lists:usort([M || #{memory := M} <- Kinds]), lists:usort(Seen)).

%% The types every spec names are the tables' terms: memory() one atom per answer of the storage
%% kind table, device() one term per device type (an indexed one with its index). Read from the
%% compiled module, so a row added in C without its term (or a term the table lacks) fails here.
spec_types_test() ->
    #{storage := Kinds, devices := Devices} = tensor_blob:tables(),
    ?assertEqual(lists:usort([M || #{memory := M} <- Kinds]), lists:usort(type_terms(memory))),
    ?assertEqual(lists:sort([case I of true -> {N, non_neg_integer}; false -> N end
                             || #{name := N, indexed := I} <- Devices]),
                 lists:sort(type_terms(device))),
    %% memory/1 names memory(); tables/0 answers the keys its spec names.
    ?assertMatch([{type, _, 'fun', [_, {user_type, _, memory, []}]}], spec_of(memory, 1)),
    [{type, _, 'fun', [_, {type, _, map, Fields}]}] = spec_of(tables, 0),
    ?assertEqual(lists:sort([K || {type, _, map_field_exact, [{atom, _, K}, _]} <- Fields]),
                 lists:sort(maps:keys(tensor_blob:tables()))).

%% The terms of tensor_blob's type Name, a union of atoms and {Atom, Type} tuples.
type_terms(Name) ->
    [Type] = [T || {attribute, _, type, {N, T, []}} <- tensor_blob_forms(), N =:= Name],
    Members = case Type of
                  {type, _, union, Ts} -> Ts;
                  One -> [One]
              end,
    [case M of
         {atom, _, A} -> A;
         {type, _, tuple, [{atom, _, A}, {type, _, B, []}]} -> {A, B}
     end || M <- Members].

spec_of(Name, Arity) ->
    [Clauses] = [C || {attribute, _, spec, {{N, A}, C}} <- tensor_blob_forms(), {N, A} =:= {Name, Arity}],
    Clauses.

tensor_blob_forms() ->
    {ok, {_, [{abstract_code, {raw_abstract_v1, Forms}}]}} =
        beam_lib:chunks(code:which(tensor_blob), [abstract_code]),
    Forms.

%% The canonical dtype an alias names: through a tensor where the linked
%% libtorch holds it, else through its Nx type.
canonical_of(Alias) ->
    [Row] = [R || #{aliases := As} = R <- dtype_rows(), lists:member(Alias, As)],
    case Row of
        #{available := true} -> tensor_blob:dtype(tensor_blob:zeros({1}, Alias));
        #{name := N, nx := Nx} -> ?assertEqual(Nx, tensor_blob:nx_type(Alias)), N
    end.

%% Canonical dtypes the linked libtorch lacks raise a tensor_blob error naming
%% the dtype, from every entry point, and never become another dtype.
unsupported_dtypes_test_() ->
    [{atom_to_list(D), fun() -> unsupported_dtype(D) end}
     || D <- ?CANONICAL -- tensor_blob:dtypes()].

unsupported_dtype(D) ->
    ?assertTensorBlobError(D, tensor_blob:from_binary(<<>>, D, {0})),
    ?assertTensorBlobError(D, tensor_blob:from_binary(<<0:64>>, D, {1})),
    ?assertTensorBlobError(D, tensor_blob:zeros({2}, D)),
    ?assertTensorBlobError(D, tensor_blob:from_blob(#{ptr => 0, shape => {0}, dtype => D, owner => none})).

unsupported_nx_dtype_test() ->
    [?assertTensorBlobError(Name, tensor_blob:zeros({1}, Nx))
     || #{name := Name, nx := Nx, available := false} <- dtype_rows(), Nx =/= nil].

%% from_binary then to_binary gives the bytes back, with the dtype, shape and
%% strides asked for; a transposed view reads the elements transposed, which
%% checks the element size libtorch uses for the dtype.
binary_round_trip_test_() ->
    [{atom_to_list(D), fun() -> binary_round_trip(D) end} || D <- tensor_blob:dtypes()].

binary_round_trip(D) ->
    Vs = values(D),
    Bytes = encode(D, Vs),
    ?assertEqual(6 * element_size(D), byte_size(Bytes)),
    T = tensor_blob:from_binary(Bytes, D, {2, 3}),
    ?assertEqual(D, tensor_blob:dtype(T)),
    ?assertEqual({2, 3}, tensor_blob:shape(T)),
    ?assertEqual([3, 1], tensor_blob:strides(T)),
    ?assertEqual(cpu, tensor_blob:device(T)),
    ?assertEqual(Bytes, tensor_blob:to_binary(T)),
    Tr = tensor_blob:transpose(T, 0, 1),
    ?assertEqual(D, tensor_blob:dtype(Tr)),
    ?assertEqual(encode(D, transposed(Vs, 2, 3)), tensor_blob:to_binary(Tr)),
    %% from_binary copies: T does not see later changes to anything else.
    Z = tensor_blob:zeros({2, 3}, D),
    ?assertEqual(binary:copy(<<0>>, 6 * element_size(D)), tensor_blob:to_binary(Z)),
    ?assertEqual(Bytes, tensor_blob:to_binary(T)).

%% to_blob -> from_blob -> to_blob keeps every field but the owner, and the
%% view reads the original bytes; for contiguous and transposed layouts.
blob_round_trip_test_() ->
    [{atom_to_list(D), fun() -> blob_round_trip(D) end} || D <- tensor_blob:dtypes()].

blob_round_trip(D) ->
    Vs = values(D),
    Bytes = encode(D, Vs),
    T = tensor_blob:from_binary(Bytes, D, {2, 3}),
    B = tensor_blob:to_blob(T),
    ?assertMatch(#{dtype := D, shape := {2, 3}, strides := [3, 1], device := cpu}, B),
    ?assertEqual(element_size(D), maps:get(element_size, B)),
    ?assertEqual(6 * element_size(D), maps:get(byte_size, B)),
    V = tensor_blob:from_blob(B),
    B2 = tensor_blob:to_blob(V),
    ?assertEqual(maps:remove(owner, B), maps:remove(owner, B2)),
    ?assertEqual(V, maps:get(owner, B2)),
    ?assertEqual(D, tensor_blob:dtype(V)),
    ?assertEqual(Bytes, tensor_blob:to_binary(V)),
    %% A strided (transposed) blob survives the round trip too.
    Bt = tensor_blob:to_blob(tensor_blob:transpose(T, 0, 1)),
    ?assertMatch(#{dtype := D, shape := {3, 2}, strides := [1, 3]}, Bt),
    ?assertEqual(maps:get(ptr, B), maps:get(ptr, Bt)),
    Vt = tensor_blob:from_blob(Bt),
    ?assertEqual(maps:remove(owner, Bt), maps:remove(owner, tensor_blob:to_blob(Vt))),
    ?assertEqual(encode(D, transposed(Vs, 2, 3)), tensor_blob:to_binary(Vt)),
    ?assertEqual(Bytes, tensor_blob:to_binary(T)).

%% Aliases and Nx types are accepted on input; output is always canonical.
dtype_aliases_test_() ->
    Aliases = [{float, float32}, {double, float64}, {half, float16}, {long, int64},
               {byte, uint8}, {char, int8}, {short, int16}, {int, int32},
               {complex_float, complex64}, {complex_double, complex128},
               {complex_half, complex32}, {chalf, complex32},
               {{f, 32}, float32}, {{f, 64}, float64}, {{f, 16}, float16},
               {{bf, 16}, bfloat16}, {{c, 64}, complex64}, {{c, 128}, complex128},
               {{u, 8}, uint8}, {{s, 8}, int8}, {{s, 16}, int16}, {{s, 32}, int32},
               {{s, 64}, int64},
               %% Nx's shorthands.
               {f32, float32}, {f64, float64}, {f16, float16}, {bf16, bfloat16},
               {c64, complex64}, {c128, complex128}, {u8, uint8},
               {s8, int8}, {s16, int16}, {s32, int32}, {s64, int64}],
    [{lists:flatten(io_lib:format("~p -> ~p", [A, C])), fun() -> dtype_alias(A, C) end}
     || {A, C} <- Aliases].

%% The unsigned shorthands name dtypes libtorch 1.13 lacks: the table
%% knows them (their Nx type), and libtorch's lack is the error, not the name.
nx_unsigned_shorthands_test() ->
    [begin
         ?assertEqual({u, Bits}, tensor_blob:nx_type(Short)),
         case lists:member(Canonical, tensor_blob:dtypes()) of
             true -> ?assertEqual(Canonical, tensor_blob:dtype(tensor_blob:zeros({2}, Short)));
             false -> ?assertTensorBlobError(atom_to_binary(Canonical), tensor_blob:zeros({2}, Short))
         end
     end
     || {Short, Canonical, Bits} <- [{u16, uint16, 16}, {u32, uint32, 32}, {u64, uint64, 64}]].

dtype_alias(Alias, Canonical) ->
    Bytes = encode(Canonical, values(Canonical)),
    T = tensor_blob:from_binary(Bytes, Alias, {2, 3}),
    ?assertEqual(Canonical, tensor_blob:dtype(T)),
    ?assertEqual(Canonical, maps:get(dtype, tensor_blob:to_blob(T))),
    ?assertEqual(Bytes, tensor_blob:to_binary(T)),
    ?assertEqual(Canonical, tensor_blob:dtype(tensor_blob:zeros({2}, Alias))),
    %% A spec naming the alias views the same bytes as the canonical dtype.
    Spec = (tensor_blob:to_blob(T))#{dtype => Alias},
    V = tensor_blob:from_blob(Spec),
    ?assertEqual(Canonical, tensor_blob:dtype(V)),
    ?assertEqual(Canonical, maps:get(dtype, tensor_blob:to_blob(V))),
    ?assertEqual(Bytes, tensor_blob:to_binary(V)).

%%====================================================================
%% 2. Blob map contents
%%====================================================================

blob_keys_test() ->
    T = matrix34(),
    B = tensor_blob:to_blob(T),
    ?assertEqual(lists:sort([ptr, shape, strides, dtype, device, element_size, byte_size, alignment, owner]),
                 lists:sort(maps:keys(B))),
    ?assert(maps:get(owner, B) =:= T),
    ?assertEqual(cpu, maps:get(device, B)),
    ?assert(is_integer(maps:get(ptr, B)) andalso maps:get(ptr, B) > 0),
    ?assertEqual(0, maps:get(ptr, B) rem 4).

element_size_test_() ->
    [{atom_to_list(D),
      fun() ->
              B = tensor_blob:to_blob(tensor_blob:zeros({5}, D)),
              ?assertEqual(element_size(D), maps:get(element_size, B)),
              ?assertEqual(5 * element_size(D), maps:get(byte_size, B))
      end} || D <- tensor_blob:dtypes()].

contiguous_blob_test() ->
    T = matrix34(),
    ?assertMatch(#{shape := {3, 4}, strides := [4, 1], dtype := float32,
                   element_size := 4, byte_size := 48}, tensor_blob:to_blob(T)),
    ?assertMatch(#{shape := {2, 5}, strides := [5, 1], element_size := 8, byte_size := 80},
                 tensor_blob:to_blob(tensor_blob:zeros({2, 5}, int64))).

transposed_blob_test() ->
    T = matrix34(),
    Base = ptr(T),
    %% Same memory, same extent; only shape and strides swap.
    ?assertMatch(#{ptr := Base, shape := {4, 3}, strides := [1, 4], byte_size := 48},
                 tensor_blob:to_blob(tensor_blob:transpose(T, 0, 1))),
    ?assertMatch(#{ptr := Base, shape := {4, 3}, strides := [1, 4], byte_size := 48},
                 tensor_blob:to_blob(tensor_blob:transpose(T, 1, 0))).

narrowed_blob_test() ->
    T = matrix34(),
    Base = ptr(T),
    %% Row 1: starts one row (4 floats = 16 bytes) in, spans one row.
    ?assertMatch(#{ptr := P, shape := {1, 4}, strides := [4, 1], byte_size := 16}
                   when P =:= Base + 16,
                 tensor_blob:to_blob(tensor_blob:narrow(T, 0, 1, 1))),
    %% Columns 1..2: starts 4 bytes in; the last element is at offset
    %% (3-1)*4 + (2-1)*1 = 9 elements, so the extent is 10 floats = 40 bytes.
    ?assertMatch(#{ptr := P, shape := {3, 2}, strides := [4, 1], byte_size := 40}
                   when P =:= Base + 4,
                 tensor_blob:to_blob(tensor_blob:narrow(T, 1, 1, 2))),
    %% Rows 1..2 of the transpose {4,3} [1,4]: offset 1 element; last element
    %% at 1 + (2-1)*1 + (3-1)*4 = 10, so the extent is 10 floats = 40 bytes.
    Tr = tensor_blob:transpose(T, 0, 1),
    ?assertMatch(#{ptr := P, shape := {2, 3}, strides := [1, 4], byte_size := 40}
                   when P =:= Base + 4,
                 tensor_blob:to_blob(tensor_blob:narrow(Tr, 0, 1, 2))),
    %% int64 {2,5}, columns 2..4: 16 bytes in; last at 5 + 2 = 7, 8 elements.
    L = tensor_blob:zeros({2, 5}, int64),
    LBase = ptr(L),
    ?assertMatch(#{ptr := P, shape := {2, 3}, strides := [5, 1], byte_size := 64}
                   when P =:= LBase + 16,
                 tensor_blob:to_blob(tensor_blob:narrow(L, 1, 2, 3))),
    %% An empty narrow reaches no memory.
    ?assertMatch(#{shape := {0, 4}, byte_size := 0},
                 tensor_blob:to_blob(tensor_blob:narrow(T, 0, 3, 0))).

to_blob_options_test() ->
    T = matrix34(),
    ?assertEqual(T, maps:get(owner, tensor_blob:to_blob(T, #{}))),
    B = tensor_blob:to_blob(T, #{owner => {my, owner}}),
    ?assertEqual({my, owner}, maps:get(owner, B)),
    ?assertEqual(maps:remove(owner, tensor_blob:to_blob(T)), maps:remove(owner, B)),
    S = tensor_blob:to_blob(T, #{struct => 'Elixir.Some.Blob'}),
    ?assertEqual('Elixir.Some.Blob', maps:get('__struct__', S)),
    ?assertEqual(tensor_blob:to_blob(T), maps:remove('__struct__', S)).

%%====================================================================
%% 3. Views share memory
%%====================================================================

view_write_through_test() ->
    T = matrix34(),
    V = tensor_blob:from_blob(tensor_blob:to_blob(T)),
    New = f32(lists:seq(101, 112)),
    ?assertEqual(V, tensor_blob:write(V, New)),
    ?assertEqual(New, tensor_blob:to_binary(T)),
    New2 = f32([-X || X <- lists:seq(1, 12)]),
    ?assertEqual(T, tensor_blob:write(T, New2)),
    ?assertEqual(New2, tensor_blob:to_binary(V)).

unpinned_view_write_through_test() ->
    T = matrix34(),
    V = tensor_blob:from_blob((tensor_blob:to_blob(T))#{owner => none}),
    New = f32(lists:seq(201, 212)),
    _ = tensor_blob:write(V, New),
    ?assertEqual(New, tensor_blob:to_binary(T)).

narrow_view_write_test() ->
    T = matrix34(),
    Row1 = tensor_blob:narrow(T, 0, 1, 1),
    ?assertEqual(f32([5, 6, 7, 8]), tensor_blob:to_binary(Row1)),
    _ = tensor_blob:write(Row1, f32([50, 60, 70, 80])),
    ?assertEqual(f32([1, 2, 3, 4, 50, 60, 70, 80, 9, 10, 11, 12]), tensor_blob:to_binary(T)),
    Col2 = tensor_blob:narrow(T, 1, 2, 1),
    ?assertEqual({3, 1}, tensor_blob:shape(Col2)),
    ?assertEqual(f32([3, 70, 11]), tensor_blob:to_binary(Col2)),
    _ = tensor_blob:write(Col2, f32([-1, -2, -3])),
    ?assertEqual(f32([1, 2, -1, 4, 50, 60, -2, 80, 9, 10, -3, 12]), tensor_blob:to_binary(T)),
    %% And the other way round: writing T shows through the narrow view.
    _ = tensor_blob:write(T, f32(lists:seq(1, 12))),
    ?assertEqual(f32([5, 6, 7, 8]), tensor_blob:to_binary(Row1)),
    ?assertEqual(f32([3, 7, 11]), tensor_blob:to_binary(Col2)).

blob_of_narrow_view_test() ->
    T = matrix34(),
    V = tensor_blob:from_blob(tensor_blob:to_blob(tensor_blob:narrow(T, 0, 1, 2))),
    ?assertEqual({2, 4}, tensor_blob:shape(V)),
    ?assertEqual(f32(lists:seq(5, 12)), tensor_blob:to_binary(V)),
    _ = tensor_blob:write(V, f32(lists:seq(50, 57))),
    ?assertEqual(f32([1, 2, 3, 4 | lists:seq(50, 57)]), tensor_blob:to_binary(T)).

transpose_to_binary_test() ->
    %% [[1,2,3],[4,5,6]] transposed is [[1,4],[2,5],[3,6]].
    T = tensor_blob:from_binary(i32([1, 2, 3, 4, 5, 6]), int32, {2, 3}),
    Tr = tensor_blob:transpose(T, 0, 1),
    ?assertEqual({3, 2}, tensor_blob:shape(Tr)),
    ?assertEqual([1, 3], tensor_blob:strides(Tr)),
    ?assertEqual(i32([1, 4, 2, 5, 3, 6]), tensor_blob:to_binary(Tr)),
    %% Through a blob view of the transpose as well.
    ?assertEqual(i32([1, 4, 2, 5, 3, 6]),
                 tensor_blob:to_binary(tensor_blob:from_blob(tensor_blob:to_blob(Tr)))),
    %% A 3-D transpose of dims 0 and 2: T3[i][j][k] = 100i + 10j + k, {2,2,3}.
    Vs3 = [100 * I + 10 * J + K || I <- [0, 1], J <- [0, 1], K <- [0, 1, 2]],
    T3 = tensor_blob:from_binary(i32(Vs3), int32, {2, 2, 3}),
    Expected3 = [100 * I + 10 * J + K || K <- [0, 1, 2], J <- [0, 1], I <- [0, 1]],
    ?assertEqual(i32(Expected3), tensor_blob:to_binary(tensor_blob:transpose(T3, 0, 2))).

transpose_view_write_test() ->
    T = tensor_blob:from_binary(i32([1, 2, 3, 4, 5, 6]), int32, {2, 3}),
    Tr = tensor_blob:transpose(T, 0, 1),
    %% Writing [[10,40],[20,50],[30,60]] into the transpose writes
    %% [[10,20,30],[40,50,60]] into T.
    _ = tensor_blob:write(Tr, i32([10, 40, 20, 50, 30, 60])),
    ?assertEqual(i32([10, 20, 30, 40, 50, 60]), tensor_blob:to_binary(T)),
    _ = tensor_blob:write(T, i32([7, 8, 9, 10, 11, 12])),
    ?assertEqual(i32([7, 10, 8, 11, 9, 12]), tensor_blob:to_binary(Tr)).

%%====================================================================
%% 4. Pinning and memory/1
%%====================================================================

memory_owned_test() ->
    Z = tensor_blob:zeros({2, 2}, float32),
    T = matrix34(),
    ?assertEqual(owned, tensor_blob:memory(Z)),
    ?assertEqual(owned, tensor_blob:memory(T)),
    ?assertEqual(owned, tensor_blob:memory(tensor_blob:narrow(T, 0, 1, 1))),
    ?assertEqual(owned, tensor_blob:memory(tensor_blob:transpose(T, 0, 1))),
    ?assertNot(tensor_blob:pinned(T)).

%% A view of one of our tensors shares that tensor's storage (its reference
%% count is the pin): it answers as the tensor does, and holds no pin.
memory_shared_storage_test() ->
    T = matrix34(),
    Pins = maps:get(pins, tensor_blob:stats()),
    V = tensor_blob:from_blob(tensor_blob:to_blob(T)),
    ?assertEqual(owned, tensor_blob:memory(V)),
    ?assertEqual(Pins, maps:get(pins, tensor_blob:stats())),
    Ro = tensor_blob:from_binary(binary:copy(<<1, 2, 3, 4>>, 64), uint8, {256}, #{copy => false}),
    RoView = tensor_blob:from_blob(tensor_blob:to_blob(tensor_blob:narrow(Ro, 0, 4, 8))),
    ?assertEqual(binary, tensor_blob:memory(RoView)),
    ?assertError({badarg, _}, tensor_blob:write(RoView, <<0:64>>)).

memory_pinned_test() ->
    T = matrix34(),
    B = tensor_blob:to_blob(T),
    V = tensor_blob:from_blob(maps:remove(owner, B), #{owner => {keep, T}}),
    ?assertEqual(pinned, tensor_blob:memory(V)),
    ?assert(tensor_blob:pinned(V)),
    ?assertEqual(pinned, tensor_blob:memory(tensor_blob:narrow(V, 0, 1, 1))),
    ?assertEqual(pinned, tensor_blob:memory(tensor_blob:transpose(V, 0, 1))),
    Spec = maps:remove(owner, B),
    ?assertEqual(pinned, tensor_blob:memory(tensor_blob:from_blob(Spec, #{owner => {keep, T}}))),
    %% The option replaces the spec's owner.
    ?assertEqual(pinned, tensor_blob:memory(tensor_blob:from_blob(B#{owner => T}, #{owner => {keep, T}}))),
    %% An empty option map is from_blob/1.
    ?assertEqual(pinned, tensor_blob:memory(tensor_blob:from_blob(Spec#{owner => {keep, T}}, #{}))),
    ?assertEqual(unpinned, tensor_blob:memory(tensor_blob:from_blob(Spec, #{owner => none}))),
    ?assertEqual(unpinned, tensor_blob:memory(tensor_blob:from_blob(B, #{owner => none}))),
    ?assertEqual(owned, tensor_blob:memory(T)).

memory_unpinned_test() ->
    T = matrix34(),
    B = tensor_blob:to_blob(T),
    U = tensor_blob:from_blob(B#{owner => none}),
    ?assertEqual(unpinned, tensor_blob:memory(U)),
    ?assertNot(tensor_blob:pinned(U)),
    ?assertEqual(unpinned, tensor_blob:memory(tensor_blob:narrow(U, 1, 0, 2))),
    ?assertEqual(unpinned, tensor_blob:memory(tensor_blob:from_blob(maps:remove(owner, B), #{owner => none}))),
    {V, none} = tensor_blob_door:blob_view(B, #{owner => none}),
    ?assertEqual(unpinned, tensor_blob:memory(V)),
    ?assertEqual(f32(lists:seq(1, 12)), tensor_blob:to_binary(U)),
    ?assertEqual(owned, tensor_blob:memory(T)).

%% Safe by default: a spec naming no owner (absent, undefined, nil) is
%% refused with a message that says how to pin (owner => Term) or copy, and
%% only then how to ask for an unpinned view (owner => none), in Erlang's
%% spelling.
no_owner_refused_test() ->
    T = matrix34(),
    B = tensor_blob:to_blob(T),
    Spec = maps:remove(owner, B),
    [begin
         Msg = badarg_message(Call),
         assert_names_field(<<"owner">>, [<<"owner => Term">>, <<"owner => none">>,
                                          <<"the caller answers">>], Msg),
         %% The safe ways out (pin, copy) first; owner => none last, with its cost.
         [Pin, Copy, None] = [element(1, binary:match(Msg, P))
                              || P <- [<<"owner => Term">>, <<"tensor_blob:from_binary/3">>, <<"owner => none">>]],
         ?assert(Pin < None andalso Copy < None),
         ?assertMatch({_, _}, binary:match(Msg, <<"after the memory is freed kills the VM">>))
     end
     || Call <- [fun() -> tensor_blob:from_blob(Spec) end,
                 fun() -> tensor_blob:from_blob(Spec, #{}) end,
                 fun() -> tensor_blob:from_blob(B#{owner => undefined}) end,
                 fun() -> tensor_blob:from_blob(B#{owner => nil}) end,
                 fun() -> tensor_blob:from_blob(B, #{owner => nil}) end,
                 fun() -> tensor_blob:from_blob(B, #{owner => undefined}) end,
                 fun() -> tensor_blob_door:blob_view(Spec, #{}) end]],
    %% blob_view/2 says what it pinned.
    {V, T} = tensor_blob_door:blob_view(B, #{}),
    ?assertEqual(owned, tensor_blob:memory(V)),
    {V2, {keep, T}} = tensor_blob_door:blob_view(Spec, #{owner => {keep, T}}),
    ?assertEqual(pinned, tensor_blob:memory(V2)).

%% A handle with an integer address is a CUDA IPC handle, never read as the
%% name of a CPU region: a build or machine without CUDA IPC says why (for
%% the Erlang API as for Elixir); one with it refuses a region's name as a
%% CUDA handle.
cuda_ipc_handle_refused_test() ->
    Handle = tensor_blob_ipc:export(tensor_blob_ipc:zeros({8}, int32)),
    ?assertEqual({8}, tensor_blob:shape(tensor_blob_ipc:open(Handle, int32, {8}))),
    case tensor_blob:cuda_info() of
        #{devices := N, libtorch := true} when N > 0 ->
            ?assertBadarg(<<"handle">>, [<<"CUDA IPC handle">>],
                          tensor_blob_ipc:open(Handle#{address => 0}, int32, {8})),
            ?assertBadarg(<<"address">>, [<<"does not exist here">>],
                          tensor_blob_ipc:open(#{kind => ipc, handle => <<0:512>>, address => 4096}, int32, {8}));
        _ ->
            ?assertTensorBlobError(<<"CUDA IPC">>, tensor_blob_ipc:open(Handle#{address => 0}, int32, {8})),
            ?assertTensorBlobError(<<"device 1">>,
                                   tensor_blob_ipc:open(#{kind => ipc, handle => <<"x">>, address => 1}, int32, {8}))
    end.

%% tensor_blob_ipc:export/1 decides how to share a tensor's memory by its device
%% type's row of tables/0 (the kind of memory its DLPack code says it is),
%% never by naming a device: the kinds it exports are rows of the table,
%% each row of those kinds gets its export, and a device type the table
%% gains without one (here a row added to the real table) is refused with
%% a badarg naming the device and what to do, not by a case_clause.
ipc_export_by_device_table_test() ->
    #{devices := Rows} = Tables = tensor_blob:tables(),
    Exporters = tensor_blob_share:exporters(),
    Codes = [C || #{dlpack := C} <- Rows],
    ?assertEqual([], [C || C <- maps:keys(Exporters), not lists:member(C, Codes)]),
    [?assertEqual(maps:get(C, Exporters), tensor_blob_share:exporter(device_term(Row), Tables))
     || #{dlpack := C} = Row <- Rows, maps:is_key(C, Exporters)],
    Exporting = [N || #{name := N, dlpack := C} <- Rows, maps:is_key(C, Exporters)],
    New = #{name => list_to_atom(lists:concat([N || #{name := N} <- Rows] ++ ["_new"])),
            dlpack => lists:max(Codes ++ maps:keys(Exporters)) + 1, indexed => true},
    Device = device_term(New),
    ?assertBadarg(<<"tensor">>, [iolist_to_binary(io_lib:format("~0tp", [T])) || T <- [Device, Exporting]]
                  ++ [<<"tensor_blob_ipc:export/1">>, <<"to_device(T, cpu)">>],
                  tensor_blob_share:exporter(Device, Tables#{devices := Rows ++ [New]})).

device_term(#{name := Name, indexed := true}) -> {Name, 0};
device_term(#{name := Name}) -> Name.

%% Streams (the array API's __dlpack__(stream=...)): CPU tensors take none,
%% and a refused import of a capsule still releases it.
dlpack_stream_test() ->
    Start = tensor_blob_test_util:settled_stats(),
    tensor_blob_test_util:run_isolated(
      fun() ->
              T = tensor_blob:from_binary(<<1,2,3,4>>, uint8, {4}),
              ?assertBadarg(<<"stream">>, [<<"a CPU tensor has no stream">>], tensor_blob:to_dlpack(T, #{stream => 1})),
              ?assertBadarg(<<"stream">>, [<<"expected an integer">>], tensor_blob:to_dlpack(T, #{stream => default})),
              %% A refused stream is refused before the capsule is taken: it
              %% stays armed, and imports afterwards.
              [begin
                   C = tensor_blob:to_dlpack(T, #{stream => undefined}),
                   ?assertEqual({badarg, iolist_to_binary(["stream: a kDLCPU tensor has no stream (the array API takes "
                                                           "none for CPU memory), got ", integer_to_list(S),
                                                           "; the capsule is still armed"])},
                                catch_error(fun() -> tensor_blob:from_dlpack(C, #{stream => S}) end)),
                   ?assertEqual(<<1,2,3,4>>, tensor_blob:to_binary(tensor_blob:from_dlpack(C)))
               end
               || S <- [0, 1, 2, -1]]
      end),
    ok = tensor_blob_test_util:wait_for_stats(Start).

%% Errors name terms the Erlang way; a struct where a tensor is expected says
%% what to do with it.
erlang_messages_test() ->
    Msg = badarg_message(fun() -> tensor_blob:to_blob({2, 0}) end),
    assert_names_field(<<"tensor">>, [<<"{2,0}">>], Msg),
    Nx = #{'__struct__' => 'Elixir.Nx.Tensor', shape => {2}, type => {f, 32}},
    [assert_names_field(<<"tensor">>, [<<"from_nx/2">>, <<"'Elixir.Nx.Tensor'">>],
                        badarg_message(F))
     || F <- [fun() -> tensor_blob:to_blob(Nx) end,
              fun() -> tensor_blob:shape(Nx) end,
              fun() -> tensor_blob:to_binary(Nx, #{copy => false}) end,
              fun() -> tensor_blob:to_dlpack(Nx) end]],
    assert_names_field(<<"dtype">>, [<<"<<\"float32\">>">>, <<"float32">>, <<"{f,32}">>],
                       badarg_message(fun() -> tensor_blob:zeros({2}, <<"float32">>) end)).

%% Errors raised inside the NIF show terms the Erlang way too (the NIF gives
%% the message as segments; this facade renders its terms with io_lib).
nif_messages_erlang_test() ->
    T = tensor_blob:from_binary(f32(lists:seq(1, 6)), float32, {2, 3}),
    B = tensor_blob:to_blob(T),
    [?assertEqual({badarg, Message}, catch_error(Call))
     || {Call, Message} <-
            [{fun() -> tensor_blob:zeros({2, a}, float32) end,
              <<"shape: dimension 1 must be a non-negative 64-bit integer, got a in {2,a}">>},
             {fun() -> tensor_blob:from_blob(B#{shape => {2, 1.5}}) end,
              <<"shape: dimension 1 must be a non-negative 64-bit integer, got 1.5 in {2,1.5}">>},
             {fun() -> tensor_blob:from_blob(B#{strides => [3, -1]}) end,
              <<"strides: stride 1 must be a non-negative 64-bit integer, got -1 in [3,-1]">>},
             {fun() -> tensor_blob:from_blob(B#{ptr => <<"0x10">>}) end,
              <<"ptr: expected a non-negative integer address, got <<\"0x10\">>">>},
             {fun() -> tensor_blob:from_blob(B#{device => {cuda, -1}}) end,
              <<"device: expected cpu or {cuda, Index}, got {cuda,-1}">>},
             {fun() -> tensor_blob:to_device(T, "cuda") end,
              <<"device: expected cpu or {cuda, Index}, got \"cuda\"">>},
             {fun() -> tensor_blob:from_binary([1, 2], uint8, {2}) end,
              <<"binary: expected a binary, got [1,2]">>},
             {fun() -> tensor_blob_ipc:open(<<"a/b">>, uint8, {1}) end,
              <<"handle: <<\"a/b\">> is no shared-memory name (an optional leading slash, then 1 to 253 bytes "
                "with no slash or NUL)">>},
             {fun() -> tensor_blob:to_binary(tensor_blob:transpose(T, 0, 1), #{copy => false}) end,
              <<"tensor: not contiguous (shape {3,2}, strides [1,3]); a binary shows row-major memory only, "
                "so copy it (#{copy => true})">>}]],
    %% A missing key: the field leads as text, the spec is an Erlang map.
    {badarg, Missing} = catch_error(fun() -> tensor_blob:from_blob(maps:remove(ptr, B)) end),
    assert_names_field(<<"ptr">>, [<<"missing key in blob spec #{">>, <<"dtype => float32">>], Missing).

%% A tensor's reference that outlived its tensor (read back from
%% term_to_binary's output after the process holding the tensor exited)
%% is no tensor, and the message says what it may be: a freed tensor's,
%% or a reference that never was one (the VM documents no way to tell).
freed_tensor_message_test() ->
    Self = self(),
    {Pid, Ref} = spawn_monitor(fun() -> Self ! {self(), term_to_binary(tensor_blob:zeros({2}, float32))} end),
    Ext = receive {Pid, E} -> E end,
    receive {'DOWN', Ref, process, Pid, _} -> ok end,
    Freed = binary_to_term(Ext),
    [begin
         {badarg, Message} = catch_error(fun() -> tensor_blob:shape(R) end),
         ?assertMatch({match, _}, re:run(Message, <<"^tensor: expected a tensor, got #Ref<[0-9.]+>, a reference "
                                                    "that names no live tensor: a tensor that was freed">>)),
         ?assertMatch({match, _}, re:run(Message, <<"Keep the tensor itself">>))
     end || R <- [Freed, make_ref()]].

%% A bool tensor's bytes are 0 or 1, as libtorch stores bools: a binary
%% with any other byte is refused, copied, viewed or written, and the
%% message names the first such byte.
bool_bytes_test() ->
    Good = <<0, 1, 1, 0>>,
    ?assertEqual(Good, tensor_blob:to_binary(tensor_blob:from_binary(Good, bool, {4}))),
    Bad = <<0, 1, 2, 0>>,
    Expected = <<"binary: byte 2 is 2, and each byte of a bool tensor must be 0 (false) or 1 (true), as libtorch "
                 "stores bools; map the values to 0 and 1 first">>,
    Big = <<(binary:copy(<<1>>, 1 bsl 20))/binary, 255>>,
    [?assertEqual({badarg, Expected}, catch_error(Call))
     || Call <- [fun() -> tensor_blob:from_binary(Bad, bool, {4}) end,
                 fun() -> tensor_blob:from_binary(Bad, bool, {4}, #{copy => false}) end,
                 fun() -> tensor_blob:from_binary(Bad, bool, {4}, #{copy => if_needed}) end,
                 fun() -> tensor_blob:write(tensor_blob:zeros({4}, bool), Bad) end]],
    %% Large ones too (scanned on a dirty scheduler).
    {badarg, BigMessage} = catch_error(fun() -> tensor_blob:from_binary(Big, bool, {1 bsl 20 + 1}) end),
    ?assertMatch({match, _}, re:run(BigMessage, <<"^binary: byte 1048576 is 255,">>)),
    %% A refused write leaves the tensor as it was; other dtypes take any byte.
    T = tensor_blob:from_binary(Good, bool, {4}),
    _ = catch_error(fun() -> tensor_blob:write(T, Bad) end),
    ?assertEqual(Good, tensor_blob:to_binary(T)),
    ?assertEqual(Bad, tensor_blob:to_binary(tensor_blob:from_binary(Bad, uint8, {4}))).

%% The NIF's error carries its cause in the stacktrace's error_info, as the
%% facade's own errors do: the shell prints the message, and the Elixir
%% facade renders the same segments (text, terms, code) its own way.
nif_error_info_test() ->
    {error, Reason, Stack} = try tensor_blob:zeros({2, a}, float32)
                             catch error:R:S -> {error, R, S}
                             end,
    ?assertMatch([{tensor_blob_nif, zeros, _, _} | _], Stack),
    ?assertEqual([<<"shape: dimension 1 must be a non-negative 64-bit integer, got ">>, {term, {whole, a}},
                  <<" in ">>, {term, {whole, {2, a}}}],
                 tensor_blob_error:error_message(Reason, Stack)),
    Shown = unicode:characters_to_binary(erl_error:format_exception(error, Reason, Stack)),
    %% The shell shows the message once, whole, in the error's reason.
    Message = <<"shape: dimension 1 must be a non-negative 64-bit integer, got a in {2,a}">>,
    assert_mentions(<<"{badarg,<<\"", Message/binary, "\">>}">>, Shown),
    ?assertEqual(1, length(binary:matches(Shown, Message))),
    %% A long one too: the shell would cut the reason short.
    {_, Long, LongStack} = try tensor_blob:from_blob(#{ptr => 8, shape => {2}, dtype => uint8})
                           catch error:R2:S2 -> {error, R2, S2}
                           end,
    {badarg, LongMessage} = Long,
    LongShown = unicode:characters_to_binary(erl_error:format_exception(error, Long, LongStack)),
    ?assertEqual(1, length(binary:matches(LongShown, LongMessage))).

%% A huge term is printed with a limit (io_lib's chars_limit): the message
%% stays short and ends in a well-formed elision, never cut mid-term.
nif_message_limit_test() ->
    {badarg, Msg} = catch_error(fun() -> tensor_blob:from_binary(lists:seq(1, 100000), uint8, {2}) end),
    ?assert(byte_size(Msg) < 1100),
    ?assertMatch(<<"binary: expected a binary, got [1,2,3,", _/binary>>, Msg),
    ?assertEqual(<<"|...]">>, binary:part(Msg, byte_size(Msg), -5)).

%% A term of any depth or width prints cut down, and in bounded time: a
%% million-deep list, deep tuples and maps, and a tree of shared subterms 40
%% wide and 40 deep (small in memory, 40^40 terms printed in full), in the
%% NIF's messages and in the facade's own. Printed whole, each took seconds
%% or forever: a hang fails here by eunit's timeout.
huge_terms_test_() ->
    {timeout, 300, fun huge_terms/0}.

huge_terms() ->
    Deep = nest(1000000, fun(A) -> [A] end, []),
    DeepTuple = nest(100000, fun(A) -> {A} end, {}),
    DeepMap = nest(100000, fun(A) -> #{k => A} end, #{}),
    Wide = nest(40, fun(A) -> lists:duplicate(40, A) end, 0),
    Calls = [fun(Term) -> tensor_blob:zeros(Term, float32) end,
             fun(Term) -> tensor_blob:zeros({1}, Term) end,
             fun(Term) -> tensor_blob:from_blob(Term, #{owner => none}) end,
             fun(Term) -> tensor_blob_ipc:open(Term, uint8, {1}) end,
             fun(Term) -> tensor_blob:to_blob(Term) end],
    [begin
         {badarg, Msg} = catch_error(fun() -> Call(Term) end),
         ?assert(byte_size(Msg) < 1500),
         ?assertNotEqual(nomatch, binary:match(Msg, <<"...">>))
     end
     || Term <- [Deep, DeepTuple, DeepMap, Wide], Call <- Calls],
    %% Cut at a depth of 20: the shape of the term stays readable.
    Levels = 20,
    ?assertEqual({badarg, iolist_to_binary(["shape: expected a tuple of non-negative integers, got ",
                                            lists:duplicate(Levels, $[), "...", lists:duplicate(Levels, $])])},
                 catch_error(fun() -> tensor_blob:zeros(Deep, float32) end)).

%% Strides of 0 hold any count of elements in a few bytes; a layout whose
%% elements' byte size overflows is refused, naming the shape (no accessor
%% could use it), and one with no elements works whatever its other
%% dimensions.
huge_layout_test() ->
    T = tensor_blob:zeros({4}, float32),
    #{ptr := Ptr} = tensor_blob:to_blob(T),
    [?assertEqual({badarg, iolist_to_binary(["shape: the byte size of the elements (their number times the element "
                                              "size) overflows 64 bits in ", io_lib:format("~0tp", [Shape])])},
                  catch_error(fun() -> tensor_blob:from_blob(#{ptr => Ptr, shape => Shape, dtype => Dtype,
                                                                strides => lists:duplicate(tuple_size(Shape), 0)},
                                                              #{owner => T}) end))
     || {Shape, Dtype} <- [{{1 bsl 62}, float32}, {{1 bsl 61}, float64}, {{1 bsl 60}, complex128}]],
    V = tensor_blob:from_blob(#{ptr => Ptr, shape => {1 bsl 62, 0}, strides => [0, 1], dtype => float32},
                              #{owner => T}),
    ?assertEqual({1 bsl 62, 0}, tensor_blob:shape(V)),
    ?assertEqual(float32, tensor_blob:dtype(V)),
    ?assertEqual(<<>>, tensor_blob:to_binary(V)),
    ?assertEqual(0, maps:get(byte_size, tensor_blob:to_blob(V))),
    ?assertEqual({0, 1 bsl 62}, tensor_blob:shape(tensor_blob:transpose(V, 0, 1))).

nest(0, _Wrap, Term) -> Term;
nest(N, Wrap, Term) -> nest(N - 1, Wrap, Wrap(Term)).

catch_error(Fun) ->
    try Fun() of
        Result -> erlang:error({expected_an_error, Result})
    catch
        error:Reason -> Reason
    end.

%% strides and device may be absent, undefined or nil: row-major, cpu.
optional_spec_keys_test() ->
    T = matrix34(),
    B = tensor_blob:to_blob(T),
    Full = maps:remove(owner, B),
    [begin
         V = tensor_blob:from_blob(Spec),
         ?assertEqual(Full, maps:remove(owner, tensor_blob:to_blob(V))),
         ?assertEqual(f32(lists:seq(1, 12)), tensor_blob:to_binary(V))
     end
     || Spec <- [maps:without([strides, device, element_size, byte_size], B),
                 B#{strides => undefined, device => nil},
                 B#{strides => nil, device => undefined},
                 #{ptr => maps:get(ptr, B), shape => {3, 4}, dtype => float32, owner => T}]],
    %% Unknown extra keys in a spec are ignored (a struct's __struct__, say).
    W = tensor_blob:from_blob(B#{'__struct__' => 'Elixir.TensorBlob.Blob', extra => 1}),
    ?assertEqual(f32(lists:seq(1, 12)), tensor_blob:to_binary(W)).

%%====================================================================
%% 5. Lifetime
%%====================================================================

%% A slice of a pinned view, sent away from the process that made the
%% tensor, keeps the memory alive after that process exits and after
%% garbage collection and allocation churn.
slice_outlives_its_maker_test_() ->
    {timeout, 60, fun slice_outlives_its_maker/0}.

slice_outlives_its_maker() ->
    Start = settled_stats(),
    Vs = [float(X * 1.25) || X <- lists:seq(0, 15)],
    Bytes = f32(Vs),
    Expected = binary:part(Bytes, 16, 32),
    check_slice(Bytes, Expected, Start),
    %% check_slice/3 has returned: the slice is garbage here; with it goes
    %% the original tensor's storage.
    wait_for_stats(Start).

check_slice(Bytes, Expected, Start) ->
    Self = self(),
    {Pid, Ref} = spawn_monitor(fun() ->
                                       T = tensor_blob:from_binary(Bytes, float32, {4, 4}),
                                       V = tensor_blob:from_blob(tensor_blob:to_blob(T)),
                                       Slice = tensor_blob:narrow(V, 0, 1, 2),
                                       Self ! {slice, self(), Slice}
                               end),
    Slice = receive {slice, Pid, S} -> S after 5000 -> erlang:error(no_slice) end,
    receive {'DOWN', Ref, process, Pid, normal} -> ok after 5000 -> erlang:error(no_exit) end,
    %% The maker's T and V are gone. Left: the slice, whose storage (the
    %% original tensor's, shared by V) keeps the memory alive.
    wait_for_stats(plus(Start, 1, 0)),
    erlang:garbage_collect(),
    churn(),
    erlang:garbage_collect(),
    ?assertEqual(owned, tensor_blob:memory(Slice)),
    ?assertEqual({2, 4}, tensor_blob:shape(Slice)),
    ?assertEqual(Expected, tensor_blob:to_binary(Slice)),
    %% Still the same memory: a view of the slice's blob sees the bytes too.
    ?assertEqual(Expected, tensor_blob:to_binary(tensor_blob:from_blob(tensor_blob:to_blob(Slice)))),
    ok.

%% Allocates and drops many tensors (of the freed tensor's size, to reuse its
%% memory if it was freed) and binaries.
churn() ->
    Junk = binary:copy(<<16#AB>>, 64),
    lists:foreach(fun(I) ->
                          T = tensor_blob:from_binary(Junk, float32, {4, 4}),
                          _ = tensor_blob:zeros({4, 4}, float32),
                          _ = tensor_blob:to_binary(T),
                          _ = binary:copy(<<I:32>>, 1000),
                          case I rem 100 of
                              0 -> erlang:garbage_collect();
                              _ -> ok
                          end
                  end, lists:seq(1, 3000)).

%% Every tensor and pin made is released once dropped and collected; the
%% counts do go up while they live.
stats_return_to_start_test_() ->
    {timeout, 60, fun stats_return_to_start/0}.

stats_return_to_start() ->
    Start = settled_stats(),
    run_isolated(
      fun() ->
              T = matrix34(),
              B = tensor_blob:to_blob(T),
              %% The blob as it is describes T: T comes back, no new tensor.
              ?assert(tensor_blob:from_blob(B) =:= T),
              V = tensor_blob:from_blob(B#{shape => {2, 4}}),
              N = tensor_blob:narrow(V, 0, 0, 2),
              Tr = tensor_blob:transpose(N, 0, 1),
              U = tensor_blob:from_blob(B#{owner => none}),
              P2 = tensor_blob:from_blob(maps:remove(owner, B), #{owner => {T, <<"x">>}}),
              %% T, V, N, Tr, U, P2: six tensors; P2 pins, V shares T's
              %% storage, U pins nothing.
              ?assertEqual(plus(Start, 6, 1), tensor_blob:stats()),
              %% Refused views release their pin at once.
              ?assertBadarg(<<"ptr">>, [<<"outside">>], tensor_blob:from_blob(B#{shape => {4, 4}})),
              case tensor_blob:cuda_info() of
                  #{libtorch := false} ->
                      ?assertTensorBlobError(<<"CUDA">>, tensor_blob:from_blob(B#{device => {cuda, 0}}));
                  #{libtorch := true} ->
                      ?assertBadarg(<<"device">>, [<<"owner's memory is on cpu">>],
                                    tensor_blob:from_blob(B#{device => {cuda, 0}}))
              end,
              ?assertEqual(plus(Start, 6, 1), tensor_blob:stats()),
              ?assertEqual(f32(lists:seq(1, 8)), tensor_blob:to_binary(N)),
              %% Keep every tensor live up to here, so no collection above
              %% could have lowered the counts.
              _ = [tensor_blob:to_binary(X) || X <- [T, V, N, Tr, U, P2]]
      end),
    wait_for_stats(Start).

%% A binary owner's extent is known: a pointer outside it is refused.
binary_owner_outside_test() ->
    Start = settled_stats(),
    run_isolated(
      fun() ->
              Other = tensor_blob:zeros({16}, uint8),
              P = ptr(Other),
              Spec = #{ptr => P, shape => {16}, dtype => uint8},
              Big = binary:copy(<<7>>, 4096),   % a refc binary
              Small = <<1, 2, 3, 4>>,          % a heap binary
              ?assertBadarg(<<"ptr">>, [<<"outside">>], tensor_blob:from_blob(Spec, #{owner => Big})),
              ?assertBadarg(<<"ptr">>, [<<"outside">>], tensor_blob:from_blob(Spec, #{owner => Small})),
              ?assertBadarg(<<"ptr">>, [<<"outside">>], tensor_blob:from_blob(Spec#{owner => Big})),
              %% The refused pins are gone: only Other is live.
              ?assertEqual(plus(Start, 1, 0), tensor_blob:stats()),
              ?assertEqual(<<0:128>>, tensor_blob:to_binary(Other))
      end),
    wait_for_stats(Start).

%% A tensor owner's extent is its storage: nothing before or after it.
tensor_owner_outside_test() ->
    Start = settled_stats(),
    run_isolated(
      fun() ->
              T = tensor_blob:from_binary(f32([1, 2, 3, 4]), float32, {2, 2}),
              B = tensor_blob:to_blob(T),
              P = maps:get(ptr, B),
              Spec = maps:remove(strides, B),
              ?assertBadarg(<<"ptr">>, [<<"outside">>], tensor_blob:from_blob(Spec#{shape => {3, 3}})),
              ?assertBadarg(<<"ptr">>, [<<"outside">>], tensor_blob:from_blob(Spec#{shape => {5}})),
              ?assertBadarg(<<"ptr">>, [<<"outside">>], tensor_blob:from_blob(Spec#{ptr => P - 4})),
              ?assertBadarg(<<"ptr">>, [<<"outside">>], tensor_blob:from_blob(Spec#{ptr => P + 4})),
              ?assertBadarg(<<"ptr">>, [<<"outside">>], tensor_blob:from_blob(B#{strides => [4, 1]})),
              ?assertBadarg(<<"ptr">>, [<<"outside">>],
                            tensor_blob:from_blob(maps:remove(owner, Spec#{shape => {8}}),
                                                  #{owner => T})),
              %% A narrow view's storage is the whole tensor's: its blob may
              %% be widened back to the full tensor, not beyond.
              N = tensor_blob:narrow(T, 0, 1, 1),
              NB = tensor_blob:to_blob(N),
              W = tensor_blob:from_blob(NB#{ptr => P, shape => {2, 2}, strides => [2, 1]}),
              ?assertEqual(f32([1, 2, 3, 4]), tensor_blob:to_binary(W)),
              ?assertBadarg(<<"ptr">>, [<<"outside">>], tensor_blob:from_blob(NB#{shape => {2, 2}, strides => [2, 1]})),
              %% Exactly the extent is fine, as is the last element alone.
              Last = tensor_blob:from_blob(Spec#{ptr => P + 12, shape => {1}}),
              ?assertEqual(f32([4]), tensor_blob:to_binary(Last)),
              %% T, N, W and Last; W and Last share T's storage. No refused
              %% call left a pin.
              ?assertEqual(plus(Start, 4, 0), tensor_blob:stats()),
              _ = [tensor_blob:to_binary(X) || X <- [T, N, W, Last]]
      end),
    wait_for_stats(Start).

%%====================================================================
%% 6. Concurrency
%%====================================================================

concurrent_views_test_() ->
    {timeout, 120, fun concurrent_views/0}.

concurrent_views() ->
    Start = settled_stats(),
    NProcs = 32,
    Iterations = 500,
    Len = 1000,
    run_isolated(
      fun() ->
              T = tensor_blob:from_binary(i32(lists:seq(0, Len - 1)), int32, {Len}),
              Workers = [spawn_monitor(fun() -> view_worker(T, Id, Iterations, Len) end)
                         || Id <- lists:seq(1, NProcs)],
              [receive
                   {'DOWN', Ref, process, Pid, Reason} -> ?assertEqual({Pid, done}, {Pid, Reason})
               after 100000 -> erlang:error({worker_timeout, Pid})
               end || {Pid, Ref} <- Workers],
              ?assertEqual(i32(lists:seq(0, Len - 1)), tensor_blob:to_binary(T))
      end),
    wait_for_stats(Start).

view_worker(T, Id, Iterations, Len) ->
    lists:foreach(
      fun(K) ->
              I = (Id * 7919 + K * 31) rem Len,
              V = tensor_blob:from_blob(tensor_blob:to_blob(T)),
              owned = tensor_blob:memory(V),
              Got = tensor_blob:to_binary(tensor_blob:narrow(V, 0, I, 1)),
              case i32([I]) of
                  Got -> ok;
                  Want -> exit({wrong_element, I, Want, Got})
              end
      end, lists:seq(1, Iterations)),
    exit(done).

%%====================================================================
%% 7. Bad input
%%====================================================================

non_map_spec_test() ->
    ?assertBadarg(<<"spec">>, tensor_blob:from_blob(not_a_map)),
    ?assertBadarg(<<"spec">>, tensor_blob:from_blob([{ptr, 8}, {shape, {1}}, {dtype, uint8}])),
    ?assertBadarg(<<"spec">>, tensor_blob:from_blob({1, 2}, #{owner => x})).

missing_keys_test() ->
    T = matrix34(),
    B = tensor_blob:to_blob(T),
    [?assertBadarg(atom_to_binary(K, utf8), tensor_blob:from_blob(maps:remove(K, B)))
     || K <- [ptr, shape, dtype]],
    [?assertBadarg(atom_to_binary(K, utf8),
                   tensor_blob:from_blob((maps:remove(K, B))#{owner => none}))
     || K <- [ptr, shape, dtype]],
    ?assertBadarg(<<"ptr">>, tensor_blob:from_blob(#{owner => none})),
    %% A spec with no owner at all is refused before anything else.
    ?assertBadarg(<<"owner">>, tensor_blob:from_blob(#{})).

bad_ptr_test() ->
    Spec = #{shape => {2}, dtype => float32, owner => none},
    ?assertBadarg(<<"ptr">>, tensor_blob:from_blob(Spec#{ptr => "0x1000"})),
    ?assertBadarg(<<"ptr">>, tensor_blob:from_blob(Spec#{ptr => 4096.0})),
    ?assertBadarg(<<"ptr">>, tensor_blob:from_blob(Spec#{ptr => nil})),
    ?assertBadarg(<<"ptr">>, tensor_blob:from_blob(Spec#{ptr => -8})),
    ?assertBadarg(<<"ptr">>, tensor_blob:from_blob(Spec#{ptr => 1 bsl 64})).

null_pointer_test() ->
    ?assertBadarg(<<"ptr">>, [<<"null">>], tensor_blob:from_blob(#{owner => none, ptr => 0, shape => {2}, dtype => float32})),
    ?assertBadarg(<<"ptr">>, [<<"null">>], tensor_blob:from_blob(#{owner => none, ptr => 0, shape => {}, dtype => int64})),
    %% No elements: a null pointer is fine.
    E = tensor_blob:from_blob(#{owner => none, ptr => 0, shape => {0}, dtype => float32}),
    ?assertEqual(unpinned, tensor_blob:memory(E)),
    ?assertEqual({0}, tensor_blob:shape(E)),
    ?assertEqual(<<>>, tensor_blob:to_binary(E)),
    ?assertMatch(#{ptr := 0, byte_size := 0}, tensor_blob:to_blob(E)).

misaligned_pointer_test() ->
    T = matrix34(),
    P = ptr(T),
    ?assertBadarg(<<"ptr">>, [<<"align">>], tensor_blob:from_blob(#{owner => none, ptr => P + 1, shape => {2}, dtype => float32})),
    ?assertBadarg(<<"ptr">>, [<<"align">>], tensor_blob:from_blob(#{owner => none, ptr => P + 2, shape => {2}, dtype => float32})),
    ?assertBadarg(<<"ptr">>, [<<"align">>], tensor_blob:from_blob(#{owner => none, ptr => P + 4, shape => {2}, dtype => float64})),
    %% Aligned, it is fine; and a 1-byte dtype is aligned anywhere.
    ?assertEqual(f32([2, 3]), tensor_blob:to_binary(
                               tensor_blob:from_blob(#{owner => none, ptr => P + 4, shape => {2}, dtype => float32}))),
    ?assertEqual(binary:part(f32([1, 2]), 1, 3),
                 tensor_blob:to_binary(tensor_blob:from_blob(#{owner => none, ptr => P + 1, shape => {3}, dtype => uint8}))),
    ?assertEqual(f32(lists:seq(1, 12)), tensor_blob:to_binary(T)).

bad_shape_test() ->
    T = matrix34(),
    P = ptr(T),
    Spec = #{ptr => P, dtype => uint8, owner => none},
    ?assertBadarg(<<"shape">>, tensor_blob:from_blob(Spec#{shape => [2, 3]})),
    ?assertBadarg(<<"shape">>, tensor_blob:from_blob(Spec#{shape => 6})),
    ?assertBadarg(<<"shape">>, tensor_blob:from_blob(Spec#{shape => {2, -1}})),
    ?assertBadarg(<<"shape">>, tensor_blob:from_blob(Spec#{shape => {2, 1.5}})),
    ?assertBadarg(<<"shape">>, tensor_blob:from_blob(Spec#{shape => {a}})),
    ?assertBadarg(<<"shape">>, tensor_blob:from_blob(Spec#{shape => {1 bsl 64}})),
    ?assertBadarg(<<"shape">>, tensor_blob:from_blob(Spec#{shape => {16#7fffffffffffffff, 3}})),
    ?assertBadarg(<<"shape">>, tensor_blob:from_blob(Spec#{shape => {16#7fffffffffffffff, 3},
                                                          strides => [3, 1]})),
    ?assertBadarg(<<"shape">>, tensor_blob:from_blob(Spec#{shape => list_to_tuple(lists:duplicate(65, 1))})),
    %% 64 dimensions is the limit, and allowed.
    D64 = list_to_tuple(lists:duplicate(64, 1)),
    V64 = tensor_blob:from_blob(Spec#{shape => D64}),
    ?assertEqual(D64, tensor_blob:shape(V64)),
    ?assertEqual(<<1.0:32/float-native>>, tensor_blob:to_binary(tensor_blob:from_blob(
                                                                   Spec#{shape => D64, dtype => float32}))),
    ?assertEqual(f32(lists:seq(1, 12)), tensor_blob:to_binary(T)).

bad_strides_test() ->
    T = matrix34(),
    Spec = #{ptr => ptr(T), dtype => float32, shape => {3, 4}, owner => none},
    ?assertBadarg(<<"strides">>, tensor_blob:from_blob(Spec#{strides => [4]})),
    ?assertBadarg(<<"strides">>, tensor_blob:from_blob(Spec#{strides => [4, 1, 1]})),
    ?assertBadarg(<<"strides">>, tensor_blob:from_blob(Spec#{strides => {4, 1}})),
    ?assertBadarg(<<"strides">>, tensor_blob:from_blob(Spec#{strides => 4})),
    ?assertBadarg(<<"strides">>, tensor_blob:from_blob(Spec#{strides => [4, -1]})),
    ?assertBadarg(<<"strides">>, tensor_blob:from_blob(Spec#{strides => [4, a]})),
    ?assertBadarg(<<"strides">>, tensor_blob:from_blob(Spec#{strides => [1 bsl 64, 1]})),
    %% The farthest element's byte offset overflows 64 bits.
    ?assertBadarg(<<"strides">>, tensor_blob:from_blob(Spec#{strides => [16#7fffffffffffffff, 1]})),
    ?assertBadarg(<<"strides">>, tensor_blob:from_blob(Spec#{strides => [16#3fffffffffffffff, 1]})),
    ?assertBadarg(<<"strides">>, tensor_blob:from_blob(#{owner => none, ptr => 8, dtype => float32, shape => {2},
                                                        strides => [16#2000000000000000]})),
    ?assertEqual(f32(lists:seq(1, 12)), tensor_blob:to_binary(T)).

bad_dtype_test() ->
    T = matrix34(),
    Spec = #{ptr => ptr(T), shape => {2}, owner => none},
    [?assertBadarg(<<"dtype">>, tensor_blob:from_blob(Spec#{dtype => D}))
     || D <- [float33, foo, {u, 4}, {q, 8}, {s, 128}, "float32", <<"float32">>, 32, {f, 32, 1}]],
    ?assertBadarg(<<"dtype">>, tensor_blob:zeros({2}, foo)),
    ?assertBadarg(<<"dtype">>, tensor_blob:from_binary(<<0:64>>, {u, 4}, {2})),
    ?assertEqual(owned, tensor_blob:memory(T)).

bad_device_test() ->
    T = matrix34(),
    B = tensor_blob:to_blob(T),
    [?assertBadarg(<<"device">>, tensor_blob:from_blob(B#{device => D}))
     || D <- [{gpu, 0}, "cpu", gpu, {cuda, -1}, {cuda, a}, {cuda}, {cuda, 0, 1}]],
    ?assertEqual(owned, tensor_blob:memory(T)).

%% CUDA memory is refused in this build, never viewed as CPU memory.
%% Host memory declared as CUDA memory is never viewed: a libtorch without
%% CUDA cannot (a tensor_blob error); one with CUDA refuses the pointer (the
%% owner's extent, or the CUDA runtime, says it is host memory: badarg).
cuda_spec_test() ->
    T = matrix34(),
    B = tensor_blob:to_blob(T),
    Spec = B#{owner => none},
    Refused = fun(F) ->
                      case tensor_blob:cuda_info() of
                          #{libtorch := false} -> ?assertTensorBlobError(<<"CUDA">>, F());
                          #{libtorch := true} -> ?assertError({badarg, _}, F())
                      end
              end,
    Refused(fun() -> tensor_blob:from_blob(B#{device => {cuda, 0}}) end),
    Refused(fun() -> tensor_blob:from_blob(Spec#{device => {cuda, 0}}) end),
    Refused(fun() -> tensor_blob:from_blob(Spec#{device => {cuda, 1}}, #{owner => keep_me}) end),
    ?assertEqual(owned, tensor_blob:memory(T)).

from_binary_bad_input_test() ->
    Bytes = f32([1, 2, 3, 4, 5, 6]),
    ?assertBadarg(<<"binary">>, tensor_blob:from_binary(<<Bytes/binary, 0>>, float32, {2, 3})),
    ?assertBadarg(<<"binary">>, tensor_blob:from_binary(binary:part(Bytes, 0, 20), float32, {2, 3})),
    ?assertBadarg(<<"binary">>, tensor_blob:from_binary(Bytes, float32, {2, 2})),
    ?assertBadarg(<<"binary">>, tensor_blob:from_binary(Bytes, float64, {2, 3})),
    ?assertBadarg(<<"binary">>, tensor_blob:from_binary(<<1:4>>, uint8, {1})),
    ?assertBadarg(<<"binary">>, tensor_blob:from_binary([1, 2, 3], uint8, {3})),
    ?assertBadarg(<<"binary">>, tensor_blob:from_binary(not_binary, uint8, {0})),
    ?assertBadarg(<<"shape">>, tensor_blob:from_binary(Bytes, float32, [2, 3])),
    ?assertBadarg(<<"shape">>, tensor_blob:from_binary(Bytes, float32, {-2, -3})),
    ?assertBadarg(<<"shape">>, tensor_blob:from_binary(Bytes, float32, {16#7fffffffffffffff, 3})).

zeros_bad_shape_test() ->
    ?assertBadarg(<<"shape">>, tensor_blob:zeros([2, 3], float32)),
    ?assertBadarg(<<"shape">>, tensor_blob:zeros(3, float32)),
    ?assertBadarg(<<"shape">>, tensor_blob:zeros({2, -3}, float32)),
    ?assertBadarg(<<"shape">>, tensor_blob:zeros({2, x}, float32)),
    ?assertBadarg(<<"shape">>, tensor_blob:zeros({16#7fffffffffffffff, 3}, float32)),
    ?assertBadarg(<<"shape">>, tensor_blob:zeros(list_to_tuple(lists:duplicate(65, 1)), uint8)),
    %% The element count fits, the bytes do not: refused before allocating.
    ?assertBadarg(<<"shape">>, tensor_blob:zeros({16#7fffffffffffffff}, float64)).

%% An allocation libtorch cannot make is not the caller's fault and must
%% not crash the VM.
zeros_out_of_memory_test() ->
    ?assertTensorBlobError(<<"zeros">>, tensor_blob:zeros({1 bsl 59}, int64)).

narrow_bad_input_test() ->
    T = matrix34(),
    ?assertBadarg(<<"dim">>, tensor_blob:narrow(T, 2, 0, 1)),
    ?assertBadarg(<<"dim">>, tensor_blob:narrow(T, -1, 0, 1)),
    ?assertBadarg(<<"dim">>, tensor_blob:narrow(T, a, 0, 1)),
    ?assertBadarg(<<"start">>, tensor_blob:narrow(T, 0, 4, 0)),
    ?assertBadarg(<<"start">>, tensor_blob:narrow(T, 0, -1, 1)),
    ?assertBadarg(<<"start">>, tensor_blob:narrow(T, 1, 1.0, 1)),
    ?assertBadarg(<<"length">>, tensor_blob:narrow(T, 0, 1, 3)),
    ?assertBadarg(<<"length">>, tensor_blob:narrow(T, 1, 0, 5)),
    ?assertBadarg(<<"length">>, tensor_blob:narrow(T, 1, 2, -1)),
    ?assertBadarg(<<"length">>, tensor_blob:narrow(T, 1, 2, 1 bsl 64)),
    ?assertBadarg(<<"dim">>, tensor_blob:narrow(tensor_blob:zeros({}, int64), 0, 0, 1)),
    %% The edges are allowed.
    ?assertEqual({0, 4}, tensor_blob:shape(tensor_blob:narrow(T, 0, 3, 0))),
    ?assertEqual(f32([4, 8, 12]), tensor_blob:to_binary(tensor_blob:narrow(T, 1, 3, 1))).

transpose_bad_input_test() ->
    T = matrix34(),
    ?assertBadarg(<<"dim0">>, tensor_blob:transpose(T, 2, 0)),
    ?assertBadarg(<<"dim0">>, tensor_blob:transpose(T, -1, 0)),
    ?assertBadarg(<<"dim1">>, tensor_blob:transpose(T, 0, 2)),
    ?assertBadarg(<<"dim1">>, tensor_blob:transpose(T, 0, x)),
    ?assertBadarg(<<"dim0">>, tensor_blob:transpose(tensor_blob:zeros({}, int64), 0, 0)),
    %% Swapping a dimension with itself is the identity.
    ?assertEqual(f32(lists:seq(1, 12)), tensor_blob:to_binary(tensor_blob:transpose(T, 1, 1))).

write_bad_input_test() ->
    T = matrix34(),
    ?assertBadarg(<<"binary">>, tensor_blob:write(T, f32(lists:seq(1, 11)))),
    ?assertBadarg(<<"binary">>, tensor_blob:write(T, <<(f32(lists:seq(1, 12)))/binary, 0>>)),
    ?assertBadarg(<<"binary">>, tensor_blob:write(T, <<>>)),
    ?assertBadarg(<<"binary">>, tensor_blob:write(T, lists:seq(1, 48))),
    ?assertBadarg(<<"binary">>, tensor_blob:write(tensor_blob:narrow(T, 0, 0, 1), f32(lists:seq(1, 12)))),
    %% A refused write leaves the tensor as it was.
    ?assertEqual(f32(lists:seq(1, 12)), tensor_blob:to_binary(T)).

%% describe/1 answers what the one-field functions answer, for each kind
%% of memory and a device of its own.
describe_test() ->
    T = tensor_blob:from_binary(<<1, 2, 3, 4, 5, 6>>, uint8, {2, 3}),
    Blob = tensor_blob:to_blob(T),
    Pinned = tensor_blob:from_blob(Blob#{shape => {6}, strides => [1]}, #{owner => {keep, Blob}}),
    Unpinned = tensor_blob:from_blob(Blob#{owner => none}),
    Binary = tensor_blob:from_binary(binary:copy(<<7>>, 128), int8, {2, 64}, #{copy => false}),
    ?assertEqual(#{dtype => uint8, shape => {2, 3}, device => cpu, memory => owned},
                 tensor_blob:describe(T)),
    ?assertEqual(#{dtype => uint8, shape => {6}, device => cpu, memory => pinned},
                 tensor_blob:describe(Pinned)),
    ?assertEqual(unpinned, maps:get(memory, tensor_blob:describe(Unpinned))),
    ?assertEqual(#{dtype => int8, shape => {2, 64}, device => cpu, memory => binary},
                 tensor_blob:describe(Binary)),
    [?assertEqual(#{dtype => tensor_blob:dtype(X), shape => tensor_blob:shape(X),
                    device => tensor_blob:device(X), memory => tensor_blob:memory(X)},
                  tensor_blob:describe(X))
     || X <- [T, Pinned, Unpinned, Binary, tensor_blob:transpose(T, 0, 1)]].

%% Every function taking a tensor refuses anything else.
not_a_tensor_test_() ->
    Calls = [{to_blob, fun(X) -> tensor_blob:to_blob(X) end},
             {to_blob_2, fun(X) -> tensor_blob:to_blob(X, #{}) end},
             {to_binary, fun(X) -> tensor_blob:to_binary(X) end},
             {write, fun(X) -> tensor_blob:write(X, <<>>) end},
             {narrow, fun(X) -> tensor_blob:narrow(X, 0, 0, 0) end},
             {transpose, fun(X) -> tensor_blob:transpose(X, 0, 0) end},
             {shape, fun(X) -> tensor_blob:shape(X) end},
             {strides, fun(X) -> tensor_blob:strides(X) end},
             {dtype, fun(X) -> tensor_blob:dtype(X) end},
             {device, fun(X) -> tensor_blob:device(X) end},
             {memory, fun(X) -> tensor_blob:memory(X) end},
             {pinned, fun(X) -> tensor_blob:pinned(X) end},
             {describe, fun(X) -> tensor_blob:describe(X) end}],
    [{atom_to_list(Name),
      fun() ->
              NotTensors = [an_atom, self(), make_ref(), 42, <<"bin">>, #{ref => make_ref()},
                            tensor_blob:to_blob(tensor_blob:zeros({1}, uint8))],
              [?assertBadarg(<<"tensor">>, Call(X)) || X <- NotTensors]
      end} || {Name, Call} <- Calls].

options_test() ->
    T = matrix34(),
    B = tensor_blob:to_blob(T),
    ?assertBadarg(<<"options">>, tensor_blob:to_blob(T, [{owner, x}])),
    ?assertBadarg(<<"options">>, tensor_blob:to_blob(T, owner)),
    ?assertBadarg(<<"bogus">>, tensor_blob:to_blob(T, #{bogus => 1})),
    ?assertBadarg(<<"bogus">>, [<<"unknown option">>], tensor_blob:to_blob(T, #{owner => x, bogus => 1})),
    ?assertBadarg(<<"options">>, tensor_blob:from_blob(B, [{owner, x}])),
    ?assertBadarg(<<"options">>, tensor_blob:from_blob(B, undefined)),
    ?assertBadarg(<<"bogus">>, tensor_blob:from_blob(B, #{bogus => 1})),
    ?assertBadarg(<<"bogus">>, [<<"unknown option">>], tensor_blob:from_blob(B, #{owner => T, bogus => 1})),
    ?assertBadarg(<<"struct">>, tensor_blob:from_blob(B, #{struct => x})).

%%====================================================================
%% 8. Zero-size and 0-d tensors
%%====================================================================

zero_size_test() ->
    Z = tensor_blob:zeros({0, 3}, float32),
    ?assertEqual(<<>>, tensor_blob:to_binary(Z)),
    B = tensor_blob:to_blob(Z),
    ?assertMatch(#{shape := {0, 3}, dtype := float32, element_size := 4, byte_size := 0,
                   device := cpu}, B),
    V = tensor_blob:from_blob(B),
    ?assertEqual(maps:remove(owner, B), maps:remove(owner, tensor_blob:to_blob(V))),
    ?assertEqual({0, 3}, tensor_blob:shape(V)),
    ?assertEqual(float32, tensor_blob:dtype(V)),
    ?assertEqual(<<>>, tensor_blob:to_binary(V)),
    ?assertEqual(V, tensor_blob:write(V, <<>>)),
    E = tensor_blob:from_binary(<<>>, int16, {3, 0}),
    ?assertEqual({3, 0}, tensor_blob:shape(E)),
    ?assertEqual(<<>>, tensor_blob:to_binary(tensor_blob:transpose(E, 0, 1))).

scalar_test() ->
    S = tensor_blob:zeros({}, int64),
    ?assertEqual({}, tensor_blob:shape(S)),
    ?assertEqual([], tensor_blob:strides(S)),
    ?assertEqual(<<0:64>>, tensor_blob:to_binary(S)),
    ?assertMatch(#{shape := {}, strides := [], dtype := int64, element_size := 8, byte_size := 8},
                 tensor_blob:to_blob(S)),
    Bytes = <<-42:64/signed-native>>,
    T = tensor_blob:from_binary(Bytes, int64, {}),
    V = tensor_blob:from_blob(tensor_blob:to_blob(T)),
    ?assertEqual({}, tensor_blob:shape(V)),
    ?assertEqual(Bytes, tensor_blob:to_binary(V)),
    _ = tensor_blob:write(V, <<7:64/signed-native>>),
    ?assertEqual(<<7:64/signed-native>>, tensor_blob:to_binary(T)).

%%====================================================================
%% Misc
%%====================================================================

torch_version_test() ->
    V = tensor_blob:torch_version(),
    ?assert(is_binary(V)),
    ?assertMatch({match, _}, re:run(V, "^[0-9]+\\.[0-9]+")).
