# Compiled where Pythonx is on the code path (test_helper.exs says why the
# :python tests are excluded elsewhere).
if Code.ensure_loaded?(Pythonx) do
  defmodule TensorBlob.PythonInVMTest do
    # Python inside this VM (Pythonx): tensors both ways with no copy. Tagged
    # :python: excluded where Pythonx is not on the code path (PYTHONX_PATH,
    # scripts/build_pythonx.sh; Pythonx needs Elixir >= 1.15, so never on
    # Debian 12's Elixir 1.14). The Python found as python3 must have PyTorch
    # and NumPy (Debian's python3-torch, python3-numpy).
    use TensorBlob.Test.PythonCase, async: false

    defp py(code, globals \\ %{}) do
      case Pythonx.eval("import torch, numpy\n" <> code, globals) do
        {nil, _} -> nil
        {result, _} -> Pythonx.decode(result)
      end
    end

    defp py_object(code, globals \\ %{}) do
      {result, _} = Pythonx.eval(code, globals)
      result
    end

    defp ptr(tensor), do: TensorBlob.to_blob(tensor).ptr

    # Collects on both sides until stats/0 stops changing (PythonVM).
    defp settled, do: PythonVM.settled_stats()
    defp await_settled(expected), do: PythonVM.await_stats(expected)

    # Every dtype of the library's table (that the linked libtorch has), in
    # one of three cases for the Python library `module`: its DLPack takes
    # it (:shared), refuses it (:refused), or the library has no dtype of
    # that name (:unnamed). The cases are the table's, checked here: a
    # helper that answered nothing fails, and so does one where Python's
    # own default dtype does not cross.
    defp dtype_cases(module) do
      table = for %{name: name, available: true} <- TensorBlob.tables().dtypes, do: name

      cases =
        py(
          """
          def dlpack_takes(d):
              try:
                  (#{module}.zeros(1, dtype=d)).__dlpack__()
                  return True
              except Exception:
                  return False
          kind = torch.dtype if #{(module == "torch" && "True") || "False"} else type
          def case(n):
              d = getattr(#{module}, n.decode(), None)
              if d is None or not isinstance(d, kind):
                  return b"unnamed"
              return b"shared" if dlpack_takes(d) else b"refused"
          ([(n, case(n)) for n in names], str(#{module}.zeros(1).dtype).split(".")[-1].encode())
          """,
          %{"names" => Enum.map(table, &Atom.to_string/1)}
        )

      {pairs, default} = cases
      cases = for {name, kind} <- pairs, do: {String.to_existing_atom(name), String.to_existing_atom(kind)}
      assert Enum.map(cases, &elem(&1, 0)) == table
      assert {String.to_existing_atom(default), :shared} in cases
      cases
    end

    defp dtypes(module, kind), do: for({dtype, ^kind} <- dtype_cases(module), do: dtype)

    defp pattern(n), do: for(i <- 1..n, into: <<>>, do: <<rem(i * 37 + 11, 256)>>)

    # Bytes a tensor of dtype holds: a bool's are 0 and 1.
    defp pattern(n, :bool), do: for(i <- 1..n, into: <<>>, do: <<rem(i, 2)>>)
    defp pattern(n, _dtype), do: pattern(n)

    # Bytes of a Python tensor/array, as Python reads them.
    defp py_bytes(object) do
      py(
        """
        import numpy, torch
        x.contiguous().view(torch.uint8).numpy().tobytes() if isinstance(x, torch.Tensor) else numpy.ascontiguousarray(x).view(numpy.uint8).tobytes()
        """,
        %{"x" => object}
      )
    end

    test "describe/0: the versions, and one libtorch where PyTorch links the one tensor_blob links" do
      info = Python.describe()
      assert info.torch == py("torch.__version__")
      assert info.numpy == py("numpy.__version__")
      # Debian's python3-torch links the system's libtorch, as tensor_blob
      # does: one libtorch_cpu mapped.
      assert [_] = info.libtorch
      assert info.one_libtorch
    end

    describe "to_python/2" do
      test "a torch tensor over the same memory, writes seen both ways" do
        t =
          Tensor.from_binary(
            <<1::32-float-native, 2::32-float-native, 3::32-float-native, 4::32-float-native>>,
            :float32,
            {2, 2}
          )

        x = Python.to_python(t)
        assert py("(x.data_ptr(), x.dtype == torch.float32, tuple(x.shape))", %{"x" => x}) == {ptr(t), true, {2, 2}}

        py("x[0, 1] = 20.0", %{"x" => x})
        assert <<_::32, 20.0::32-float-native, _::binary>> = Tensor.to_binary(t)

        Tensor.write!(t, <<5::32-float-native, 6::32-float-native, 7::32-float-native, 8::32-float-native>>)
        assert py("x.tolist()", %{"x" => x}) == [[5.0, 6.0], [7.0, 8.0]]
      end

      test "the Encoder hands a tensor to eval as a torch tensor over the same memory" do
        t = Tensor.from_binary(<<1::64-native, 2::64-native>>, :int64, {2})
        assert py("(x.data_ptr(), x.sum().item())", %{"x" => t}) == {ptr(t), 3}
      end

      test "a numpy array over the same memory; NumPy's read-only import stays read-only" do
        t = Tensor.from_binary(<<1::32-native, 2::32-native, 3::32-native>>, :int32, {3})
        x = Python.to_python(t, as: :numpy)
        assert py("(x.ctypes.data, x.tolist())", %{"x" => x}) == {ptr(t), [1, 2, 3]}

        Tensor.write!(t, <<7::32-native, 8::32-native, 9::32-native>>)
        assert py("x.tolist()", %{"x" => x}) == [7, 8, 9]

        if py("x.flags.writeable", %{"x" => x}) do
          py("x[0] = 70", %{"x" => x})
          assert <<70::32-native, _::binary>> = Tensor.to_binary(t)
        else
          assert_raise Pythonx.Error, ~r/read-only/, fn -> py("x[0] = 70", %{"x" => x}) end
        end
      end

      test "every dtype both share crosses to torch and to numpy" do
        for {module, as} <- [{"torch", :torch}, {"numpy", :numpy}], dtype <- dtypes(module, :shared) do
          size = Enum.find_value(TensorBlob.tables().dtypes, fn d -> d.name == dtype && d.element_size end)
          bytes = pattern(6 * size, dtype)
          t = Tensor.from_binary(bytes, dtype, {2, 3})
          x = Python.to_python(t, as: as)
          assert py_bytes(x) == bytes, "#{module} #{dtype}"
          assert py("str(x.dtype).split('.')[-1]", %{"x" => x}) == Atom.to_string(dtype), "#{module} #{dtype}"
        end
      end

      test "a dtype the Python library names but its DLPack refuses raises, and leaks nothing" do
        start = settled()

        for dtype <- dtypes("torch", :refused) do
          size = Enum.find_value(TensorBlob.tables().dtypes, fn d -> d.name == dtype && d.element_size end)
          t = Tensor.from_binary(pattern(size, dtype), dtype, {1})
          assert_raise ArgumentError, ~r/^tensor: Python refused it/, fn -> Python.to_python(t) end
        end

        py("import gc\ngc.collect()")
        assert await_settled(start) == start
      end

      test "a read-only tensor goes to NumPy read-only, and PyTorch refuses it" do
        x = py_object("import numpy\na = numpy.arange(3, dtype=numpy.int16)\na.flags.writeable = False\na")
        t = Python.from_python(x)
        y = Python.to_python(t, as: :numpy)
        assert py("(y.flags.writeable, y.tolist())", %{"y" => y}) == {false, [0, 1, 2]}

        assert_raise ArgumentError, ~r/^tensor: it is read-only, and PyTorch has no read-only tensors/, fn ->
          Python.to_python(t)
        end
      end

      test "a bad option raises" do
        t = Tensor.zeros({2}, :float32)
        # The common checker's errors, with data: the option is the argument.
        for {opts, message, reason, argument} <- [
              {[as: :jax], ~r/^as: expected one of :torch, :numpy, got :jax/, :bad_value, :as},
              {[copy: true], ~r/^copy: unknown option/, :bad_option, :copy},
              {%{as: :numpy}, ~r/^options: expected a keyword list/, :bad_option, :options}
            ] do
          assert_raise ArgumentError, message, fn -> Python.to_python(t, opts) end

          assert %{reason: ^reason, argument: ^argument} =
                   (try do
                      Python.to_python(t, opts)
                    rescue
                      ArgumentError -> :tensor_blob.error_reason(__STACKTRACE__)
                    end)
        end
      end
    end

    describe "from_python/1" do
      test "a torch tensor's memory, writes seen both ways" do
        x = py_object("import torch\ntorch.arange(6, dtype=torch.int64).reshape(2, 3)")
        t = Python.from_python(x)
        assert ptr(t) == py("x.data_ptr()", %{"x" => x})
        assert {Tensor.shape(t), Tensor.dtype(t)} == {{2, 3}, :int64}
        assert Tensor.to_binary(t) == for(i <- 0..5, into: <<>>, do: <<i::64-native>>)

        Tensor.write!(t, for(i <- 10..15, into: <<>>, do: <<i::64-native>>))
        assert py("x.tolist()", %{"x" => x}) == [[10, 11, 12], [13, 14, 15]]
        py("x[1, 2] = 99", %{"x" => x})
        assert <<_::binary-size(40), 99::64-native>> = Tensor.to_binary(t)
      end

      test "a writable numpy array is writable; a read-only one stays read-only" do
        x = py_object("import numpy\nnumpy.arange(4, dtype=numpy.float64)")
        t = Python.from_python(x)
        assert ptr(t) == py("x.ctypes.data", %{"x" => x})
        Tensor.write!(t, <<1.5::64-float-native, 2.5::64-float-native, 3.5::64-float-native, 4.5::64-float-native>>)
        assert py("x.tolist()", %{"x" => x}) == [1.5, 2.5, 3.5, 4.5]

        ro = py_object("import numpy\na = numpy.arange(4, dtype=numpy.int8)\na.flags.writeable = False\na")
        t = Python.from_python(ro)
        assert Tensor.to_binary(t) == <<0, 1, 2, 3>>
        assert_raise ArgumentError, ~r/read-only/, fn -> Tensor.write!(t, <<9, 9, 9, 9>>) end
      end

      test "every dtype both share comes from torch and from numpy" do
        # A packed dtype (two values a byte) has no ones() in PyTorch: its
        # bytes, viewed.
        packed = for %{name: name, dlpack: {_, _, lanes}} <- TensorBlob.tables().dtypes, lanes > 1, do: name

        for module <- ["torch", "numpy"], dtype <- dtypes(module, :shared) do
          make =
            if dtype in packed,
              do: "#{module}.ones((2, 3), dtype=#{module}.uint8).view(#{module}.#{dtype})",
              else: "#{module}.ones((2, 3), dtype=#{module}.#{dtype})"

          x = py_object("import #{module}\n#{make}")
          t = Python.from_python(x)
          assert {Tensor.dtype(t), Tensor.shape(t)} == {dtype, {2, 3}}, "#{module} #{dtype}"
          assert Tensor.to_binary(t) == py_bytes(x), "#{module} #{dtype}"
          assert ptr(t) == py("x.data_ptr() if hasattr(x, 'data_ptr') else x.ctypes.data", %{"x" => x})
        end
      end

      test "hostile objects raise ArgumentError and leave nothing behind" do
        start = settled()

        hostile = [
          {"5", ~r/has no __dlpack__/},
          {"class Raises:\n    def __dlpack__(self, **kw): raise RuntimeError('boom')\nRaises()", ~r/boom/},
          {"class Garbage:\n    def __dlpack__(self, **kw): return 42\nGarbage()", ~r/not a DLPack capsule/},
          {"import ctypes\nclass Named:\n    def __dlpack__(self, **kw):\n        new = ctypes.pythonapi.PyCapsule_New\n        new.restype = ctypes.py_object\n        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]\n        return new(8, b'other', None)\nNamed()",
           ~r/not a DLPack capsule/},
          {"import ctypes\nclass Odd:\n    def __dlpack__(self, **kw):\n        new = ctypes.pythonapi.PyCapsule_New\n        new.restype = ctypes.py_object\n        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]\n        return new(9, b'dltensor', None)\nOdd()",
           ~r/odd address/},
          {"import torch\nc = torch.zeros(3).__dlpack__()\ntorch.from_dlpack(c)\nclass Used:\n    def __dlpack__(self, **kw): return c\nUsed()",
           ~r/took already/}
        ]

        for {code, message} <- hostile do
          object = py_object(code)
          assert_raise ArgumentError, message, fn -> Python.from_python(object) end
        end

        assert_raise ArgumentError, ~r/expected a Pythonx.Object/, fn -> Python.from_python(:not_python) end
        assert await_settled(start) == start
      end

      test "the library's builtins refuse a slot that is not theirs with Python's own errors" do
        # What a stray call from user code gets: an exception, never a crash
        # or a slot's content. The module is there once the door is set up,
        # which any call does: this test's own, whatever ran before.
        Python.describe()
        {k, slot} = :tensor_blob_python.python_slot_receive()

        code =
          "import tensor_blob_pythonx as m\ntry:\n    r = repr(call())\nexcept Exception as e:\n    r = type(e).__name__ + ': ' + str(e)\nr"

        said = fn call ->
          {result, _} = Pythonx.eval("def call(): return " <> call <> "\n" <> code, %{})
          Pythonx.decode(result)
        end

        assert said.("m.capsule_from_slot(#{k})") =~ ~r/^BufferError: .*holds no export/
        assert said.("m.capsule_from_slot(4096)") =~ ~r/^BufferError: .*no such slot/
        assert said.("m.capsule_from_slot(-1)") =~ ~r/^OverflowError/
        assert said.("m.capsule_from_slot('0')") =~ ~r/^TypeError/
        assert said.("m.capsule_from_slot()") =~ ~r/^TypeError: .*wrong number of arguments/
        assert said.("m.take_capsule(None, #{k})") == "0"
        assert :tensor_blob_python.python_slot_close(slot) == :undefined
      end
    end

    describe "the door's refusals and its setup" do
      test "a legacy capsule the door refuses: its producer's deleter is called all the same" do
        start = settled()
        freed = py_object("[]")

        # NumPy's own legacy capsule, spoiled after it is made: a field the
        # import refuses (ndim -1, an unknown dtype code).
        for {type, offset, value, message} <- [
              {"c_int32", 16, -1, ~r/^ndim: -1 is out of range/},
              {"c_uint8", 20, 99, ~r/^dtype: unknown DLPack type code 99/}
            ] do
          x =
            py_object(
              """
              import ctypes, numpy, weakref
              get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
                  ("PyCapsule_GetPointer", ctypes.pythonapi))
              class Spoiled:
                  def __init__(self, a): self.a = a
                  def __dlpack__(self):
                      capsule = self.a.__dlpack__()
                      ctypes.#{type}.from_address(get(capsule, b"dltensor") + #{offset}).value = #{value}
                      return capsule
              a = numpy.arange(16, dtype=numpy.int32)
              weakref.finalize(a, freed.append, 1)
              Spoiled(a)
              """,
              %{"freed" => freed}
            )

          assert_raise ArgumentError, message, fn -> Python.from_python(x) end
        end

        # The arrays' last references were the refused capsules' tensors.
        assert wait_until(fn -> Lifetime.collect() && py("import gc\ngc.collect()\nlen(f)", %{"f" => freed}) == 2 end)
        assert await_settled(start) == start
      end

      test "a legacy producer's type is not kept once its objects are gone" do
        types = py_object("[]")

        t =
          Lifetime.in_process(fn ->
            x =
              py_object(
                """
                import numpy, weakref
                def make():
                    class Legacy:
                        def __init__(self, a): self.a = a
                        def __dlpack__(self): return self.a.__dlpack__()
                    return Legacy
                legacy = make()
                types.append(weakref.ref(legacy))
                legacy(numpy.arange(4, dtype=numpy.int8))
                """,
                %{"types" => types}
              )

            Python.from_python(x)
          end)

        assert Tensor.to_binary(t) == <<0, 1, 2, 3>>
        _ = t
        t = nil
        _ = t

        assert wait_until(fn ->
                 Lifetime.collect() && py("import gc\ngc.collect()\nt[0]() is None", %{"t" => types})
               end),
               "the legacy producer's type is still held"
      end

      test "with every slot held, both ways raise TensorBlob.Error (no_memory)" do
        x = py_object("import numpy\nnumpy.zeros(2)")
        t = Tensor.zeros({2}, :float32)
        slots = hold_every_slot()

        try do
          for call <- [fn -> Python.from_python(x) end, fn -> Python.to_python(t) end] do
            error = assert_raise TensorBlob.Error, ~r/too many exchanges with Python at once/, call
            assert error.reason == :no_memory
          end
        after
          for {_k, slot} <- slots, do: :tensor_blob_python.python_slot_close(slot)
        end
      end

      @tag timeout: 600_000
      test "5,000 cold processes: each gets a tensor or a clean refusal, nothing leaked" do
        start = settled()
        x = py_object("import numpy\nnumpy.arange(8, dtype=numpy.uint8)")
        # Cold: the door set up by no call yet (as in a fresh VM), so that
        # every process's first call finds it not ready.
        :persistent_term.erase({Python, :ready})
        parent = self()

        callers =
          for _ <- 1..5000 do
            spawn_monitor(fn ->
              result =
                try do
                  t = Python.from_python(x)
                  {:tensor, Tensor.to_binary(t)}
                rescue
                  error in TensorBlob.Error -> {:refused, error.reason, Exception.message(error)}
                end

              send(parent, {self(), result})
            end)
          end

        results =
          for {pid, ref} <- callers do
            receive do
              {^pid, result} ->
                receive do: ({:DOWN, ^ref, :process, _, :normal} -> result)

              {:DOWN, ^ref, :process, _, reason} ->
                {:exit, reason}
            end
          end

        # A clean refusal: the door's error, with its reason: every slot
        # in use (no_memory), or Pythonx gone past its own timeout (runtime).
        odd = Enum.reject(results, &match?({:tensor, <<0, 1, 2, 3, 4, 5, 6, 7>>}, &1))

        clean? = fn
          {:refused, :no_memory, "too many exchanges with Python at once" <> _} -> true
          {:refused, :runtime, "object: Pythonx exited during the evaluation" <> _} -> true
          _ -> false
        end

        assert Enum.all?(odd, clean?), inspect(odd |> Enum.reject(clean?) |> Enum.uniq() |> Enum.take(3))
        assert length(odd) < 5000
        _ = x
        x = nil
        _ = x
        assert await_settled(start) == start
        {k, slot} = :tensor_blob_python.python_slot_receive()
        :tensor_blob_python.python_slot_close(slot)
        assert k == 0
      end
    end

    describe "a safetensors file's tensors" do
      test "go to torch and numpy over the mapping, and outlive every term of the file" do
        start = settled()
        dir = Path.join(System.tmp_dir!(), "tb_python_st_#{System.unique_integer([:positive])}")
        File.mkdir_p!(dir)
        on_exit(fn -> File.rm_rf!(dir) end)
        path = Path.join(dir, "weights.safetensors")
        w = pattern(64 * 64)
        b = for i <- 1..16, into: <<>>, do: <<i * 1000::signed-32-little>>
        :ok = TensorBlob.SafeTensors.write(path, %{"w" => {w, :uint8, {64, 64}}, "b" => {b, :int32, {16}}})

        # The file's handle and tensors live in a process that exits: only
        # the Python objects are left.
        {x, n, strided} =
          Lifetime.in_process(fn ->
            %{tensors: %{"w" => tw, "b" => tb}} = TensorBlob.SafeTensors.open(path)
            assert Tensor.memory(tw) == :file
            x = Python.to_python(tw)
            assert py("x.data_ptr()", %{"x" => x}) == ptr(tw)
            n = Python.to_python(tb, as: :numpy)
            assert py("n.ctypes.data", %{"n" => n}) == ptr(tb)
            {x, n, Python.to_python(Tensor.transpose(tw, 0, 1))}
          end)

        Lifetime.churn()
        # Its name removed too: the mapping holds the file.
        File.rm_rf!(dir)
        assert py_bytes(x) == w
        assert py("n.tolist()", %{"n" => n}) == Enum.map(1..16, &(&1 * 1000))
        assert py("(s.T.contiguous() == x).all().item()", %{"s" => strided, "x" => x})
        assert TensorBlob.stats().capsules == start.capsules + 3
        py("import gc\ndel x, n, s\ngc.collect()", %{"x" => x, "n" => n, "s" => strided})
        _ = {x, n, strided}
        {x, n, strided} = {nil, nil, nil}
        _ = {x, n, strided}
        assert await_settled(start) == start
      end
    end

    describe "lifetimes" do
      test "Elixir drops its tensor first: Python still reads the memory, then frees it" do
        start = settled()
        bytes = pattern(4096)
        x = Lifetime.in_process(fn -> Python.to_python(Tensor.from_binary(bytes, :uint8, {4096})) end)
        Lifetime.churn()
        assert py_bytes(x) == bytes
        assert TensorBlob.stats().capsules == start.capsules + 1
        py("import gc\ndel x\ngc.collect()", %{"x" => x})
        _ = x
        x = nil
        _ = x
        assert await_settled(start) == start
      end

      test "Python drops its object first: Elixir still reads the memory, then the producer frees it" do
        start = settled()
        freed = py_object("import weakref\n[]")

        t =
          Lifetime.in_process(fn ->
            x =
              py_object(
                "import numpy, weakref\na = numpy.arange(1024, dtype=numpy.int32)\nweakref.finalize(a, freed.append, 1)\na",
                %{"freed" => freed}
              )

            Python.from_python(x)
          end)

        Lifetime.collect()
        py("import gc\ngc.collect()")
        assert py("len(f)", %{"f" => freed}) == 0
        assert TensorBlob.stats().deferred == start.deferred + 1
        assert Tensor.to_binary(t) == for(i <- 0..1023, into: <<>>, do: <<i::32-native>>)
        _ = t
        t = nil
        _ = t
        Lifetime.collect()
        assert wait_until(fn -> py("import gc\ngc.collect()\nlen(f)", %{"f" => freed}) == 1 end)
        assert await_settled(start) == start
      end

      test "a caller killed while Python hands it a tensor: the tensor is released, every slot free again" do
        start = settled()
        freed = py_object("[]")

        # __dlpack__ pauses long enough for the caller to be killed in
        # the middle of the evaluation.
        slow =
          py_object(
            """
            import numpy, time, weakref
            class Slow:
                def __init__(self, a): self.a = a
                def __dlpack__(self, **kw):
                    time.sleep(0.3)
                    return self.a.__dlpack__(**kw)
            a = numpy.arange(16, dtype=numpy.int32)
            weakref.finalize(a, freed.append, 1)
            Slow(a)
            """,
            %{"freed" => freed}
          )

        caller = spawn(fn -> Python.from_python(slow) end)
        ref = Process.monitor(caller)
        Process.sleep(100)
        Process.exit(caller, :kill)
        assert_receive {:DOWN, ^ref, :process, _, :killed}, 5000
        _ = slow
        slow = nil
        _ = slow
        # The array's last reference was the tensor Python put in the slot.
        assert wait_until(fn -> Lifetime.collect() && py("import gc\ngc.collect()\nlen(f)", %{"f" => freed}) == 1 end)
        assert await_settled(start) == start
        {k, slot} = :tensor_blob_python.python_slot_receive()
        :tensor_blob_python.python_slot_close(slot)
        assert k == 0
      end

      test "halting the VM with tensors shared both ways exits cleanly" do
        # A VM of its own: Pythonx and tensor_blob loaded, a tensor given
        # to Python and one taken from it, both alive at the halt.
        paths = for app <- [:tensor_blob, :pythonx], do: app |> :code.lib_dir() |> Path.join("ebin")

        code = ~S"""
        {:ok, _} = Application.ensure_all_started(:pythonx)
        {out, 0} = System.cmd("python3", ["-c", "import os, sys, sysconfig; print(os.path.join(sysconfig.get_config_var('LIBDIR'), sysconfig.get_config_var('INSTSONAME'))); print(sys.base_prefix); print(sys.executable)"])
        [lib, home, exe] = String.split(out, "\n", trim: true)
        :ok = Pythonx.init(lib, home, exe)
        given = TensorBlob.Python.to_python(TensorBlob.Tensor.from_binary(<<1, 2, 3, 4>>, :uint8, {4}))
        {y, _} = Pythonx.eval("import torch\ntorch.arange(4)", %{})
        taken = TensorBlob.Python.from_python(y)
        IO.puts("shared: #{byte_size(TensorBlob.Tensor.to_binary(taken))} #{inspect(Pythonx.decode(elem(Pythonx.eval("int(x.sum())", %{"x" => given}), 0)))}")
        System.halt(0)
        """

        {out, status} = System.cmd("elixir", Enum.flat_map(paths, &["-pa", &1]) ++ ["-e", code], stderr_to_stdout: true)
        assert out =~ "shared: 32 10"
        assert status == 0, out
        refute out =~ ~r/terminate called|Segmentation|Aborted|core dumped/, out
      end

      @tag timeout: 900_000
      test "100,000 exchanges both ways leave stats/0 and the RSS where they were" do
        start = settled()

        exchange = fn count ->
          for _ <- 1..count do
            t = Tensor.zeros({1024}, :float32)
            back = t |> Python.to_python() |> Python.from_python()
            4096 = byte_size(Tensor.to_binary(back))
          end

          # Both sides release what they hold after each thousand: what
          # stays is what the RSS measures, not how far collections lagged.
          assert await_settled(start) == start
        end

        # The first thousands fill Python's and the allocators' pools: after
        # some orders of the suite's other tests they grew the RSS by 96 MiB
        # with stats/0 back where it was, and not again after them.
        for _ <- 1..10, do: exchange.(1_000)
        rss0 = rss_kib()
        for _ <- 1..100, do: exchange.(1_000)
        py("import gc\ngc.collect()")
        growth = rss_kib() - rss0

        # 100,000 leaked 4 KiB tensors would be 400 MiB. Under ASan the
        # RSS holds its quarantine of freed memory (256 MiB): stats/0 alone
        # says there.
        unless System.get_env("LD_PRELOAD", "") =~ "libasan" do
          assert growth < 64 * 1024, "RSS grew by #{growth} KiB"
        end
      end
    end

    test "a Python deleter waiting for the GIL never blocks a scheduler" do
      parent = self()

      # NumPy's DLPack deleter takes the GIL. The owner drops the last
      # reference to NumPy's memory and collects, while another evaluation
      # holds the GIL for 3 s: a deleter run by the collection would hold
      # the owner's scheduler for the 2.7 s left. The bounds below are far
      # from that and far above a loaded machine's noise (on a quiet one
      # the largest gap is a few ms).
      owner =
        spawn_link(fn ->
          t = Python.from_python(py_object("import numpy\nnumpy.ones(1 << 16)"))
          send(parent, :ready)
          receive do: (:drop -> :ok)
          {65_536} = Tensor.shape(t)
          {collect_us, true} = :timer.tc(&:erlang.garbage_collect/0)
          send(parent, {:dropped, collect_us})
        end)

      assert_receive :ready, 10_000
      # Tickers on every scheduler's run queue, each a 1 ms timer.
      tickers = for _ <- 1..(2 * System.schedulers_online()), do: spawn_link(fn -> tick(parent, now_us(), 0) end)
      # ctypes.PyDLL calls keep the GIL: the sleep holds it for 3 s.
      holder = Task.async(fn -> Pythonx.eval("import ctypes\nctypes.PyDLL(None).usleep(3000000)", %{}) end)
      Process.sleep(300)
      send(owner, :drop)
      assert_receive {:dropped, collect_us}, 10_000
      Task.await(holder, 10_000)
      Enum.each(tickers, &send(&1, :stop))
      gap_us = Enum.max(for _ <- tickers, do: receive(do: ({:max_gap, gap} -> gap)))
      assert collect_us < 1_000_000, "the collection that dropped the tensor took #{collect_us} µs"
      assert gap_us < 1_000_000, "a 1 ms ticker saw a gap of #{gap_us} µs"
    end

    defp now_us, do: System.monotonic_time(:microsecond)

    defp tick(parent, last, max_gap) do
      receive do
        :stop -> send(parent, {:max_gap, max_gap})
      after
        1 ->
          now = System.monotonic_time(:microsecond)
          tick(parent, now, max(max_gap, now - last))
      end
    end

    # Every free slot, open: {K, Slot} each, until the library refuses one.
    defp hold_every_slot do
      Stream.repeatedly(fn ->
        try do
          :tensor_blob_python.python_slot_receive()
        catch
          :error, {:tensor_blob, _} -> :full
        end
      end)
      |> Enum.take_while(&(&1 != :full))
    end

    defp wait_until(fun, tries \\ 200),
      do: match?({:ok, _}, :tensor_blob_test_util.poll(fn -> {!!fun.(), nil} end, tries, 10))

    defp rss_kib do
      [_, kib] = Regex.run(~r/VmRSS:\s+(\d+)/, File.read!("/proc/self/status"))
      String.to_integer(kib)
    end
  end
end
