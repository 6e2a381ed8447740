# make docs-test: runs the code blocks of a Markdown file and checks what
# they claim. One VM per file: `mix run scripts/docs_test.exs FILE.md`.
#
# The convention (ARCHITECTURE.md, "Code blocks in the documentation"):
#
#   ```elixir        run here, in order; the blocks of a file share their
#                    variables and aliases, as in one IEx session
#   ```erlang        run in one `erl` per file, with the library's paths;
#                    the blocks of a file share their variables
#   ```elixir cuda   (or erlang cuda) run where TensorBlob.CUDA.available?()
#                    says true, parsed only elsewhere
#   ```elixir nocuda (or erlang nocuda) run where the linked libtorch has
#                    no CUDA (the errors it gives), parsed only elsewhere
#   ```elixir nx     (or torchx, extorch) run where Nx (Torchx, ExTorch)
#                    is loaded, parsed only elsewhere
#   ```elixir torch  run where the file's Python blocks have torch (they
#                    made what it opens), parsed only elsewhere
#   ```elixir telemetry  run where the telemetry library is on the code
#                    path, parsed only elsewhere
#   ```elixir quickstart  run, then saved as quick_start.exs in a fresh Mix
#                    project (as ```sh mix) and run with `mix run
#                    quick_start.exs`, which must print every value the
#                    block shows (each `# =>` with no `_` in it);
#                    quickstart named: run so in a named node (elixir
#                    --sname NAME -S mix run quick_start.exs)
#   ```elixir terminal-a (terminal-b) a recipe for two terminals: a's
#                    blocks in a node named a, b's in a node named b, two
#                    VMs of their own (this script, --terminal) against an
#                    epmd of the run's own; b's start once a's wait
#   ```elixir norun  (or erlang norun) parsed only: a snippet that is not a
#                    program (a mix.exs deps list, rebar.config)
#   ```c             compiled (-fsyntax-only) against priv/include
#   ```python        pasted, in order with the file's other blocks, into
#                    one interactive interpreter per file (python3 -q -i,
#                    the block written to its standard input, with
#                    scripts/docs_test.py as its start-up script: the
#                    blocks share their names, as one Python session, and
#                    a block that does not paste fails), with the
#                    library's priv/python on PYTHONPATH; PYTHON names the
#                    interpreter (default python3)
#   ```python torch  (or python cuda) run where torch imports (a GPU is
#                    there), parsed only elsewhere; python norun: parsed only
#   ```sh mix        run with bash in a scratch Mix project of its own (one
#                    per block), as a user's shell would: it depends on
#                    this checkout and on a dependency that prints while it
#                    compiles, MIX_ENV and PYTHONPATH are unset, and
#                    `python3` on its PATH is PYTHON; passes when bash exits
#                    0. ```sh mix torch: run where PYTHON imports torch,
#                    parsed only (bash -n) elsewhere
#   anything else    (sh, text, ...) not code: counted, not run
#
# TMPDIR is a folder of the run's own, for the VM and Python alike: blocks
# of the two languages may hand each other files there.
#
# Inside a run block, a comment line states what the code above it gives:
#
#   expr  # => pattern             Elixir: the value matches the pattern
#   # => pattern                   (binding its variables, as = does); a
#                                  pattern starting with # is inspect output,
#                                  compared as text
#   # ** (ArgumentError) text      the last expression above raises that
#                                  exception, its message starting with text
#                                  (the expressions before it run as usual)
#   expr  # => text                Python: the repr of the value is text
#                                  ("..." matches anything)
#   # ** ValueError: text          Python: the last line raises that
#   Expr  % => Pattern             Erlang: the value matches Pattern
#   % ** error: Pattern            the last expression above raises error (or
#                                  throw, exit) with a reason matching Pattern
#
# The code "above" is everything since the previous such comment. A comment
# line that follows one of these and is indented by two or more spaces after
# the comment sign continues it.

