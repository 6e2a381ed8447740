# The dtype table and the reasons of the shipped Python module
# (priv/python/tensor_blob.py), from the library's own (tensor_blob:tables()):
# rewrites the blocks between its "BEGIN generated dtypes" and "END
# generated dtypes" lines, and "BEGIN generated reasons" and "END generated
# reasons".
#
#     mix run scripts/gen_python_dtypes.exs           rewrite it
#     mix run scripts/gen_python_dtypes.exs --check   exit 1 if it is stale
#
# test/python_dtypes_test.exs checks what Python reads against tables().

file = Path.expand("../priv/python/tensor_blob.py", __DIR__)
text = File.read!(file)

rows =
  for d <- TensorBlob.tables().dtypes do
    ~s|    "#{d.name}": ("#{d.kind}", #{d.element_size}),\n|
  end

reasons = for r <- TensorBlob.tables().reasons, do: ~s|    "#{r}",\n|

replace = fn text, name, block ->
  [head, rest] = String.split(text, "# BEGIN generated #{name}\n", parts: 2)
  [_old, tail] = String.split(rest, "# END generated #{name}\n", parts: 2)
  head <> "# BEGIN generated #{name}\n" <> IO.iodata_to_binary(block) <> "# END generated #{name}\n" <> tail
end

new =
  text
  |> replace.("dtypes", ["_DTYPES = {\n", rows, "}\n"])
  |> replace.("reasons", ["_REASONS = (\n", reasons, ")\n"])

cond do
  new == text ->
    :ok

  "--check" in System.argv() ->
    IO.puts(:stderr, "#{file}: its dtype table or reasons are stale: run mix run scripts/gen_python_dtypes.exs")
    System.halt(1)

  true ->
    File.write!(file, new)
    IO.puts(:stderr, "#{file}: dtype table and reasons rewritten")
end
