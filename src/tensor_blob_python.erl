%% @doc The Erlang API of the Python embedded in this VM (Pythonx), which
%% the Elixir door TensorBlob.Python calls: the interpreter's C API bound
%% by name, and the slots a managed tensor crosses one evaluation in.
-module(tensor_blob_python).

-export([python_bind/1, python_slot_export/2, python_slot_receive/0, python_slot_close/1, python_slot_close/2,
         python_slot_export_many/2, python_slot_export_tree/2, python_slot_receive_many/0]).

-include("tensor_blob_internal.hrl").

%% @doc Binds the C API of the Python embedded in this VM (Pythonx), once per VM: its functions
%% are looked up by name in Library, the path of the libpython loaded in this OS process (as the
%% interpreter tells it); nothing is loaded, and no address is taken from a term. Answers the
%% addresses of the library's builtins' PyMethodDefs (capsule_from_slot, take_capsule, and DLPack
%% 1.3's C exchange API's take_api and object_from_api), for
%% the library's Python module (priv/python/tensor_blob_pythonx.py) to make them. A path that
%% is not loaded, or not a Python's C API, raises badarg (reason bad_value, argument library).
-spec python_bind(binary()) -> #{atom() => non_neg_integer()}.
python_bind(Library) -> ?NIF(tensor_blob_nif:python_capsule_abi(Library)).

%% @doc A managed tensor crosses one Python evaluation in a numbered slot, which the evaluated
%% code names (TensorBlob.Python): the tensor exported into one (versioned or legacy, checked
%% as to_dlpack/2 checks), or an empty one for Python to fill (python_slot_receive/0). Closing
%% gives back what Python put there, imported (its deleter off the schedulers; refused, the
%% deleter is called all the same), and releases what it left. A slot that is never closed is
%% closed when it is collected. 4096 slots at most are open at once: one more raises
%% (reason no_memory).
%% Version writable is versioned for a consumer with no read-only tensors (PyTorch through DLPack
%% 1.3's C exchange API): a read-only tensor is refused as a legacy export refuses it.
-spec python_slot_export(tensor_blob:tensor(), tensor_blob:dlpack_version() | writable) ->
          {non_neg_integer(), reference()}.
python_slot_export(T, Version) -> ?NIF(tensor_blob_nif:python_slot_export(T, Version)).

%% @doc An empty slot for Python to fill (python_slot_export/2).
-spec python_slot_receive() -> {non_neg_integer(), reference()}.
python_slot_receive() -> ?NIF(tensor_blob_nif:python_slot_receive()).

%% @doc Closes a slot (python_slot_export/2): ok for a slot to Python; for a slot from Python,
%% the tensor over what Python put there, or undefined when it put nothing.
-spec python_slot_close(reference()) -> ok | tensor_blob:tensor() | [tensor_blob:tensor()] | map() | undefined.
python_slot_close(Slot) -> python_slot_close(Slot, none).

%% @doc Closes a slot as python_slot_close/1 does, each tensor it gives back wrapped in the
%% struct of Module, an Elixir module's name (#{'__struct__' => Module, ref => Tensor}), or left
%% bare for none. Anything but an atom raises badarg (reason bad_value, argument module).
-spec python_slot_close(reference(), module() | none) ->
          ok | tensor_blob:tensor() | map() | [tensor_blob:tensor() | map()] | undefined.
python_slot_close(Slot, Module) -> ?NIF(tensor_blob_nif:python_slot_close(Slot, Module)).

%% @doc Many tensors across one evaluation in one slot (a batch): each exported as
%% python_slot_export/2 exports it (the first refusal raised, the others released). A batch of
%% more than 64 is made on a dirty scheduler.
-spec python_slot_export_many([tensor_blob:tensor()], tensor_blob:dlpack_version() | writable) ->
          {non_neg_integer(), reference()}.
python_slot_export_many(Ts, Version) -> ?NIF(tensor_blob_nif:python_slot_export_many(Ts, Version)).

%% @doc A container of tensors (maps and lists, nested) in one batch, with its description for
%% Python's tree builtin (priv/python/tensor_blob_pythonx.py): the tensors, in the order the
%% description names them, exported as python_slot_export_many/2 exports them. A map's keys are
%% binaries, atoms (not nil, true or false; ASCII names) and 64-bit integers; a tensor is a
%% tensor() or an Elixir %TensorBlob.Tensor{}. Answers other, having exported nothing, for a
%% container that holds anything else (or nests 256 deep): the Elixir door then describes it
%% itself, or says what and where. Anything but a map or a list raises badarg (reason
%% bad_value, argument tensors), as does a version but versioned, legacy or writable.
-spec python_slot_export_tree(map() | list(), tensor_blob:dlpack_version() | writable) ->
          {non_neg_integer(), reference(), binary()} | other.
python_slot_export_tree(Container, Version) ->
    ?NIF(tensor_blob_nif:python_slot_export_tree(Container, Version)).

%% @doc An empty slot for Python to put a batch in; closing it gives the list of the tensors
%% over what Python put there (on a dirty scheduler), or, for a batch that carries its container's
%% description (take_tree), that container: maps (keys binaries and integers) and lists of
%% tensors; undefined when Python put nothing.
-spec python_slot_receive_many() -> {non_neg_integer(), reference()}.
python_slot_receive_many() -> ?NIF(tensor_blob_nif:python_slot_receive_many()).
