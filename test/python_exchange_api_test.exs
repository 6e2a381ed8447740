# Compiled where Pythonx is on the code path (test_helper.exs says why the
# :python tests are excluded elsewhere).
if Code.ensure_loaded?(Pythonx) do
  defmodule TensorBlob.PythonExchangeAPITest do
    # DLPack 1.3's C exchange API at the Python door: a type's
    # __dlpack_c_exchange_api__ table, checked, then called in C.
    #
    # A stand-in producer written in C (test/support/dlpack_standin.c,
    # compiled here with no Python header) offers good and bad tables on
    # every stack; PyTorch's real table is tested where PyTorch has it
    # (2.10 and later), and where it has none the same calls are shown to
    # go the old way.
    use TensorBlob.Test.PythonCase, async: false

    setup_all do
      dir = Path.join(System.tmp_dir!(), "tb_standin_#{System.unique_integer([:positive])}")
      File.mkdir_p!(dir)
      so = Path.join(dir, "dlpack_standin.so")

      {out, status} =
        System.cmd(
          System.get_env("CC", "cc"),
          ~w(-O2 -g -fPIC -shared -std=c11 -Wall -Wextra -Werror -Ipriv/include test/support/dlpack_standin.c -o) ++
            [so, "-ldl"],
          stderr_to_stdout: true
        )

      assert status == 0, out

      # The stand-in's tables, each on a Python type of its own; the
      # capsules' names are kept alive by the types (a capsule keeps a
      # pointer to its name).
      {lib, _} =
        Pythonx.eval(
          """
          import ctypes
          lib = ctypes.CDLL(path.decode())
          lib.standin_init()
          new_capsule = ctypes.pythonapi.PyCapsule_New
          new_capsule.restype = ctypes.py_object
          new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
          def standin_type(table, name=b"dlpack_exchange_api"):
              address = ctypes.addressof(ctypes.c_char.in_dll(lib, table))
              capsule = new_capsule(address, name, None)
              return type("Standin_" + table, (), {"__dlpack_c_exchange_api__": capsule, "_name": name})
          def counts():
              out = (ctypes.c_int * 3)()
              lib.standin_counts(out)
              return tuple(out)
          lib.standin_type = standin_type
          lib.counts = counts
          lib
          """,
          %{"path" => so}
        )

      on_exit(fn -> File.rm_rf(dir) end)
      %{lib: lib}
    end

    defp py(code, globals \\ %{}) do
      case Pythonx.eval(code, globals) do
        {nil, _} -> nil
        {result, _} -> Pythonx.decode(result)
      end
    end

    defp py_object(code, globals) do
      {result, _} = Pythonx.eval(code, globals)
      result
    end

    defp standin(lib, table, name \\ "b'dlpack_exchange_api'"),
      do: py_object("lib.standin_type(#{inspect(table)}, #{name})()", %{"lib" => lib})

    # made, freed, calls of an entry of a bad table.
    defp counts(lib), do: py("lib.counts()", %{"lib" => lib})

    defp ptr(tensor), do: TensorBlob.to_blob(tensor).ptr

    defp f32s(list), do: for(x <- list, into: <<>>, do: <<x::32-float-native>>)

    defp reason(fun) do
      try do
        fun.()
        :no_error
      rescue
        ArgumentError -> :tensor_blob.error_reason(__STACKTRACE__)
      end
    end

    describe "a stand-in producer's table" do
      test "a good table: the tensor it makes, its deleter called once, after the last user", %{lib: lib} do
        # Settled first: a stand-in tensor of a test before this one may
        # still be on its way to its deleter (the release thread's), which
        # would count as freed here.
        PythonVM.settled_stats()
        {made0, freed0, _} = counts(lib)
        obj = standin(lib, "standin_good")

        Lifetime.assert_last_user(
          fn ->
            t = Python.from_python(obj)
            assert {Tensor.dtype(t), Tensor.shape(t), Tensor.memory(t)} == {:float32, {4}, :dlpack}
            # The last user: a slice; the tensor itself is dropped here.
            Tensor.narrow(t, 0, 1, 3)
          end,
          fn last, _start ->
            assert Tensor.to_binary(last) == f32s([2.0, 3.0, 4.0])
            assert counts(lib) == {made0 + 1, freed0, 0}
          end
        )

        assert counts(lib) == {made0 + 1, freed0 + 1, 0}
      end

      test "a checked table is kept by its capsule: another capsule, or the capsule's pointer changed, is checked anew",
           %{lib: lib} do
        start = PythonVM.settled_stats()
        obj = standin(lib, "standin_good")
        {made0, _, _} = counts(lib)
        assert Tensor.to_binary(Python.from_python(obj)) == f32s([1.0, 2.0, 3.0, 4.0])

        # The type's attribute now names another capsule, a bad one.
        py("type(o).__dlpack_c_exchange_api__ = lib.standin_type('standin_version_0').__dlpack_c_exchange_api__", %{
          "o" => obj,
          "lib" => lib
        })

        assert_raise ArgumentError, ~r/no table of version 1.3/, fn -> Python.from_python(obj) end

        # A good capsule again (another object: checked anew), then its pointer
        # set to the bad table (the same object: checked anew).
        py("type(o).__dlpack_c_exchange_api__ = lib.standin_type('standin_good').__dlpack_c_exchange_api__", %{
          "o" => obj,
          "lib" => lib
        })

        assert [a, b] = Python.from_python_many(py_object("[o, o]", %{"o" => obj}))
        assert Tensor.to_binary(a) == Tensor.to_binary(b)

        py(
          """
          import ctypes
          set_pointer = ctypes.pythonapi.PyCapsule_SetPointer
          set_pointer.argtypes = [ctypes.py_object, ctypes.c_void_p]
          bad = ctypes.addressof(ctypes.c_char.in_dll(lib, 'standin_version_0'))
          assert set_pointer(type(o).__dlpack_c_exchange_api__, bad) == 0
          """,
          %{"o" => obj, "lib" => lib}
        )

        assert_raise ArgumentError, ~r/no table of version 1.3/, fn -> Python.from_python(obj) end

        assert_raise ArgumentError, ~r/no table of version 1.3/, fn ->
          Python.from_python_many(py_object("[o]", %{"o" => obj}))
        end

        {made, _, 0} = counts(lib)
        assert made == made0 + 3
        {a, b} = {nil, nil}
        _ = {a, b}
        assert PythonVM.await_stats(start) == start
      end

      test "a later major version's table is walked past to the 1.3 table it chains to", %{lib: lib} do
        {made0, _, _} = counts(lib)
        t = Python.from_python(standin(lib, "standin_later"))
        assert Tensor.to_binary(t) == f32s([1.0, 2.0, 3.0, 4.0])
        made = made0 + 1
        assert {^made, _, 0} = counts(lib)
      end

      test "a bad capsule is refused with error data, and nothing in it is called", %{lib: lib} do
        start = PythonVM.settled_stats()

        for {table, name, message} <- [
              {"standin_good", "b'dlpack_exchange_api_'", ~r/no PyCapsule named "dlpack_exchange_api"/},
              {"standin_good", "b'dltensor'", ~r/no PyCapsule named/},
              {"standin_version_0", "b'dlpack_exchange_api'", ~r/no table of version 1.3/},
              {"standin_version_1_2", "b'dlpack_exchange_api'", ~r/no table of version 1.3/},
              {"standin_later_over_0", "b'dlpack_exchange_api'", ~r/no table of version 1.3/},
              {"standin_null_from", "b'dlpack_exchange_api'", ~r/lacking an entry/},
              {"standin_null_stream", "b'dlpack_exchange_api'", ~r/lacking an entry/}
            ] do
          obj = standin(lib, table, name)
          assert_raise ArgumentError, message, fn -> Python.from_python(obj) end
          assert %{reason: :bad_value, argument: :object} = reason(fn -> Python.from_python(obj) end)
        end

        # An attribute that is no capsule at all.
        obj = py_object("type('NotCapsule', (), {'__dlpack_c_exchange_api__': 42})()", %{})
        assert_raise ArgumentError, ~r/no PyCapsule named/, fn -> Python.from_python(obj) end

        assert {_, _, 0} = counts(lib)
        assert PythonVM.await_stats(start) == start
      end

      test "an entry that fails: its Python exception, or one of ours when it sets none; NULL refused",
           %{lib: lib} do
        start = PythonVM.settled_stats()

        for {table, message} <- [
              {"standin_fails", ~r/RuntimeError: stand-in: this producer refuses every object/},
              {"standin_fails_silently", ~r/failed and set no Python error/},
              {"standin_gives_null", ~r/holding NULL/}
            ] do
          obj = standin(lib, table)
          assert_raise ArgumentError, message, fn -> Python.from_python(obj) end
          assert %{reason: :bad_value, argument: :object} = reason(fn -> Python.from_python(obj) end)
        end

        assert PythonVM.await_stats(start) == start
      end
    end

    # PyTorch's own table, where it has one (PyTorch 2.10 and later).
    defp torch_api?, do: py("import torch\nhasattr(torch.Tensor, '__dlpack_c_exchange_api__')")

    # A torch.Tensor subclass whose __dlpack__ raises: only the C exchange
    # API (found on the type, through its base) takes it.
    defp no_dunder(code) do
      py_object(
        """
        import torch
        class NoDunder(torch.Tensor):
            def __dlpack__(self, *args, **kwargs):
                raise RuntimeError("not through __dlpack__")
        (#{code}).as_subclass(NoDunder)
        """,
        %{}
      )
    end

    describe "PyTorch's table" do
      test "from_python takes a torch tensor through the table where PyTorch has one" do
        x = no_dunder("torch.arange(6, dtype=torch.int32).reshape(2, 3)")

        if torch_api?() do
          t = Python.from_python(x)
          assert {Tensor.shape(t), Tensor.to_binary(t)} == {{2, 3}, for(i <- 0..5, into: <<>>, do: <<i::32-native>>)}
          assert TensorBlob.to_blob(t).ptr == py("x.data_ptr()", %{"x" => x})
        else
          assert_raise ArgumentError, ~r/not through __dlpack__/, fn -> Python.from_python(x) end
        end
      end

      test "every dtype PyTorch holds crosses both ways; 0-dim, empty and strided tensors" do
        table = for %{name: name, available: true, element_size: size} <- TensorBlob.tables().dtypes, do: {name, size}

        held =
          py(
            "import torch\n[n for n in names if isinstance(getattr(torch, n.decode(), None), torch.dtype)]",
            %{"names" => Enum.map(table, fn {n, _} -> Atom.to_string(n) end)}
          )

        for {dtype, size} <- table, Atom.to_string(dtype) in held do
          bytes = for i <- 1..(6 * size), into: <<>>, do: <<if(dtype == :bool, do: rem(i, 2), else: rem(i * 7, 251))>>
          t = Tensor.from_binary(bytes, dtype, {2, 3})

          case reason(fn -> Python.to_python(t) end) do
            :no_error ->
              x = Python.to_python(t)
              assert py("(x.data_ptr(), str(x.dtype))", %{"x" => x}) == {TensorBlob.to_blob(t).ptr, "torch.#{dtype}"}
              back = Python.from_python(x)
              assert {Tensor.dtype(back), Tensor.to_binary(back)} == {dtype, bytes}, "#{dtype}"

            %{reason: :bad_value} ->
              # PyTorch's DLPack has no code for it (as __dlpack__ says).
              refute py("""
                     import torch
                     def exports():
                         try:
                             torch.zeros(1, dtype=torch.#{dtype}).__dlpack__()
                             return True
                         except Exception:
                             return False
                     exports()
                     """),
                     "#{dtype}"
          end
        end

        zero = Python.from_python(no_or_plain("torch.tensor(3.5)"))
        assert {Tensor.shape(zero), Tensor.to_binary(zero)} == {{}, <<3.5::32-float-native>>}

        empty = Python.from_python(no_or_plain("torch.zeros((0, 3), dtype=torch.int16)"))
        assert {Tensor.shape(empty), Tensor.to_binary(empty)} == {{0, 3}, <<>>}

        strided = Python.from_python(no_or_plain("torch.arange(12, dtype=torch.int64).reshape(3, 4).t()[1:]"))
        assert Tensor.shape(strided) == {3, 3}
        assert Tensor.to_binary(strided) == for(i <- [1, 5, 9, 2, 6, 10, 3, 7, 11], into: <<>>, do: <<i::64-native>>)

        # To PyTorch: 0-dim, empty and strided views of tensor_blob tensors.
        for t <- [
              Tensor.from_binary(<<7::32-native>>, :int32, {}),
              Tensor.from_binary(<<>>, :int32, {0, 2}),
              Tensor.from_binary(for(i <- 0..11, into: <<>>, do: <<i::32-native>>), :int32, {3, 4})
              |> Tensor.narrow(1, 1, 2)
            ] do
          x = Python.to_python(t)
          assert py("tuple(x.shape)", %{"x" => x}) == Tensor.shape(t)
          assert Tensor.to_binary(Python.from_python(x)) == Tensor.to_binary(t)
        end
      end

      test "a read-only tensor: refused by PyTorch, kept read-only from NumPy" do
        ro = py_object("import numpy\na = numpy.arange(3, dtype=numpy.int16)\na.flags.writeable = False\na", %{})
        t = Python.from_python(ro)
        assert %{reason: :read_only, argument: :tensor} = reason(fn -> Python.to_python(t) end)
        assert_raise ArgumentError, ~r/read-only/, fn -> Tensor.write!(t, <<1::16, 2::16, 3::16>>) end
      end

      test "a tensor freed while exported: the other side reads it, then everything is released" do
        bytes = f32s(Enum.map(1..256, &(&1 * 0.5)))

        # tensor_blob's tensor dropped while PyTorch holds it.
        start = PythonVM.settled_stats()
        x = Lifetime.in_process(fn -> Python.to_python(Tensor.from_binary(bytes, :float32, {256})) end)
        Lifetime.churn()
        assert py("x.numpy().tobytes()", %{"x" => x}) == bytes
        py("import gc\ndel x\ngc.collect()", %{"x" => x})
        x = nil
        _ = x
        assert PythonVM.await_stats(start) == start

        # PyTorch's tensor dropped while tensor_blob holds it.
        Lifetime.assert_last_user(
          fn -> Python.from_python(no_or_plain("torch.arange(256, dtype=torch.float32) * 0.5 + 0.5")) end,
          fn last, _ -> assert Tensor.to_binary(last) == bytes end
        )
      end
    end

    describe "many tensors in one crossing" do
      defp params(n) do
        for i <- 1..n, into: %{} do
          {"layer#{i}.weight", Tensor.from_binary(<<i::32-native, i * 2::32-native>>, :int32, {2})}
        end
      end

      test "a nested map to PyTorch and back, each tensor over the same memory" do
        t1 = Tensor.from_binary(f32s([1.0, 2.0]), :float32, {2})
        t2 = Tensor.from_binary(<<5::64-native>>, :int64, {1})
        t3 = Tensor.from_binary(<<1, 2, 3>>, :uint8, {3})
        tree = %{"w" => t1, "inner" => %{"b" => t2, "list" => [t3, t1]}}
        x = Python.to_python_many(tree)

        assert py(
                 """
                 (type(x).__name__, sorted(x), x["w"].data_ptr(), x["inner"]["b"].data_ptr(),
                  x["inner"]["list"][0].data_ptr(), x["inner"]["list"][1].data_ptr(), x["w"].tolist())
                 """,
                 %{"x" => x}
               ) ==
                 {"dict", ["inner", "w"], ptr(t1), ptr(t2), ptr(t3), ptr(t1), [1.0, 2.0]}

        py("x['w'][0] = 10.0", %{"x" => x})
        assert Tensor.to_binary(t1) == f32s([10.0, 2.0])

        back = Python.from_python_many(x)
        assert %{"w" => w, "inner" => %{"b" => b, "list" => [l0, l1]}} = back
        assert Enum.map([w, b, l0, l1], &ptr/1) == [ptr(t1), ptr(t2), ptr(t3), ptr(t1)]
        assert Tensor.to_binary(b) == <<5::64-native>>
      end

      test "a list to NumPy; a tuple of producers of every kind back, the C exchange API's among them",
           %{lib: lib} do
        ts = [Tensor.from_binary(<<1::16-native, 2::16-native>>, :int16, {2}), Tensor.zeros({3}, :float64)]
        x = Python.to_python_many(ts, as: :numpy)
        assert py("[type(a).__name__ for a in x]", %{"x" => x}) == ["ndarray", "ndarray"]

        standin = standin(lib, "standin_good")

        mixed =
          py_object(
            "import numpy, torch\n(x[0], {'s': s, 't': torch.arange(3)}, [numpy.ones(2)])",
            %{"x" => x, "s" => standin}
          )

        assert [a, %{"s" => s, "t" => t}, [o]] = Python.from_python_many(mixed)
        assert ptr(a) == ptr(hd(ts))
        assert Tensor.to_binary(s) == f32s([1.0, 2.0, 3.0, 4.0])
        assert Tensor.to_binary(t) == <<0::64-native, 1::64-native, 2::64-native>>
        assert Tensor.to_binary(o) == <<1.0::64-float-native, 1.0::64-float-native>>
      end

      test "the Encoder hands a params map to eval in one crossing" do
        params = params(300)
        sum = Enum.sum(for i <- 1..300, do: i * 3)

        assert py("sum(int(t.sum()) for t in p.values()), type(p['layer7.weight']).__name__", %{
                 "p" => Python.batch(params)
               }) == {sum, "Tensor"}

        assert py("p['layer9.weight'].data_ptr()", %{"p" => Python.batch(params)}) == ptr(params["layer9.weight"])
      end

      test "256 tensors each way (made and imported on a dirty scheduler)" do
        params = params(256)
        x = Python.to_python_many(params)
        back = Python.from_python_many(x)
        assert map_size(back) == 256
        for {name, t} <- params, do: assert(ptr(back[name]) == ptr(t))
      end

      test "the last user: Elixir's tensors dropped while Python holds the dict, and Python's while Elixir holds the map" do
        start = PythonVM.settled_stats()
        bytes = f32s([1.5, 2.5, 3.5])
        x = Lifetime.in_process(fn -> Python.to_python_many(%{"a" => Tensor.from_binary(bytes, :float32, {3})}) end)
        Lifetime.churn()
        assert py("x['a'].numpy().tobytes()", %{"x" => x}) == bytes
        py("import gc\ndel x\ngc.collect()", %{"x" => x})
        x = nil
        _ = x
        assert PythonVM.await_stats(start) == start

        Lifetime.assert_last_user(
          fn ->
            m = Python.from_python_many(py_object("import torch\n{'a': torch.tensor([1.5, 2.5, 3.5])}", %{}))
            m["a"]
          end,
          fn last, _ -> assert Tensor.to_binary(last) == bytes end
        )
      end

      test "keys and nesting, built in one pass each way: str, bytes, atom and integer keys; tuples; depth" do
        t = Tensor.from_binary(<<7::32-native>>, :int32, {1})
        big = 4_611_686_018_427_387_904
        neg = -big
        x = Python.to_python_many(%{:atom => t, -3 => [t, %{big => t}], "é" => %{}, "l" => []})

        assert py("sorted((repr(k), type(v).__name__) for k, v in x.items())", %{"x" => x}) ==
                 [{"'atom'", "Tensor"}, {"'l'", "list"}, {"'é'", "dict"}, {"-3", "list"}]

        assert py("x[-3][1][#{big}].data_ptr()", %{"x" => x}) == ptr(t)

        back =
          Python.from_python_many(
            py_object("(x[-3][0], {b'\\xff': x['atom'], 5: (x['atom'],), -#{big}: [], 'é': {}})", %{"x" => x})
          )

        assert [a, %{<<255>> => b, 5 => [c], ^neg => [], "é" => %{}}] = back
        assert Enum.map([a, b, c], &ptr/1) == [ptr(t), ptr(t), ptr(t)]

        start = PythonVM.settled_stats()
        deep = py_object("import torch\nd = torch.zeros(1)\nfor _ in range(300): d = [d]\nd", %{})
        assert_raise ArgumentError, ~r/nested deeper than 256/, fn -> Python.from_python_many(deep) end

        for code <- ["{True: torch.zeros(1)}", "{1.5: torch.zeros(1)}"] do
          obj = py_object("import torch\n" <> code, %{})
          assert_raise ArgumentError, ~r/keys must be str, bytes or int/, fn -> Python.from_python_many(obj) end
        end

        alike = py_object("import torch\n{'k': torch.zeros(1), b'k': torch.ones(1)}", %{})
        assert_raise ArgumentError, ~r/two keys alike/, fn -> Python.from_python_many(alike) end
        huge = py_object("import torch\n{2 ** 70: torch.zeros(1)}", %{})
        assert_raise ArgumentError, ~r/beyond 64 bits/, fn -> Python.from_python_many(huge) end
        {deep, alike, huge} = {nil, nil, nil}
        _ = {deep, alike, huge}
        assert PythonVM.await_stats(start) == start
      end

      test "a container the NIF does not describe (a key beyond 64 bits, an atom not ASCII) crosses as one it does" do
        t = Tensor.from_binary(<<7::32-native>>, :int32, {1})
        u = Tensor.zeros({2}, :float64)
        base = %{"w" => t, :atom => [u, %{-3 => t, "é" => []}], 7 => %{}}

        # Each tensor as its address: the containers compared by shape,
        # keys and memory.
        shape = fn x, drop ->
          py(
            """
            def shape(x):
                if isinstance(x, dict):
                    return sorted((repr(k), shape(v)) for k, v in x.items() if repr(k) != drop.decode())
                if isinstance(x, list):
                    return [shape(v) for v in x]
                return x.data_ptr()
            shape(x)
            """,
            %{"x" => x, "drop" => drop}
          )
        end

        described = shape.(Python.to_python_many(base), "")
        assert described == shape.(Python.to_python_many(Map.put(base, Integer.pow(2, 70), u)), "#{Integer.pow(2, 70)}")
        assert described == shape.(Python.to_python_many(Map.put(base, :ünïcode, t)), "'ünïcode'")
        assert [{"'atom'", [ptr(u), [{"'é'", []}, {"-3", ptr(t)}]]}, {"'w'", ptr(t)}, {"7", []}] == described
      end

      test "the tree builtin refuses a description that does not fit its tensors, reading nothing past it" do
        _ = Python.to_python_many([Tensor.zeros({1}, :int8)])
        tree = fn desc -> py("__import__('tensor_blob_pythonx').tree(d, ['T'])", %{"d" => desc}) end

        for bad <- ["l2:t", "l1:tt", "", "x", "l99999999999:t", "d1:s9:at", "d1:i:t", "l1:"] do
          assert_raise Pythonx.Error, fn -> tree.(bad) end
        end

        assert py("__import__('tensor_blob_pythonx').tree(b'd2:s1:al0:i-7:l1:t', ['T'])", %{}) == %{
                 "a" => [],
                 -7 => ["T"]
               }
      end

      test "refusals: a leaf that is no tensor, a read-only tensor for PyTorch, a bad item; nothing leaks",
           %{lib: lib} do
        start = PythonVM.settled_stats()
        {made0, freed0, _} = counts(lib)

        assert %{reason: :bad_value, argument: :tensors} =
                 reason(fn -> Python.to_python_many(%{"a" => Tensor.zeros({1}, :int8), "b" => 3}) end)

        ro = Python.from_python(py_object("import numpy\na = numpy.arange(3)\na.flags.writeable = False\na", %{}))

        assert %{reason: :read_only, argument: :tensors} =
                 reason(fn -> Python.to_python_many([Tensor.zeros({1}, :int8), ro]) end)

        bad =
          py_object("import numpy\n[s, numpy.ones(2), b]", %{
            "s" => standin(lib, "standin_good"),
            "b" => standin(lib, "standin_version_0")
          })

        assert_raise ArgumentError, ~r/no table of version 1.3/, fn -> Python.from_python_many(bad) end
        failing = py_object("[s, 5]", %{"s" => standin(lib, "standin_good")})
        assert_raise ArgumentError, ~r/has no __dlpack__/, fn -> Python.from_python_many(failing) end

        # The good stand-in's tensors taken before each refusal (the walk
        # takes each leaf as it reaches it) were released.
        {made, freed, 0} = counts(lib)
        assert made - made0 == 2 and freed - freed0 == 2
        ro = nil
        _ = ro
        assert PythonVM.await_stats(start) == start
      end
    end

    # Through the table where PyTorch has one (the subclass refuses
    # __dlpack__), else a plain tensor, the old way.
    defp no_or_plain(code), do: if(torch_api?(), do: no_dunder(code), else: py_object("import torch\n" <> code, %{}))
  end
end
