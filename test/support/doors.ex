defmodule TensorBlob.Test.Doors do
  @moduledoc false
  # The door contract's table: every door where tensors cross into or out
  # of the library, each with its calls. test/door_contract_test.exs runs
  # one generated battery against every row (ARCHITECTURE.md, "Doors"); a new
  # door joins by adding a row here.
  #
  # A row: %{door: atom, tag: nil or the ExUnit tag whose environment it
  # needs (test/test_helper.exs excludes it elsewhere), calls: [call],
  # apps: the applications to start first (optional), setup: {m, f, a}
  # run before each test, to set up the door's runtime (optional), stats:
  # the module whose settled_stats/0 and await_stats/1 read stats/0 once
  # the runtime has released what it holds (optional; default Lifetime)}.
  # A call: %{name: string, run: fn args -> result end, args: [arg],
  # writes: whether it writes the tensor it is given}. An arg: %{name:
  # atom, kind: kind, good: fn -> value end, names: the error arguments
  # a bad value of it may be about (default [name])}. A kind says what
  # the argument takes, and so which terms of the battery's are of a
  # wrong type for it (wrong?/2); :tensor args also get the freed, the
  # read-only, and the 0-dim, empty and strided tensors of every dtype.

  alias TensorBlob.{DLPack, IPC, Nodes, SafeTensors, Tensor}

  # Terms of every type: those a kind does not take are its wrong ones.
  def terms, do: [nil, :nope, -1, 2.5, "text", <<1, 2, 3>>, [], [1], {}, {1}, %{}, %{a: 1}, make_ref(), self()]

  def wrong?(:tensor, _), do: true
  def wrong?(:erl_tensor, _), do: true
  def wrong?(:keywords, term), do: not Keyword.keyword?(term)
  def wrong?(:options_map, term), do: not is_map(term) or map_size(term) > 0
  def wrong?(:binary, term), do: not is_binary(term)
  def wrong?(:dtype, _), do: true
  def wrong?(:shape, term), do: term not in [{}, {1}]
  def wrong?(:node, term), do: not is_atom(term)
  def wrong?(:packed, _), do: true
  def wrong?(:capsule, term), do: not (is_integer(term) and term >= 0)
  def wrong?(:spec, _), do: true
  def wrong?(:setting, _), do: true
  def wrong?(:foreign, _), do: true
  # A path is wrong where it is no file name; a name (an atom, a string) is
  # never given, so that no file is written where the battery runs.
  def wrong?(:path, term), do: not (is_atom(term) or is_binary(term) or (is_list(term) and term != []))
  def wrong?(:tensors, term), do: term not in [[], %{}]
  def wrong?(:metadata, term), do: term != %{}

  defp tensor(name \\ :tensor),
    do: %{name: name, kind: :tensor, good: fn -> Tensor.from_binary(<<1, 2, 3, 4>>, :uint8, {4}) end}

  defp erl_tensor,
    do: %{name: :tensor, kind: :erl_tensor, good: fn -> :tensor_blob.from_binary(<<1, 2, 3, 4>>, :uint8, {4}) end}

  defp keywords(good \\ []), do: %{name: :options, kind: :keywords, good: fn -> good end, names: :any_option}
  defp options_map(good \\ %{}), do: %{name: :options, kind: :options_map, good: fn -> good end, names: :any_option}
  defp binary, do: %{name: :binary, kind: :binary, good: fn -> <<1, 2, 3, 4>> end}
  defp dtype, do: %{name: :dtype, kind: :dtype, good: fn -> :uint8 end}
  defp shape, do: %{name: :shape, kind: :shape, good: fn -> {4} end}

  defp call(name, run, args, writes \\ false), do: %{name: name, run: run, args: args, writes: writes}

  def table do
    [
      %{
        door: :erlang_api,
        tag: nil,
        calls: [
          call("tensor_blob:to_blob/2", fn [t, o] -> :tensor_blob.to_blob(t, o) end, [erl_tensor(), options_map()]),
          call("tensor_blob:from_blob/2", fn [s, o] -> :tensor_blob.from_blob(s, o) end, [
            %{
              name: :spec,
              kind: :spec,
              good: fn -> :tensor_blob.to_blob(:tensor_blob.zeros({4}, :uint8)) end,
              names: [:spec, :ptr, :shape, :dtype, :strides, :device, :owner]
            },
            options_map()
          ]),
          call("tensor_blob:to_binary/2", fn [t, o] -> :tensor_blob.to_binary(t, o) end, [
            erl_tensor(),
            options_map(%{copy: true})
          ]),
          call("tensor_blob:from_binary/4", fn [b, d, s, o] -> :tensor_blob.from_binary(b, d, s, o) end, [
            binary(),
            dtype(),
            shape(),
            options_map(%{copy: true})
          ]),
          call("tensor_blob:write/2", fn [t, b] -> :tensor_blob.write(t, b) end, [erl_tensor(), binary()], true),
          call("tensor_blob:shape/1", fn [t] -> :tensor_blob.shape(t) end, [erl_tensor()])
        ]
      },
      %{
        door: :elixir_api,
        tag: nil,
        calls: [
          call("TensorBlob.to_blob/1", fn [t] -> TensorBlob.to_blob(t) end, [tensor()]),
          call("TensorBlob.from_blob/2", fn [s, o] -> TensorBlob.from_blob(s, o) end, [
            %{
              name: :spec,
              kind: :spec,
              good: fn -> TensorBlob.to_blob(Tensor.zeros({4}, :uint8)) end,
              names: [:spec, :ptr, :shape, :dtype, :strides, :device, :owner]
            },
            keywords()
          ]),
          call("Tensor.to_binary/2", fn [t, o] -> Tensor.to_binary(t, o) end, [tensor(), keywords(copy: true)]),
          call("Tensor.from_binary/4", fn [b, d, s, o] -> Tensor.from_binary(b, d, s, o) end, [
            binary(),
            dtype(),
            shape(),
            keywords(copy: true)
          ]),
          call("Tensor.write!/2", fn [t, b] -> Tensor.write!(t, b) end, [tensor(), binary()], true),
          call("Tensor.shape/1", fn [t] -> Tensor.shape(t) end, [tensor()])
        ]
      },
      %{
        door: :dlpack,
        tag: nil,
        calls: [
          call("DLPack.export/2", fn [t, o] -> DLPack.export(t, o) end, [tensor(), keywords(read_only: false)]),
          call("DLPack.import/2", fn [c, o] -> DLPack.import(c, o) end, [
            %{name: :capsule, kind: :capsule, good: fn -> DLPack.export(Tensor.zeros({4}, :uint8)) end},
            keywords()
          ]),
          call("DLPack.info/1", fn [c] -> DLPack.info(c) end, [
            %{name: :capsule, kind: :capsule, good: fn -> DLPack.export(Tensor.zeros({4}, :uint8)) end}
          ]),
          call("tensor_blob:to_dlpack/2", fn [t, o] -> :tensor_blob.to_dlpack(t, o) end, [erl_tensor(), options_map()])
        ]
      },
      %{
        door: :ipc,
        tag: nil,
        calls: [
          call("IPC.export/1 |> IPC.to_json/1", fn [t] -> IPC.export(t) |> IPC.to_json() end, [tensor()]),
          call("IPC.open/1 (JSON)", fn [s] -> IPC.open(s) end, [
            %{
              name: :spec,
              kind: :spec,
              good: fn -> IPC.to_json(held_export()) end,
              names: [:spec, :handle, :dtype, :shape, :data_size]
            }
          ]),
          call("IPC.open/1 (map)", fn [s] -> IPC.open(s) end, [
            %{
              name: :spec,
              kind: :spec,
              good: fn -> IPC.to_map(held_export()) end,
              names: [:spec, :handle, :dtype, :shape, :data_size]
            }
          ])
        ]
      },
      %{
        door: :nodes,
        tag: nil,
        calls: [
          call("Nodes.pack/3", fn [t, n, o] -> Nodes.pack(t, n, o) end, [
            tensor(),
            %{name: :node, kind: :node, good: fn -> node() end},
            keywords(via: :binary)
          ]),
          call("Nodes.unpack/2", fn [p, o] -> Nodes.unpack(p, o) end, [
            %{
              name: :packed,
              kind: :packed,
              good: fn -> Nodes.pack(Tensor.zeros({4}, :uint8), node(), via: :binary) end,
              names: [:packed, :tensor]
            },
            keywords(copy: true)
          ]),
          call("Nodes.pack/3 of a file's tensor, as the file", fn [t, n, o] -> Nodes.pack(t, n, o) end, [
            %{name: :tensor, kind: :tensor, good: &file_tensor/0},
            %{name: :node, kind: :node, good: fn -> node() end},
            keywords(via: :file)
          ]),
          call("Nodes.unpack/2 of a file's tensor", fn [p, o] -> Nodes.unpack(p, o) end, [
            %{
              name: :packed,
              kind: :packed,
              good: fn -> Nodes.pack(file_tensor(), node(), via: :file) end,
              names: [:packed, :tensor]
            },
            keywords(copy: true)
          ])
        ]
      },
      %{
        door: :configuration,
        tag: nil,
        calls: [
          call(
            "node_keep (application env), read by Nodes.pack/2",
            fn [keep] ->
              with_env(:node_keep, keep, fn -> Nodes.pack(Tensor.zeros({4}, :uint8), node(), via: :binary) end)
            end,
            [%{name: :node_keep, kind: :setting, good: fn -> 1000 end}]
          )
        ]
      },
      %{
        door: :safetensors,
        tag: nil,
        calls: [
          call("SafeTensors.open/2", fn [p, o] -> SafeTensors.open(p, o) end, [
            %{name: :path, kind: :path, good: &safetensors_file/0},
            keywords(misaligned: :refuse)
          ]),
          call("SafeTensors.open/2 of a sharded checkpoint's index", fn [p, o] -> SafeTensors.open(p, o) end, [
            %{name: :path, kind: :path, good: &safetensors_index/0},
            keywords(nested: true)
          ]),
          call("SafeTensors.write/3", fn [p, ts, m] -> SafeTensors.write(p, ts, m) end, [
            %{name: :path, kind: :path, good: fn -> safetensors_target("write") end},
            %{name: :tensors, kind: :tensors, good: fn -> %{"t" => Tensor.zeros({4}, :uint8)} end},
            %{name: :metadata, kind: :metadata, good: fn -> %{"k" => "v"} end}
          ]),
          call("SafeTensors.write/3 of a tensor, then open/2", &safetensors_round_trip/1, [
            %{name: :path, kind: :path, good: fn -> safetensors_target("round_trip") end},
            Map.put(tensor(), :names, [:tensor, :tensors]),
            %{name: :metadata, kind: :metadata, good: fn -> %{} end}
          ]),
          call("SafeTensors.info/1", fn [p] -> SafeTensors.info(p) end, [
            %{name: :path, kind: :path, good: &safetensors_file/0}
          ]),
          call("SafeTensors.open/2 of what the linked libtorch lacks", fn [p, o] -> SafeTensors.open(p, o) end, [
            %{name: :path, kind: :path, good: &safetensors_file/0},
            keywords(unsupported: :bytes)
          ]),
          call("tensor_blob_safetensors:info/1", fn [p] -> :tensor_blob_safetensors.info(p) end, [
            %{name: :path, kind: :path, good: &safetensors_file/0}
          ]),
          call("tensor_blob_safetensors:open/2", fn [p, o] -> :tensor_blob_safetensors.open(p, o) end, [
            %{name: :path, kind: :path, good: &safetensors_file/0},
            options_map(%{misaligned: :refuse})
          ]),
          call(
            "tensor_blob_safetensors:write/3",
            fn [p, t, m] -> :tensor_blob_safetensors.write(p, [{"t", t}], m) end,
            [
              %{name: :path, kind: :path, good: fn -> safetensors_target("erlang_write") end},
              Map.put(erl_tensor(), :names, [:tensor, :tensors]),
              %{name: :metadata, kind: :metadata, good: fn -> %{} end}
            ]
          )
        ]
      },
      Map.put(nx_row(), :apps, [:nx]),
      torchx_row(),
      Map.put(
        runtime_row(:python_in_vm, :python, TensorBlob.Python, {:to_python, :from_python}, :object, false),
        :setup,
        {TensorBlob.Test.PythonVM, :start!, []}
      )
      |> Map.put(:stats, TensorBlob.Test.PythonVM)
      |> Map.update!(:calls, &(&1 ++ python_batch_calls())),
      extorch_row(),
      %{
        door: :python_module,
        tag: :python_module,
        calls: [
          call("tensor_blob.open (priv/python)", fn [s] -> python_module(:open, s) end, [
            %{
              name: :spec,
              kind: :spec,
              good: fn -> IPC.to_map(held_export()) end,
              names: [:spec, :handle, :dtype, :shape, :data_size]
            }
          ])
        ]
      }
    ]
  end

  # The door to another runtime's tensors: Module.To(tensor, options) gives
  # one, Module.From(that) (with options where from_options) takes it back.
  # The module is compiled only where the runtime is: called by apply/3.
  # Nx's row: its two functions, and a safetensors file written from an Nx
  # tensor (write/3 takes Nx tensors of any backend).
  defp nx_row do
    row = runtime_row(:nx, :nx, TensorBlob.Nx, {:to_nx, :from_nx}, :tensor, true)

    write =
      call("SafeTensors.write/3 of an Nx tensor", fn [p, nx, m] -> SafeTensors.write(p, %{"t" => nx}, m) end, [
        %{name: :path, kind: :path, good: fn -> safetensors_target("nx_write") end},
        %{
          name: :tensor,
          kind: :foreign,
          good: fn -> apply(TensorBlob.Nx, :to_nx, [Tensor.zeros({4}, :uint8), []]) end,
          names: [:tensor, :tensors]
        },
        %{name: :metadata, kind: :metadata, good: fn -> %{} end}
      ])

    %{row | calls: row.calls ++ [write]}
  end

  defp runtime_row(door, tag, module, {to, from}, foreign_name, from_options) do
    name = fn function, arity -> "#{inspect(module)}.#{function}/#{arity}" end

    foreign = %{
      name: foreign_name,
      kind: :foreign,
      good: fn -> apply(module, to, [Tensor.zeros({4}, :uint8), []]) end,
      names: [foreign_name, :tensor]
    }

    from_call =
      if from_options,
        do: call(name.(from, 2), fn args -> apply(module, from, args) end, [foreign, keywords()]),
        else: call(name.(from, 1), fn args -> apply(module, from, args) end, [foreign])

    %{
      door: door,
      tag: tag,
      calls: [
        call(name.(to, 2), fn args -> apply(module, to, args) end, [tensor(), keywords()]),
        from_call
      ]
    }
  end

  # The Python door's batch calls: many tensors in one crossing each way.
  defp python_batch_calls do
    python = TensorBlob.Python

    [
      call("TensorBlob.Python.to_python_many/2", fn args -> apply(python, :to_python_many, args) end, [
        %{name: :tensors, kind: :tensors, good: fn -> %{"a" => Tensor.zeros({4}, :uint8), "b" => []} end},
        keywords()
      ]),
      call("TensorBlob.Python.from_python_many/1", fn args -> apply(python, :from_python_many, args) end, [
        %{
          name: :object,
          kind: :foreign,
          good: fn -> apply(python, :to_python_many, [%{"a" => Tensor.zeros({4}, :uint8)}, []]) end,
          names: [:object, :tensors]
        }
      ])
    ]
  end

  # Torchx's row: the Nx door with Torchx's backend, both ways (a Torchx
  # tensor's memory is libtorch's, not a binary's).
  defp torchx_row do
    foreign = %{
      name: :tensor,
      kind: :foreign,
      good: fn -> apply(Nx, :tensor, [[1, 2, 3, 4], [type: :u8, backend: Torchx.Backend]]) end
    }

    %{
      door: :torchx,
      tag: :torchx,
      apps: [:nx],
      calls: [
        call(
          "TensorBlob.Nx.to_nx/2, backend: Torchx.Backend",
          fn args -> apply(TensorBlob.Nx, :to_nx, args) end,
          [tensor(), keywords(backend: Torchx.Backend)]
        ),
        call("TensorBlob.Nx.from_nx/2 of a Torchx tensor", fn args -> apply(TensorBlob.Nx, :from_nx, args) end, [
          foreign,
          keywords()
        ])
      ]
    }
  end

  # ExTorch's row, and its view: ExTorch writes what it is given a view
  # of, so a read-only tensor is refused there.
  defp extorch_row do
    row = runtime_row(:extorch, :extorch, TensorBlob.ExTorch, {:to_extorch, :from_extorch}, :tensor, false)

    unsafe_view =
      call(
        "TensorBlob.ExTorch.to_extorch/2, unsafe_view: true",
        fn [t] -> apply(TensorBlob.ExTorch, :to_extorch, [t, [unsafe_view: true]]) end,
        [tensor()],
        true
      )

    # ExTorch's tensor functions read its device registry: its
    # application runs, as it does in a project that depends on it.
    Map.put(%{row | calls: row.calls ++ [unsafe_view]}, :apps, [:extorch])
  end

  # An export whose tensor (and so its region) lives as long as the VM:
  # what IPC.open/1 opens, from any process, at any time.
  # Made once, under a lock: two processes asking first at once (the
  # battery's "2 processes at once" case, when a seed runs it first) must
  # not each make one, the second put over the first while its region is
  # in use.
  defp held_export do
    with nil <- :persistent_term.get({__MODULE__, :export}, nil) do
      :global.trans({{__MODULE__, :export}, self()}, fn ->
        with nil <- :persistent_term.get({__MODULE__, :export}, nil) do
          handle = IPC.export(Tensor.zeros({4}, :uint8))
          :persistent_term.put({__MODULE__, :export}, handle)
          handle
        end
      end)
    end
  end

  # A directory of the battery's files, made once, removed when the VM
  # exits; a target in it (its temporary files are the writer's own).
  defp safetensors_target(name) do
    dir =
      with nil <- :persistent_term.get({__MODULE__, :safetensors_dir}, nil) do
        dir = Path.join(System.tmp_dir!(), "tb_doors_#{System.unique_integer([:positive])}")
        File.mkdir_p!(dir)
        System.at_exit(fn _ -> File.rm_rf(dir) end)
        :persistent_term.put({__MODULE__, :safetensors_dir}, dir)
        dir
      end

    Path.join(dir, name <> ".safetensors")
  end

  # A file that open/2 opens, for the VM's life.
  defp safetensors_file do
    path = safetensors_target("open")

    unless File.exists?(path) do
      # Made once even where two processes ask at once (the battery's
      # concurrent calls): each writes a file of its own and links it to the
      # name, which only the first link takes. Writing the name itself would
      # rename a new file over one the other process has open, and its
      # tensor's file would then be "replaced".
      own = "#{path}.#{System.unique_integer([:positive])}"
      :ok = SafeTensors.write(own, %{"t" => Tensor.zeros({4}, :uint8)}, %{"k" => "v"})
      _ = File.ln(own, path)
      File.rm!(own)
    end

    path
  end

  # The index of a sharded checkpoint whose one shard is safetensors_file(),
  # made once as that file is.
  defp safetensors_index do
    shard = safetensors_file()
    path = Path.join(Path.dirname(shard), "model.safetensors.index.json")

    unless File.exists?(path) do
      own = "#{path}.#{System.unique_integer([:positive])}"
      File.write!(own, ~s({"weight_map": {"t": "#{Path.basename(shard)}"}}))
      _ = File.ln(own, path)
      File.rm!(own)
    end

    path
  end

  # A tensor of a mapped file.
  defp file_tensor, do: SafeTensors.open(safetensors_file()).tensors["t"]

  # The tensor written alone, opened, and its bytes read back as written
  # (a MatchError where they differ: no error of the contract).
  defp safetensors_round_trip([path, t, metadata]) do
    :ok = SafeTensors.write(path, %{"t" => t}, metadata)
    %{tensors: %{"t" => read}} = SafeTensors.open(path)
    {shape, dtype, bytes} = {Tensor.shape(t), Tensor.dtype(t), Tensor.to_binary(t)}
    {^shape, ^dtype, ^bytes} = {Tensor.shape(read), Tensor.dtype(read), Tensor.to_binary(read)}
    read
  end

  # The application env's Key set to Value for the length of fun.
  defp with_env(key, value, fun) do
    old = Application.fetch_env(:tensor_blob, key)
    Application.put_env(:tensor_blob, key, value)

    try do
      fun.()
    after
      case old do
        {:ok, v} -> Application.put_env(:tensor_blob, key, v)
        :error -> Application.delete_env(:tensor_blob, key)
      end
    end
  end

  # The first of PYTHON, /usr/bin/python3, python3 there is (nil when
  # none is).
  def python do
    Enum.find_value([System.get_env("PYTHON"), "/usr/bin/python3", "python3"], &(&1 && System.find_executable(&1)))
  end

  # The Python module's open/1, run by python/0 on
  # the term as Python holds it (python_literal/1): what it answers, or its
  # error raised here with the reason and the argument the Python error
  # carries. Any other Python exception is a RuntimeError: no error of the
  # contract.
  defp python_module(function, arg) do
    code = """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import tensor_blob
    try:
        getattr(tensor_blob, sys.argv[2])(eval(sys.argv[3], {"Ref": object}), torch=False)
        print(json.dumps({"ok": True}))
    except tensor_blob.Error as e:
        print(json.dumps({"reason": e.reason, "argument": e.argument, "message": str(e)}))
    except Exception as e:
        print(json.dumps({"raised": repr(e)}))
    """

    dir = Path.join(:code.priv_dir(:tensor_blob), "python")

    {out, 0} =
      System.cmd(python(), ["-c", code, dir, Atom.to_string(function), python_literal(arg)], stderr_to_stdout: true)

    case TensorBlob.IPC.JSON.decode(String.trim(out), :fallback) do
      {:ok, %{"ok" => true}} ->
        :ok

      {:ok, %{"reason" => reason, "argument" => argument, "message" => message}} ->
        TensorBlob.Raise.badarg!(message, String.to_existing_atom(reason), String.to_existing_atom(argument))

      other ->
        raise "tensor_blob.#{function} raised no error of the module: #{inspect(other)}"
    end
  end

  # A term as a Python expression: what the JSON a BEAM node prints holds
  # as Python's values, tuples as tuples, and a term Python has no value
  # for (a reference, a pid) as an object of no type the module takes.
  defp python_literal(nil), do: "None"
  defp python_literal(true), do: "True"
  defp python_literal(false), do: "False"
  defp python_literal(a) when is_atom(a), do: python_literal(Atom.to_string(a))
  defp python_literal(n) when is_integer(n) or is_float(n), do: to_string(n)

  defp python_literal(b) when is_binary(b) do
    if String.printable?(b), do: inspect(b), else: "bytes(" <> inspect(:binary.bin_to_list(b)) <> ")"
  end

  defp python_literal(l) when is_list(l), do: "[" <> Enum.map_join(l, ", ", &python_literal/1) <> "]"

  defp python_literal(t) when is_tuple(t),
    do: "(" <> Enum.map_join(Tuple.to_list(t), "", &(python_literal(&1) <> ", ")) <> ")"

  defp python_literal(m) when is_map(m),
    do: "{" <> Enum.map_join(m, ", ", fn {k, v} -> python_literal(k) <> ": " <> python_literal(v) end) <> "}"

  defp python_literal(_), do: "Ref()"
end
