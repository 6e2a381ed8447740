# Compiled only when Pythonx (CPython embedded in the BEAM) is loaded; Mix
# compiles it again once that changes (`__mix_recompile__?/0`, in both
# modules).
if Code.ensure_loaded?(Pythonx) do
  defmodule TensorBlob.Python.Batch do
    @moduledoc """
    A map or list of tensors that `Pythonx.Encoder` hands to Python in one
    evaluation (`TensorBlob.Python.batch/2`, `TensorBlob.Python.to_python_many/2`).
    """
    defstruct tensors: %{}, opts: []
    @type t :: %__MODULE__{tensors: map() | list(), opts: keyword()}
  end

  defmodule TensorBlob.Python do
    @moduledoc """
    Zero-copy tensors between tensor_blob and the Python of this VM (Pythonx).

    Pythonx runs CPython inside the BEAM's OS process, so both sides share
    one address space: a tensor crosses by DLPack, with no copy.

      * `to_python/2` gives a PyTorch tensor (or, with `as: :numpy`, a NumPy
        array) over the memory of a tensor_blob tensor.
      * `from_python/1` gives a tensor_blob tensor over the memory of any
        Python object that speaks DLPack (`__dlpack__` and
        `__dlpack_device__`: PyTorch, NumPy, JAX, CuPy, ...).
      * `TensorBlob.Tensor` implements `Pythonx.Encoder`, so
        `Pythonx.eval(code, %{"x" => tensor})` hands `x` to Python as a
        PyTorch tensor over the same memory.

    No address reaches user code: the library makes the capsules, names them
    as the DLPack protocol says and takes each one once. A tensor given to
    Python travels in a `dltensor` capsule (`dltensor_versioned` for NumPy)
    whose destructor is a C function of this library: a capsule no consumer
    took releases the tensor when Python collects it. A Python tensor taken
    by `from_python/1` is asked for versioned DLPack first
    (`__dlpack__(max_version=(1, 0))`), then legacy; its capsule is renamed
    `used_dltensor` (`used_dltensor_versioned`), so no second consumer takes
    it, and the producer's deleter runs once, when the last tensor over the
    memory is gone.

    Each exchange is one `Pythonx.eval` of the library's own code, and
    nothing is converted: the managed tensor crosses in a numbered slot of
    the library, and the code names only the slot. Pythonx compiles a
    code text once and keeps it, so the texts are as few as the slots in
    use at once (the lowest free slot is taken each time; 4096 at most,
    then `TensorBlob.Error`). A slot belongs to its caller: if the caller
    dies during the evaluation, what the slot holds is released with it.

    The producer's deleter of Python memory takes the GIL, which another
    evaluation may hold for seconds: it never runs on a scheduler. It runs
    in the library's next call into Python, which holds the GIL already,
    or after 2 ms on a thread of the library's own (`defer_release`,
    `TensorBlob.DLPack.import/2`).

    Writes are seen by both sides. Read-only memory stays read-only: a
    read-only tensor goes to NumPy with DLPack's `READ_ONLY` flag, and a
    read-only NumPy array (NumPy 2.2 makes every array it imports from
    DLPack read-only) comes back as a read-only tensor. PyTorch has no
    read-only tensors: giving it one raises.
    """
    import TensorBlob.Raise

    alias TensorBlob.Tensor

    # The Python side is a module of its own, priv/python/tensor_blob_pythonx.py
    # (tested by test/python/pythonx_module_test.py), which the VM's
    # interpreter imports once (ensure_ready/0).
    @module "tensor_blob_pythonx"

    # Where the module's setup runs, once, while the others wait for it.
    @setup TensorBlob.Python.Setup
    @ready {__MODULE__, :ready}

    # Mix compiles this file again once Pythonx is gone from the code path
    # (TensorBlob.Python.Absent's does the same once it is there).
    @doc false
    def __mix_recompile__?, do: not Code.ensure_loaded?(Pythonx)

    @doc """
    A Python tensor over the memory of `tensor`, as a `Pythonx.Object`.

    Options: `as: :torch` (the default) for a PyTorch tensor, `as: :numpy`
    for a NumPy array. The memory stays alive while either side uses it.
    """
    @spec to_python(Tensor.t(), keyword()) :: Pythonx.Object.t()
    def to_python(tensor, opts \\ []) do
      %{as: kind} =
        translating(do: :tensor_blob_options.check(opts, [{:as, {:one_of, [:torch, :numpy]}, :torch}], :keywords))

      ensure_ready()
      # PyTorch 2.6 takes legacy capsules only; NumPy takes versioned ones,
      # which carry the READ_ONLY flag. A PyTorch with DLPack 1.3's C
      # exchange API takes a versioned export (refused when read-only, as
      # a legacy one is: PyTorch has no read-only tensors) through its table.
      {version, function} =
        cond do
          kind == :numpy -> {:versioned, "to_numpy"}
          torch_api?() -> {:writable, "to_torch_api"}
          true -> {:legacy, "to_torch"}
        end

      if kind == :numpy, do: host_only!(tensor)
      {k, slot} = export(tensor, version)

      # The export crosses in slot k, which the code names: a code text
      # per slot in use, compiled once each (Pythonx caches by text), and
      # no global to convert. What Python did not take is released here.
      try do
        {object, _} = eval(:tensor, "__import__('#{@module}').#{function}(#{k})", %{})
        object
      after
        translating(do: :tensor_blob_python.python_slot_close(slot))
      end
    end

    # Whether PyTorch's tensor type offers DLPack 1.3's C exchange API:
    # asked once per VM (it imports torch), then kept.
    @torch_api {__MODULE__, :torch_api}
    defp torch_api? do
      case :persistent_term.get(@torch_api, nil) do
        nil ->
          {result, _} = eval(:python, "__import__('#{@module}').torch_api()", %{})
          answer = Pythonx.decode(result) == true
          :persistent_term.put(@torch_api, answer)
          answer

        answer ->
          answer
      end
    end

    @doc """
    Many tensors to Python in one evaluation: `tensors` is a map or list
    of tensors (maps and lists nested too), and the answer, a
    `Pythonx.Object`, is a dict or list of the same shape, each tensor a
    PyTorch tensor (or, with `as: :numpy`, a NumPy array) over the same
    memory, as `to_python/2` makes it. Map keys that are binaries become
    `str` keys, so a params map goes to `load_state_dict` as it is.
    """
    @spec to_python_many(map() | list(), keyword()) :: Pythonx.Object.t()
    def to_python_many(tensors, opts \\ []) do
      %{as: kind} =
        translating(do: :tensor_blob_options.check(opts, [{:as, {:one_of, [:torch, :numpy]}, :torch}], :keywords))

      ensure_ready()

      {version, how} =
        cond do
          kind == :numpy -> {:versioned, "numpy"}
          torch_api?() -> {:writable, "torch_api"}
          true -> {:legacy, "torch"}
        end

      {k, slot, desc} = export_many(tensors, kind, version)

      try do
        {object, _} = eval(:tensors, "__import__('#{@module}').many(#{k}, '#{how}', s)", %{"s" => desc})
        object
      after
        translating(do: :tensor_blob_python.python_slot_close(slot))
      end
    end

    @doc """
    Many tensors from Python in one evaluation: `object` is a dict, list or
    tuple of DLPack producers (nested too), and the answer a map (keys as
    Pythonx decodes them: `str` keys become binaries) or list of the same
    shape, each a tensor over the producer's memory, as `from_python/1`
    takes it.
    """
    @spec from_python_many(Pythonx.Object.t()) :: map() | list()
    def from_python_many(%Pythonx.Object{} = object) do
      ensure_ready()
      {k, _} = receiving = translating(do: :tensor_blob_python.python_slot_receive_many())

      # Python walks the container in C and leaves its description in the
      # batch; closing the slot imports the tensors and builds the map or
      # list (keys as binaries and integers) in the NIF.
      case received(object, receiving, "take_all") do
        :undefined -> "object: Python put no batch in slot #{k}" |> badarg!(:gone, :object)
        tree -> tree
      end
    end

    def from_python_many(other),
      do: "object: expected a Pythonx.Object, got #{inspect(other)}" |> badarg!(:bad_value, :object)

    @doc """
    A map or list of tensors (nested too) that `Pythonx.eval/2` hands to
    Python in one evaluation (`to_python_many/2`) when it is given as a
    global: `Pythonx.eval(code, %{"params" => TensorBlob.Python.batch(params)})`.
    """
    @spec batch(map() | list(), keyword()) :: TensorBlob.Python.Batch.t()
    def batch(tensors, opts \\ []) when is_map(tensors) or is_list(tensors),
      do: %TensorBlob.Python.Batch{tensors: tensors, opts: opts}

    # A container's shape crosses as one binary, its description (a
    # Pythonx object for each key and leaf would cost more than the
    # tensors; priv/python/tensor_blob_pythonx.py reads and writes it):
    # "t" a tensor, the next in order; "l" N ":" and N nodes, a list; "d"
    # N ":" and N keys each before its node, a map. A key: "s" LEN ":" and
    # a binary's bytes, "a" LEN ":" and an atom's name (str in Python),
    # "i" INT ":" an integer.
    defp flatten(tensors) do
      {desc, leaves} = flatten(tensors, [], [])
      {IO.iodata_to_binary(desc), leaves}
    end

    defp flatten(%Tensor{} = t, leaves, _path), do: {"t", [t | leaves]}

    defp flatten(%_{} = other, _leaves, path), do: not_a_tensor(other, path)

    defp flatten(map, leaves, path) when is_map(map) do
      {entries, leaves} =
        Enum.map_reduce(map, leaves, fn {key, value}, acc ->
          {desc, acc} = flatten(value, acc, [key | path])
          {[key_desc(key, path), desc], acc}
        end)

      {[?d, Integer.to_string(map_size(map)), ?: | entries], leaves}
    end

    defp flatten(list, leaves, path) when is_list(list) do
      {items, {leaves, n}} =
        Enum.map_reduce(list, {leaves, 0}, fn value, {acc, i} ->
          {desc, acc} = flatten(value, acc, [i | path])
          {desc, {acc, i + 1}}
        end)

      {[?l, Integer.to_string(n), ?: | items], leaves}
    end

    defp flatten(other, _leaves, path), do: not_a_tensor(other, path)

    defp key_desc(key, _path) when is_binary(key), do: [?s, Integer.to_string(byte_size(key)), ?:, key]
    defp key_desc(key, _path) when is_integer(key), do: [?i, Integer.to_string(key), ?:]

    defp key_desc(key, _path) when is_atom(key) and key not in [nil, true, false] do
      name = Atom.to_string(key)
      [?a, Integer.to_string(byte_size(name)), ?:, name]
    end

    defp key_desc(key, path) do
      "tensors: a map's keys must be binaries, atoms or integers, got #{inspect(key)} at #{inspect(Enum.reverse(path))}"
      |> badarg!(:bad_value, :tensors)
    end

    defp not_a_tensor(other, path) do
      "tensors: expected maps and lists of tensors, got #{inspect(other)} at #{inspect(Enum.reverse(path))}"
      |> badarg!(:bad_value, :tensors)
    end

    # The container described and its tensors exported in the NIF; walked
    # here where it holds what the NIF's description does not take (this
    # walk names what and where) and for NumPy (host memory only).
    defp export_many(tensors, kind, version) do
      case kind == :torch && exporting(fn -> :tensor_blob_python.python_slot_export_tree(tensors, version) end) do
        {_k, _slot, _desc} = exported ->
          exported

        _ ->
          {desc, leaves} = flatten(tensors)
          leaves = Enum.reverse(leaves)
          if kind == :numpy, do: Enum.each(leaves, &host_only!/1)
          refs = Enum.map(leaves, &Tensor.ref/1)
          {k, slot} = exporting(fn -> :tensor_blob_python.python_slot_export_many(refs, version) end)
          {k, slot, desc}
      end
    end

    defp exporting(export) do
      translating(do: export.())
    rescue
      error in ArgumentError ->
        case :tensor_blob.error_reason(__STACKTRACE__) do
          %{reason: :unsupported, argument: :version} ->
            ("tensors: one is read-only, and PyTorch has no read-only tensors; give them to NumPy " <>
               "(as: :numpy), which keeps them read-only, or copy it")
            |> badarg!(:read_only, :tensors)

          _ ->
            reraise error, __STACKTRACE__
        end
    end

    @doc """
    What the Python of this VM brings: its version, PyTorch's and NumPy's
    (`nil` when absent), and the libtorch files mapped in this OS process
    (`:libtorch`, from `/proc/self/maps`). `:one_libtorch` is `false` when
    two are mapped. Two libtorches do not load into one process (their
    registries are C++ statics the dynamic linker makes one for every
    copy; the second to load fails): build tensor_blob against the
    libtorch that Python's PyTorch brings (guides/python.md).
    """
    @spec describe() :: %{
            python: String.t(),
            torch: String.t() | nil,
            numpy: String.t() | nil,
            libtorch: [String.t()],
            one_libtorch: boolean()
          }
    def describe do
      ensure_ready()

      {result, _} = eval(:python, "__import__('#{@module}').describe()", %{})

      {python, torch, numpy} = Pythonx.decode(result)

      # The kernel names each mapping by its file's own path (links
      # resolved): one path per libtorch loaded.
      libtorch =
        case File.read("/proc/self/maps") do
          {:ok, maps} ->
            for line <- String.split(maps, "\n"),
                [_, _, _, _, _, path | _] <- [String.split(line, " ", trim: true)],
                Path.basename(path) =~ ~r/^libtorch_cpu\.(so|dylib)/,
                uniq: true,
                do: path

          {:error, _} ->
            []
        end

      %{python: python, torch: torch, numpy: numpy, libtorch: libtorch, one_libtorch: length(libtorch) <= 1}
    end

    @doc """
    A tensor_blob tensor over the memory of a Python object that speaks
    DLPack (a `Pythonx.Object`: a PyTorch tensor, a NumPy array, ...).

    The object's memory stays alive while the tensor (or any slice of it)
    does. Raises `ArgumentError` when the object is no DLPack producer, or
    its `__dlpack__` raises or gives anything but an unused DLPack capsule.
    """
    @spec from_python(Pythonx.Object.t()) :: Tensor.t()
    def from_python(%Pythonx.Object{} = object) do
      ensure_ready()
      {k, _} = receiving = translating(do: :tensor_blob_python.python_slot_receive())

      # Python puts the object's managed tensor in slot k; closing the slot
      # imports it (the producer's deleter off the schedulers, for it takes
      # the GIL).
      case received(object, receiving, "take") do
        %Tensor{} = tensor -> tensor
        :undefined -> "object: Python put no tensor in slot #{k}" |> badarg!(:gone, :object)
      end
    end

    def from_python(other),
      do: "object: expected a Pythonx.Object, got #{inspect(other)}" |> badarg!(:bad_value, :object)

    # What Python's function (take/2, take_all/2) put in slot k, imported
    # as the slot closes (closed on a failure too). The code makes no
    # Pythonx object: it ends in a statement (no result) and deletes its
    # global (none given back). Each object Pythonx makes costs its janitor
    # a call on a dirty scheduler once collected, and every evaluation
    # waits for the janitor.
    defp received(object, {k, slot}, function) do
      try do
        eval(:object, "__import__('#{@module}').#{function}(obj, #{k})\ndel obj", %{"obj" => object})
      rescue
        error ->
          translating(do: :tensor_blob_python.python_slot_close(slot))
          reraise error, __STACKTRACE__
      end

      # The tensors come back as %Tensor{}, made in the NIF.
      translating(do: :tensor_blob_python.python_slot_close(slot, Tensor))
    end

    # A read-only tensor cannot be a legacy export (no READ_ONLY flag), and
    # PyTorch takes nothing else: said in PyTorch's terms.
    defp export(tensor, version) do
      translating(do: :tensor_blob_python.python_slot_export(Tensor.ref(tensor), version))
    rescue
      error in ArgumentError ->
        case :tensor_blob.error_reason(__STACKTRACE__) do
          %{reason: :unsupported, argument: :version} ->
            ("tensor: it is read-only, and PyTorch has no read-only tensors; give it to NumPy " <>
               "(as: :numpy), which keeps it read-only, or copy it")
            |> badarg!(:read_only, :tensor)

          _ ->
            reraise error, __STACKTRACE__
        end
    end

    # NumPy holds host memory only.
    defp host_only!(tensor) do
      case Tensor.device(tensor) do
        :cpu ->
          :ok

        device ->
          "tensor: it is on #{inspect(device)}, and NumPy holds host memory only; give it to PyTorch (as: :torch)"
          |> badarg!(:wrong_device, :tensor)
      end
    end

    # Python's errors in the library's code become ArgumentErrors that say
    # what Python said (the exception's last line), about the argument; an
    # exit of Pythonx (its janitor busy past its timeout) a TensorBlob.Error.
    defp eval(argument, code, globals) do
      Pythonx.eval(code, globals)
    rescue
      error in Pythonx.Error ->
        said = error |> Exception.message() |> String.split("\n", trim: true) |> List.last() |> String.trim()
        "#{argument}: Python refused it: #{said}" |> badarg!(:bad_value, argument)
    catch
      :exit, reason ->
        "#{argument}: Pythonx exited during the evaluation: #{Exception.format_exit(reason)}"
        |> error!(:runtime, argument)
    end

    # The Python module and the library's binding of the interpreter, once
    # per VM: the first caller starts the setup in a process of its own,
    # and every caller until it is done waits for that one.
    defp ensure_ready do
      if :persistent_term.get(@ready, false), do: :ok, else: await_setup()
    end

    defp await_setup do
      case Process.whereis(@setup) || start_setup() do
        nil ->
          ensure_ready()

        pid ->
          ref = Process.monitor(pid)

          receive do
            {:DOWN, ^ref, :process, _, {:shutdown, {:failed, kind, reason, stacktrace}}} ->
              :erlang.raise(kind, reason, stacktrace)

            {:DOWN, ^ref, :process, _, _} ->
              ensure_ready()
          end
      end
    end

    # The setup's process, registered; nil when another registered first
    # and is gone already.
    defp start_setup do
      pid = spawn(fn -> receive(do: (:go -> setup())) end)

      try do
        Process.register(pid, @setup)
        send(pid, :go)
        pid
      rescue
        ArgumentError ->
          Process.exit(pid, :kill)
          Process.whereis(@setup)
      end
    end

    defp setup do
      unless :persistent_term.get(@ready, false) do
        # The interpreter imports the module from its file, and says where
        # its libpython is; the library binds the C API from there, by
        # name, and gives the module its builtins.
        {library, _} =
          eval(
            :python,
            """
            import importlib.util, sys
            path = path.decode() if isinstance(path, bytes) else path
            spec = importlib.util.spec_from_file_location("#{@module}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules["#{@module}"] = module
            module.library()
            """,
            %{"path" => module_path()}
          )

        abi = translating(do: :tensor_blob_python.python_bind(Pythonx.decode(library)))
        eval(:python, "__import__('#{@module}').configure(abi)", %{"abi" => abi})
        :persistent_term.put(@ready, true)
      end
    catch
      kind, reason -> exit({:shutdown, {:failed, kind, reason, __STACKTRACE__}})
    end

    defp module_path, do: Path.join([:code.priv_dir(:tensor_blob), "python", "#{@module}.py"])
  end

  defimpl Pythonx.Encoder, for: TensorBlob.Tensor do
    def encode(tensor, _encoder), do: TensorBlob.Python.to_python(tensor)
  end

  defimpl Pythonx.Encoder, for: TensorBlob.Python.Batch do
    def encode(%{tensors: tensors, opts: opts}, _encoder), do: TensorBlob.Python.to_python_many(tensors, opts)
  end
else
  defmodule TensorBlob.Python.Absent do
    @moduledoc false
    # Pythonx was not on the code path when this file was compiled.
    def __mix_recompile__?, do: Code.ensure_loaded?(Pythonx)
  end
end
