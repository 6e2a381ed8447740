# The dtype table of the shipped Python module (priv/python/tensor_blob.py),
# from the library's own (tensor_blob:tables()): rewrites the block between
# its "BEGIN generated dtypes" and "END generated dtypes" lines.
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

block = IO.iodata_to_binary(["_DTYPES = {\n", rows, "}\n"])

[head, rest] = String.split(text, "# BEGIN generated dtypes\n", parts: 2)
[_old, tail] = String.split(rest, "# END generated dtypes\n", parts: 2)
new = head <> "# BEGIN generated dtypes\n" <> block <> "# END generated dtypes\n" <> tail

cond do
  new == text ->
    :ok

  "--check" in System.argv() ->
    IO.puts(:stderr, "#{file}: its dtype table is stale: run mix run scripts/gen_python_dtypes.exs")
    System.halt(1)

  true ->
    File.write!(file, new)
    IO.puts(:stderr, "#{file}: dtype table rewritten")
end
