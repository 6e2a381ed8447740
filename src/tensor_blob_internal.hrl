%% What the modules of the Erlang API share: how a NIF is called and what
%% a tensor term is. Internal: not for users' code.

%% A NIF call. The NIF raises error({Kind, #{reason => Reason, argument =>
%% Argument, message => Segments}}) (c_src/beam/tb_raise.h): it never renders
%% a term, for it cannot know who is calling. Here that becomes error({Kind,
%% Message}), rendered the Erlang way, with reason, argument and segments
%% kept in the stacktrace's error_info, from which the Elixir facade renders
%% the Elixir way (see tensor_blob_error). Nothing is done on success.
-define(NIF(Call),
        try Call
        catch error:{Kind__, #{message := _} = Cause__}:Stack__ -> tensor_blob_error:nif_error(Kind__, Cause__, Stack__)
        end).

%% A NIF call whose badarg is re-raised as "unknown dtype" (listing the
%% valid ones) when Dtype is not a dtype: the one dtype table, in C, decides.
-define(DTYPE_CHECKED(Dtype, Call),
        try Call
        catch error:{Kind__, #{message := _} = Cause__}:Stack__ ->
                tensor_blob_error:dtype_error(Dtype, Kind__, Cause__, Stack__)
        end).

%% What to_dlpack and node_pack accept as a tensor, as the NIF and the C
%% bridge read one (tb_tensor_get): the reference, the Elixir struct, or
%% the BlobView struct around the Elixir struct (what from_blob returns).
-define(IS_TENSOR_STRUCT(T), (is_map(T) andalso is_map_key('__struct__', T) andalso
                              map_get('__struct__', T) =:= 'Elixir.TensorBlob.Tensor')).
-define(IS_TENSOR_TERM(T),
        (is_reference(T) orelse ?IS_TENSOR_STRUCT(T) orelse
         (is_map(T) andalso is_map_key('__struct__', T) andalso map_get('__struct__', T) =:= 'Elixir.TensorBlob.BlobView'
          andalso is_map_key(tensor, T) andalso ?IS_TENSOR_STRUCT(map_get(tensor, T))))).

%% A function of the API (of the module that includes this) that copies or
%% transfers: its telemetry spans name it (unless an Elixir function named
%% itself first), and an error raised in Body ends them with an exception
%% event (tensor_blob_telemetry:as/2).
-define(SPANS(Name, Arity, Body), tensor_blob_telemetry:as({?MODULE, Name, Arity}, fun() -> Body end)).