defmodule DocsTest do
  @erlang_runner Path.expand("docs_test.erl", __DIR__)

  @python_runner Path.expand("docs_test.py", __DIR__)

  def main(["--terminal", which, file]), do: terminal(which, file)

  def main([file]) do
    tmp = Path.join(System.tmp_dir!(), "tb_docs_#{System.unique_integer([:positive])}")
    File.mkdir_p!(tmp)
    System.put_env("TMPDIR", tmp)
    text = File.read!(file)
    blocks = blocks(text)
    results = run_file(file, blocks)
    failures = for {:fail, line, msg} <- results, do: "#{file}:#{line}: #{msg}"
    counts = Enum.frequencies(for r <- results, do: elem(r, 0))

    IO.puts(
      "docs-test #{file}: #{length(blocks)} blocks: #{counts[:ran] || 0} run, " <>
        "#{counts[:parsed] || 0} parsed only, #{counts[:text] || 0} not code, " <>
        "#{length(failures)} failed"
    )

    # Python drops what its blocks hold while this VM still holds its side.
    python_quit()
    File.rm_rf!(tmp)

    if failures != [] do
      Enum.each(failures, &IO.puts(:stderr, &1))
      System.halt(1)
    end
  end

  # [{line, lang, tags, body_lines :: [{line, text}]}]
  def blocks(text) do
    text
    |> String.split("\n")
    |> Enum.with_index(1)
    |> collect(nil, [])
  end

  defp collect([], nil, acc), do: Enum.reverse(acc)
  defp collect([], {line, _, _, _}, _acc), do: raise("unclosed code block opened at line #{line}")

  defp collect([{text, n} | rest], nil, acc) do
    case Regex.run(~r/^```\s*([\w+-]*)\s*(.*)$/, text) do
      [_, lang, tags] -> collect(rest, {n, lang, String.split(tags), []}, acc)
      nil -> collect(rest, nil, acc)
    end
  end

  defp collect([{text, n} | rest], {line, lang, tags, body} = open, acc) do
    if String.trim_trailing(text) == "```" do
      collect(rest, nil, [{line, lang, tags, Enum.reverse(body)} | acc])
    else
      collect(rest, put_elem(open, 3, [{n, text} | body]), acc)
    end
  end

  defp run_file(file, blocks) do
    Process.put(:docs_file, file)
    env = Code.env_for_eval(file: file)
    gpu? = TensorBlob.CUDA.available?()
    cuda_torch? = TensorBlob.CUDA.runtime().libtorch
    loaded? = fn mod -> Code.ensure_loaded?(mod) end
    # Nx from NX_PATH is on the code path, not a dependency: start it as a
    # project depending on it would.
    if loaded?.(Nx), do: {:ok, _} = Application.ensure_all_started(:nx)
    if loaded?.(:telemetry), do: {:ok, _} = Application.ensure_all_started(:telemetry)
    if loaded?.(ExTorch.Tensor.Blob), do: {:ok, _} = Application.ensure_all_started(:extorch)
    # Pythonx from PYTHONX_PATH likewise (its guide blocks call Pythonx.init).
    if loaded?.(Pythonx), do: {:ok, _} = Application.ensure_all_started(:pythonx)

    decide = fn tags ->
      cond do
        "norun" in tags -> :parse
        "cuda" in tags and not gpu? -> :parse
        "nocuda" in tags and cuda_torch? -> :parse
        "nx" in tags and not loaded?.(Nx) -> :parse
        "torchx" in tags and not loaded?.(Torchx) -> :parse
        "extorch" in tags and not loaded?.(ExTorch.Tensor.Blob) -> :parse
        "pythonx" in tags and not loaded?.(Pythonx) -> :parse
        "torch" in tags and not (python() != nil and python_torch?()) -> :parse
        "telemetry" in tags and not loaded?.(:telemetry) -> :parse
        true -> :run
      end
    end

    {elixir_results, state} =
      Enum.map_reduce(blocks, {[], env}, fn
        {line, "elixir", ["terminal-" <> _ | _], body}, state ->
          {{:terminal, line, body}, state}

        {line, "elixir", tags, body}, {binding, env} ->
          case {decide.(tags), "quickstart" in tags} do
            {:parse, _} ->
              {parse_elixir(line, body), {binding, env}}

            {:run, false} ->
              run_elixir(line, body, binding, env)

            {:run, true} ->
              case run_elixir(line, body, binding, env) do
                {{:ran, _}, state} -> {run_quick_start(line, body, "named" in tags), state}
                failed -> failed
              end
          end

        {line, "erlang", tags, body}, state ->
          {{:erlang, line, decide.(tags), body}, state}

        {line, "c", _tags, body}, state ->
          {compile_c(line, body), state}

        {line, "python", tags, body}, state ->
          cond do
            python() == nil -> {{:text}, state}
            "norun" in tags -> {parse_python(line, body), state}
            "cuda" in tags and not gpu? -> {parse_python(line, body), state}
            "torch" in tags and not python_torch?() -> {parse_python(line, body), state}
            true -> {run_python(line, body), state}
          end

        {line, "sh", tags, body}, state ->
          cond do
            "mix" not in tags -> {{:text}, state}
            "torch" in tags and not (python() != nil and python_torch?()) -> {parse_sh(line, body), state}
            true -> {run_sh_mix(line, body), state}
          end

        {_line, _lang, _tags, _body}, state ->
          {{:text}, state}
      end)

    # The Elixir blocks' variables stay alive while the Erlang blocks run:
    # an Erlang block may be another OS process using what they made.
    Process.put(:docs_test_binding, state)
    erlang = for {:erlang, line, how, body} <- elixir_results, do: {line, how, body}
    erlang_results = if erlang == [], do: [], else: run_erlang(erlang)

    terminals = for {:terminal, line, _} <- elixir_results, do: line
    terminal_results = if terminals == [], do: [], else: run_terminals(file, terminals)

    Enum.flat_map(elixir_results, fn
      {:erlang, _, _, _} -> []
      {:terminal, _, _} -> []
      {:text} -> [{:text}]
      result -> [result]
    end) ++ erlang_results ++ terminal_results
  end

  # ```elixir terminal-a and terminal-b: a recipe for two terminals, each
  # an `iex --sname a -S mix` (or b) in a project depending on tensor_blob.
  # Run here in two nodes named a and b, each a VM of its own running its
  # blocks (this script, --terminal), against an epmd of the run's own
  # (a port of its own: no clash with anyone's a or b). b starts its blocks
  # once a's are waiting for a message, as the guide says to start a first.
  defp run_terminals(file, [line | _]) do
    port = 20_000 + rem(System.unique_integer([:positive]) + String.to_integer(System.pid()), 40_000)
    dir = Path.join(System.tmp_dir!(), "tb_docs_terminals_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    env = [{~c"ERL_EPMD_PORT", ~c"#{port}"}, {~c"TB_DOCS_TERMINALS", String.to_charlist(dir)}]
    a = start_terminal("a", file, env)
    b = start_terminal("b", file, env)
    # a ends once b has asked (or fails); b then has its answer.
    {status_a, out_a} = await_terminal(a, 600_000)
    {status_b, out_b} = await_terminal(b, if(status_a == 0, do: 120_000, else: 0))
    System.cmd("epmd", ["-port", Integer.to_string(port), "-kill"], stderr_to_stdout: true)
    File.rm_rf!(dir)

    # Each says how many blocks it ran as its last line: a node stopped
    # from outside also exits with 0.
    if status_a == 0 and status_b == 0 and out_a =~ "terminal a: ran" and out_b =~ "terminal b: ran",
      do: [{:ran, line}],
      else: [
        {:fail, line, "the two terminals failed:\nnode a (#{status_a}):\n#{out_a}\nnode b (#{status_b}):\n#{out_b}"}
      ]
  end

  defp start_terminal(name, file, env) do
    args = ["--sname", name, "-S", "mix", "run", "--no-compile", __ENV__.file, "--terminal", name, file]

    Port.open({:spawn_executable, System.find_executable("elixir")}, [
      :binary,
      :exit_status,
      :stderr_to_stdout,
      args: args,
      env: env
    ])
  end

  # {exit status, output}; one still running after timeout ms is killed.
  defp await_terminal(port, timeout, acc \\ "") do
    receive do
      {^port, {:data, data}} -> await_terminal(port, timeout, acc <> data)
      {^port, {:exit_status, status}} -> {status, acc}
    after
      timeout ->
        {:os_pid, pid} = Port.info(port, :os_pid)
        System.cmd("kill", ["-9", Integer.to_string(pid)])
        {:killed, acc <> "\n(killed: still running)"}
    end
  end

  # One terminal's blocks, in a node named a or b.
  def terminal(which, file) do
    blocks = for {line, "elixir", ["terminal-" <> ^which | _], body} <- blocks(File.read!(file)), do: {line, body}
    dir = System.fetch_env!("TB_DOCS_TERMINALS")
    [_, host] = String.split(Atom.to_string(node()), "@")

    case which do
      "a" -> File.write!(Path.join(dir, "a.pid"), :erlang.term_to_binary(self()))
      "b" -> wait_for_terminal_a(:"a@#{host}", Path.join(dir, "a.pid"), 1200)
    end

    env = Code.env_for_eval(file: file)

    {failures, _} =
      Enum.reduce(blocks, {[], {[], env}}, fn {line, body}, {failures, state} ->
        {binding, env} = state

        case run_elixir(line, body, binding, env) do
          {{:ran, _}, state} -> {failures, state}
          {{:fail, at, msg}, state} -> {["#{file}:#{at}: terminal #{which}: #{msg}" | failures], state}
        end
      end)

    Enum.each(Enum.reverse(failures), &IO.puts(:stderr, &1))
    if failures == [], do: IO.puts("terminal #{which}: ran #{length(blocks)} blocks")
    System.halt(if failures == [], do: 0, else: 1)
  end

  # Until a's blocks wait for a message (a named process of a's, waiting),
  # checked every 100 ms, for at most tries times.
  defp wait_for_terminal_a(_a, _pid_file, 0), do: raise("terminal a did not get to wait for a message")

  defp wait_for_terminal_a(a, pid_file, tries) do
    ready =
      with true <- Node.connect(a),
           {:ok, bin} <- File.read(pid_file),
           pid = :erlang.binary_to_term(bin),
           [status: :waiting] <- :erpc.call(a, Process, :info, [pid, [:status]]),
           {:registered_name, name} when is_atom(name) <- :erpc.call(a, Process, :info, [pid, :registered_name]) do
        true
      else
        _ -> false
      end

    unless ready do
      Process.sleep(100)
      wait_for_terminal_a(a, pid_file, tries - 1)
    end
  end

  # ```elixir quickstart: also run as a user runs it, `mix run
  # quick_start.exs` in a fresh Mix project depending on this checkout; it
  # must print every value the block shows (each `# =>` that is not a
  # pattern with `_` in it appears in what it printed, as inspect prints it).
  # ```elixir quickstart named: the same in a named node (`elixir --sname
  # NAME -S mix run quick_start.exs`), where the script's own functions are
  # a module that other nodes lack.
  defp run_quick_start(line, body, named?) do
    code = Enum.map_join(body, "\n", &elem(&1, 1))
    shown = for {_, _, {:value, text}} <- chunks(body, "#"), not String.contains?(text, "_"), do: text

    in_mix_project(
      line,
      fn project ->
        File.write!(Path.join(project, "quick_start.exs"), code)
        run = "mix run quick_start.exs"
        if named?, do: "mix compile >/dev/null && elixir --sname tb_quick_$$ -S #{run}", else: run
      end,
      fn out ->
        case Enum.reject(shown, &String.contains?(squash(out), squash(&1))) do
          [] when out != "" -> :ok
          [] -> {:fail, "mix run quick_start.exs printed nothing"}
          missing -> {:fail, "mix run quick_start.exs did not print #{Enum.join(missing, "; ")}:\n#{out}"}
        end
      end
    )
  end

  # Chunks: [{first_line, code, expectation}], expectation nil,
  # {:value, text} or {:raise, text}.
  def chunks(body, comment) do
    expect = ~r/^\s*(.*?)\s*#{comment}\s*(=>|\*\*)\s*(.*)$/

    {chunks, current, _} =
      Enum.reduce(body, {[], {nil, []}, nil}, fn {n, text}, {chunks, {start, code}, last} ->
        continuation = Regex.run(~r/^\s*#{comment}\s{2,}(\S.*)$/, text)

        cond do
          last != nil and continuation != nil ->
            [{s, c, {kind, exp}} | others] = chunks
            {[{s, c, {kind, exp <> " " <> Enum.at(continuation, 1)}} | others], {start, code}, last}

          match = Regex.run(expect, text) ->
            [_, before, arrow, exp] = match
            code = if before == "", do: code, else: [before | code]
            kind = if arrow == "=>", do: :value, else: :raise
            chunk = {start || n, code |> Enum.reverse() |> Enum.join("\n"), {kind, exp}}
            {[chunk | chunks], {nil, []}, kind}

          true ->
            {chunks, {start || n, [text | code]}, nil}
        end
      end)

    tail =
      case current do
        {nil, _} -> []
        {start, code} -> [{start, code |> Enum.reverse() |> Enum.join("\n"), nil}]
      end

    Enum.reverse(chunks) ++ tail
  end

  defp parse_elixir(line, body) do
    code = Enum.map_join(body, "\n", &elem(&1, 1))

    case Code.string_to_quoted(code) do
      {:ok, _} -> {:parsed, line}
      {:error, error} -> {:fail, line, "does not parse: #{inspect(error)}"}
    end
  end

  defp run_elixir(line, body, binding, env) do
    Enum.reduce_while(chunks(body, "#"), {{:ran, line}, {binding, env}}, fn
      {start, code, expect}, {_, {binding, env}} ->
        case eval_chunk(start, code, expect, binding, env) do
          {:ok, binding, env} -> {:cont, {{:ran, line}, {binding, env}}}
          {:fail, msg} -> {:halt, {{:fail, start, msg}, {binding, env}}}
        end
    end)
  end

  # Before a raise expectation, the expressions before the last run as
  # usual (their bindings kept); the last one must raise.
  defp eval_chunk(start, code, expect, binding, env) do
    result =
      try do
        quoted = Code.string_to_quoted!(code, file: env.file, line: start)

        case {expect, quoted} do
          {{:raise, _}, {:__block__, meta, [_, _ | _] = exprs}} ->
            {init, [last]} = Enum.split(exprs, -1)
            {_, binding, env} = Code.eval_quoted_with_env({:__block__, meta, init}, binding, env)
            {:ready, last, binding, env}

          _ ->
            {:ready, quoted, binding, env}
        end
      rescue
        e -> {:raised, e, __STACKTRACE__}
      end

    case result do
      {:ready, quoted, binding, env} ->
        result =
          try do
            {:ok, Code.eval_quoted_with_env(quoted, binding, env)}
          rescue
            e -> {:raised, e, __STACKTRACE__}
          end

        check_elixir(result, expect, binding, env)

      raised ->
        check_elixir(raised, nil, binding, env)
    end
  end

  defp check_elixir({:ok, {_value, binding, env}}, nil, _, _), do: {:ok, binding, env}

  defp check_elixir({:ok, {value, binding, env}}, {:value, "#" <> _ = text}, _, _) do
    if squash(inspect(value)) == squash(text),
      do: {:ok, binding, env},
      else: {:fail, "inspect gives #{inspect(value)}, the block says #{text}"}
  end

  defp check_elixir({:ok, {value, binding, env}}, {:value, pattern}, _, _) do
    quoted = Code.string_to_quoted!("(#{pattern}) = docs_value__", file: env.file)

    try do
      {_, binding, env} = Code.eval_quoted_with_env(quoted, [{:docs_value__, value} | binding], env)
      {:ok, Keyword.delete(binding, :docs_value__), env}
    rescue
      MatchError -> {:fail, "gives #{inspect(value)}, which does not match #{pattern}"}
      e -> {:fail, "# => #{pattern}: not a pattern (#{Exception.message(e)})"}
    end
  end

  defp check_elixir({:ok, {value, _, _}}, {:raise, text}, _, _),
    do: {:fail, "should raise #{text}, but gives #{inspect(value)}"}

  # A chunk that raised binds nothing: the binding before it goes on.
  defp check_elixir({:raised, e, stack}, {:raise, text}, binding, env) do
    shown = "(#{inspect(e.__struct__)}) #{Exception.message(e)}"

    if String.starts_with?(squash(shown), squash(text)),
      do: {:ok, binding, env},
      else: {:fail, "raises #{shown}\n  the block says ** #{text}\n#{Exception.format_stacktrace(stack)}"}
  end

  defp check_elixir({:raised, e, stack}, _, _, _),
    do: {:fail, "raises #{Exception.format(:error, e, stack)}"}

  defp squash(text), do: text |> String.split() |> Enum.join(" ")

  defp compile_c(line, body) do
    code = Enum.map_join(body, "\n", &elem(&1, 1))
    dir = Path.join(System.tmp_dir!(), "tb_docs_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    src = Path.join(dir, "block.c")
    File.write!(src, code)
    priv = :code.priv_dir(:tensor_blob) |> to_string()
    erts = Path.join([:code.root_dir(), "erts-#{:erlang.system_info(:version)}", "include"])

    {out, status} =
      System.cmd("cc", ["-fsyntax-only", "-std=c11", "-Wall", "-Werror", "-I#{priv}/include", "-I#{erts}", src],
        stderr_to_stdout: true
      )

    File.rm_rf!(dir)
    if status == 0, do: {:ran, line}, else: {:fail, line, "does not compile:\n#{out}"}
  end

  # All Erlang blocks of the file in one erl, in order, sharing bindings.
  defp run_erlang(blocks) do
    dir = Path.join(System.tmp_dir!(), "tb_docs_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    input = Path.join(dir, "in")
    output = Path.join(dir, "out")

    items =
      for {line, how, body} <- blocks do
        chunks = for {s, code, exp} <- chunks(body, "%"), do: {s, String.to_charlist(code), charlist(exp)}
        {line, how, chunks}
      end

    File.write!(input, :erlang.term_to_binary(items))
    ebin = :tensor_blob |> :code.lib_dir() |> Path.join("ebin")

    eval =
      ~s|{ok, M, B} = compile:file("#{@erlang_runner}", [binary, report]), | <>
        ~s|{module, M} = code:load_binary(M, "docs_test.erl", B), | <>
        ~s|M:main("#{input}", "#{output}"), halt().|

    {out, status} = System.cmd("erl", ["-noshell", "-pa", ebin, "-eval", eval], stderr_to_stdout: true)

    results =
      case File.read(output) do
        {:ok, bin} when status == 0 -> :erlang.binary_to_term(bin)
        _ -> [{:fail, elem(hd(blocks), 0), "erl stopped (status #{status}):\n#{out}"}]
      end

    File.rm_rf!(dir)

    Enum.map(results, fn
      {:fail, line, msg} -> {:fail, line, to_string(msg)}
      other -> other
    end)
  end

  # Python: one interactive interpreter per file (`python3 -q -i`, with
  # scripts/docs_test.py as its start-up script), started at its first
  # python block. Each piece of a block is written to its standard input as
  # a user pastes it, then a mark; what the interpreter says up to the mark
  # is that piece's result (docs_test.py says how it is framed).
  defp python do
    case System.get_env("PYTHON", "") do
      "" -> System.find_executable("python3")
      python -> System.find_executable(python)
    end
  end

  defp python_port do
    with nil <- Process.get(:docs_python) do
      priv_python = Path.join(to_string(:code.priv_dir(:tensor_blob)), "python")

      port =
        Port.open({:spawn_executable, python()}, [
          :binary,
          :exit_status,
          :stderr_to_stdout,
          args: ["-q", "-u", "-i", @python_runner, Process.get(:docs_file, "<docs>")],
          env: [{~c"PYTHONPATH", String.to_charlist(priv_python)}]
        ])

      Process.put(:docs_python, port)
      port
    end
  end

  # Writes code to the interpreter, then a mark; what it said up to the
  # mark: {:ok, [{:value, repr} | {:error, text}], output} or {:fail, why}.
  defp python_paste(code) do
    port = python_port()
    n = System.unique_integer([:positive])
    Port.command(port, code <> "\n\n__docs_mark__(#{n})\n")
    python_read(port, "\x01mark #{n}\x02", "")
  end

  defp python_read(port, mark, acc) do
    case :binary.split(acc, mark) do
      [said, _] ->
        events =
          for [_, kind, text] <- Regex.scan(~r/\x01(value|error) (.*?)\x02/s, said),
              do: {String.to_atom(kind), text}

        {:ok, events, said}

      [_] ->
        receive do
          {^port, {:data, data}} -> python_read(port, mark, acc <> data)
          {^port, {:exit_status, status}} -> {:fail, "python exited (status #{status}):\n#{acc}"}
        after
          300_000 -> {:fail, "python did not answer in 300 s:\n#{acc}"}
        end
    end
  end

  defp python_quit do
    if port = Process.get(:docs_python) do
      Port.command(port, "__docs_quit__()\n")

      receive do
        {^port, {:exit_status, _}} -> :ok
      after
        60_000 -> :ok
      end
    end
  end

  defp python_torch? do
    with nil <- Process.get(:docs_python_torch) do
      torch? = match?({:ok, [{:value, "True"}], _}, python_paste("__docs_has_torch__()"))
      Process.put(:docs_python_torch, torch?)
      torch?
    end
  end

  # Parsed as the interpreter reads pasted lines, nothing run.
  defp parse_python(line, body) do
    code = Enum.map_join(body, "\n", &elem(&1, 1))

    case python_paste("__docs_parse__(#{inspect(Base.encode64(code))})") do
      {:ok, [], _} -> {:parsed, line}
      {:ok, _, said} -> {:fail, line, "does not paste into python3:\n#{said}"}
      {:fail, why} -> {:fail, line, why}
    end
  end

  defp run_python(line, body) do
    Enum.reduce_while(chunks(body, "#"), {:ran, line}, fn {start, code, expect}, acc ->
      case python_paste(code) |> python_check(expect) do
        :ok -> {:cont, acc}
        {:fail, why} -> {:halt, {:fail, start, why}}
      end
    end)
  end

  defp python_check({:fail, why}, _expect), do: {:fail, why}

  defp python_check({:ok, events, said}, expect) do
    errors = for {:error, text} <- events, do: text
    values = for {:value, text} <- events, do: text

    case {expect, errors} do
      {nil, []} ->
        :ok

      {{:value, text}, []} ->
        shown = List.last(values)

        cond do
          shown == nil -> {:fail, "shows no value, the block says #{text}"}
          python_matches?(shown, text) -> :ok
          true -> {:fail, "shows #{shown}, the block says #{text}"}
        end

      {{:raise, text}, [error]} ->
        if String.starts_with?(squash(error), squash(text)),
          do: :ok,
          else: {:fail, "raises #{error}, the block says ** #{text}"}

      {{:raise, text}, []} ->
        {:fail, "should raise #{text}, but does not"}

      {_, _} ->
        {:fail, "python3 said:\n#{said}"}
    end
  end

  # The shown repr against the block's text, "..." matching anything.
  defp python_matches?(shown, text) do
    pattern = text |> squash() |> String.split("...") |> Enum.map_join(".*", &Regex.escape/1)
    Regex.match?(~r/\A#{pattern}\z/s, squash(shown))
  end

  defp parse_sh(line, body) do
    case System.cmd("bash", ["-n", "-c", Enum.map_join(body, "\n", &elem(&1, 1))], stderr_to_stdout: true) do
      {_, 0} -> {:parsed, line}
      {out, _} -> {:fail, line, "does not parse: #{out}"}
    end
  end

  # A ```sh mix block, in a user's Mix project: it depends on this checkout
  # (a path dependency, built in the project's _build as any dependency is)
  # and on `noisy`, a dependency that prints while it compiles, as Nx's
  # recipe in guides/nx.md does. What Mix prints must not get in the
  # block's way.
  defp run_sh_mix(line, body) do
    code = Enum.map_join(body, "\n", &elem(&1, 1))
    in_mix_project(line, fn _project -> code end, fn _out -> :ok end)
  end

  # A fresh Mix project as run_sh_mix/2 says; setup.(project) writes what
  # it needs there and gives the bash code to run; check.(output) after bash
  # exits 0.
  defp in_mix_project(line, setup, check) do
    dir = Path.join(System.tmp_dir!(), "tb_docs_mix_#{System.unique_integer([:positive])}")
    project = Path.join(dir, "app")
    noisy = Path.join(dir, "noisy")
    bin = Path.join(dir, "bin")
    root = Path.expand("..", __DIR__)

    File.mkdir_p!(Path.join(project, "lib"))
    File.mkdir_p!(Path.join(noisy, "lib"))
    File.mkdir_p!(bin)

    File.write!(Path.join(project, "mix.exs"), """
    defmodule DocsApp.MixProject do
      use Mix.Project

      def project do
        [app: :docs_app, version: "0.1.0",
         deps: [{:tensor_blob, path: #{inspect(root)}}, {:noisy, path: #{inspect(noisy)}}]]
      end
    end
    """)

    File.write!(Path.join(project, "lib/docs_app.ex"), "defmodule DocsApp do\nend\n")

    File.write!(Path.join(noisy, "mix.exs"), """
    defmodule Noisy.MixProject do
      use Mix.Project
      def project, do: [app: :noisy, version: "0.1.0", compilers: [:noisy | Mix.compilers()]]
    end

    defmodule Mix.Tasks.Compile.Noisy do
      use Mix.Task.Compiler
      def run(_) do
        IO.puts("noisy: a dependency that prints while it compiles")
        File.write!(#{inspect(Path.join(dir, "noisy.log"))}, "printed\\n", [:append])
        {:ok, []}
      end
    end
    """)

    File.write!(Path.join(noisy, "lib/noisy.ex"), "defmodule Noisy do\nend\n")
    if python(), do: File.ln_s!(python(), Path.join(bin, "python3"))

    env = [
      {"MIX_ENV", nil},
      {"PYTHONPATH", nil},
      {"PATH", bin <> ":" <> System.get_env("PATH", "")}
    ]

    code = setup.(project)

    {out, status} =
      System.cmd("bash", ["-eu", "-o", "pipefail", "-c", code], cd: project, env: env, stderr_to_stdout: true)

    printed? = File.exists?(Path.join(dir, "noisy.log"))
    File.rm_rf!(dir)

    cond do
      status != 0 ->
        {:fail, line, "bash exited with #{status}:\n#{out}"}

      not printed? ->
        {:fail, line, "no dependency printed: the block did not compile the project"}

      true ->
        case check.(out) do
          :ok -> {:ran, line}
          {:fail, why} -> {:fail, line, why}
        end
    end
  end

  defp charlist(nil), do: :none
  defp charlist({kind, text}), do: {kind, String.to_charlist(text)}
end

DocsTest.main(System.argv())
