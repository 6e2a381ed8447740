defmodule TensorBlob.SafeTensorsReferenceTest do
  # Files in the safetensors format both ways with the format's reference
  # implementation (Hugging Face's safetensors, with PyTorch), run as a
  # Python process: the reference's files open here with the same values,
  # and the files written here open in the reference with the same values.
  # Every dtype the format and the dtype table share (tables/0), metadata,
  # 0-dim and empty tensors, and a thousand small tensors. Tagged
  # :safetensors_reference: run where python3 imports safetensors and torch
  # (make safetensors-compat-test; the Debian 13 root has them).
  use ExUnit.Case, async: true

  alias TensorBlob.{SafeTensors, Tensor}

  @moduletag :safetensors_reference

  # The reference's dtypes by name, as PyTorch holds them.
  @python_common """
  import sys, json, torch
  import safetensors
  from safetensors.torch import save_file
  from safetensors import safe_open
  TYPES = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
           "I32": "int32", "U32": "uint32", "I64": "int64", "U64": "uint64", "F16": "float16",
           "BF16": "bfloat16", "F32": "float32", "F64": "float64", "F8_E4M3": "float8_e4m3fn",
           "F8_E5M2": "float8_e5m2", "C64": "complex64", "F8_E4M3FNUZ": "float8_e4m3fnuz",
           "F8_E5M2FNUZ": "float8_e5m2fnuz", "F8_E8M0": "float8_e8m0fnu"}
  def dtype_of(name):
      return getattr(torch, TYPES.get(name, "no such dtype"), None)
  def name_of(dtype):
      return next(n for n, t in TYPES.items() if getattr(torch, t, None) == dtype)
  def hexbytes(t):
      return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes().hex()
  """

  # argv: dir, the shared names (JSON). Writes reference.safetensors (each
  # dtype the reference writes, a 0-dim and an empty tensor, metadata) and
  # many.safetensors (1000 small tensors); prints what each holds.
  @python_write @python_common <>
                  """
                  out, names = sys.argv[1], json.loads(sys.argv[2])
                  tensors, refused = {}, {}
                  for n in names:
                      dt = dtype_of(n)
                      if dt is None:
                          refused[n] = "no such torch dtype"
                          continue
                      size = torch.empty((), dtype=dt).element_size()
                      raw = bytearray(((i * 37 + 11) % 256) if n != "BOOL" else i % 2 for i in range(6 * size))
                      t = torch.frombuffer(raw, dtype=torch.uint8).view(dt).reshape(2, 3).clone()
                      try:
                          save_file({"probe": t}, out + "/probe.safetensors")
                      except Exception as e:
                          refused[n] = str(e)
                          continue
                      tensors["t_" + n] = t
                  tensors["scalar"] = torch.tensor(3.5, dtype=torch.float32)
                  tensors["empty"] = torch.zeros((0, 4), dtype=torch.float64)
                  save_file(tensors, out + "/reference.safetensors", metadata={"format": "pt", "who": "reference"})
                  save_file({"m%d" % i: torch.full((3,), i, dtype=torch.int32) for i in range(1000)},
                            out + "/many.safetensors")
                  print(json.dumps({"version": safetensors.__version__, "refused": refused,
                                    "tensors": {k: [name_of(v.dtype), list(v.shape), hexbytes(v)]
                                                for k, v in tensors.items()}}))
                  """

  # argv: a file. Opens it with the reference; prints its metadata and
  # each tensor's dtype, shape and bytes.
  @python_read @python_common <>
                 """
                 with safe_open(sys.argv[1], framework="pt") as f:
                     meta = f.metadata()
                     ts = {k: f.get_tensor(k) for k in f.keys()}
                 print(json.dumps({"metadata": meta,
                                   "tensors": {k: [name_of(v.dtype), list(v.shape), hexbytes(v)]
                                               for k, v in ts.items()}}))
                 """

  setup do
    dir = Path.join(System.tmp_dir!(), "tb_safetensors_reference_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    on_exit(fn -> File.rm_rf!(dir) end)
    %{dir: dir}
  end

  defp python(script, args) do
    {out, status} = System.cmd(System.get_env("PYTHON", "python3"), ["-c", script | args], stderr_to_stdout: true)
    assert status == 0, out
    out |> String.split("\n", trim: true) |> List.last() |> json()
  end

  # The JSON the scripts print: objects, arrays, strings, integers.
  defp json(text) do
    {value, ""} = value(String.trim(text))
    value
  end

  defp value("{" <> rest), do: members(skip(rest), %{})
  defp value("[" <> rest), do: elements(skip(rest), [])
  defp value("\"" <> _ = s), do: string(s)
  defp value("null" <> rest), do: {nil, rest}

  defp value(s) do
    [digits] = Regex.run(~r/^-?\d+/, s)
    {String.to_integer(digits), binary_part(s, byte_size(digits), byte_size(s) - byte_size(digits))}
  end

  defp members("}" <> rest, acc), do: {acc, rest}

  defp members(s, acc) do
    {k, ":" <> rest} = string(s)
    {v, rest} = value(skip(rest))

    case skip(rest) do
      "," <> rest -> members(skip(rest), Map.put(acc, k, v))
      "}" <> rest -> {Map.put(acc, k, v), rest}
    end
  end

  defp elements("]" <> rest, acc), do: {Enum.reverse(acc), rest}

  defp elements(s, acc) do
    {v, rest} = value(s)

    case skip(rest) do
      "," <> rest -> elements(skip(rest), [v | acc])
      "]" <> rest -> {Enum.reverse([v | acc]), rest}
    end
  end

  defp string("\"" <> rest) do
    [whole, body] = Regex.run(~r/^((?:[^"\\]|\\.)*)"/s, rest)

    {body
     |> String.replace(~r/\\u([0-9a-fA-F]{4})/, fn m -> <<String.to_integer(binary_part(m, 2, 4), 16)::utf8>> end)
     |> String.replace("\\\"", "\"")
     |> String.replace("\\\\", "\\"), binary_part(rest, byte_size(whole), byte_size(rest) - byte_size(whole))}
  end

  defp skip(s), do: String.trim_leading(s)

  defp shared, do: for(d <- TensorBlob.tables().dtypes, d.safetensors != nil, d.available, do: d)

  defp canonical(st_name), do: Enum.find(shared(), &(&1.safetensors == st_name)).name

  defp names_json(names), do: "[" <> Enum.map_join(names, ",", &~s("#{&1}")) <> "]"

  test "the reference's files open here with the same values", %{dir: dir} do
    names = Enum.map(shared(), & &1.safetensors)
    written = python(@python_write, [dir, names_json(names)])
    # every shared dtype is written by the reference, or refused by it (reported)
    assert Enum.sort(Enum.map(Map.keys(written["tensors"]) -- ["scalar", "empty"], &String.trim_leading(&1, "t_"))) ==
             Enum.sort(names -- Map.keys(written["refused"]))

    IO.puts("safetensors #{written["version"]}: refused by the reference: #{inspect(written["refused"])}")

    %{tensors: ours, metadata: meta} = SafeTensors.open(Path.join(dir, "reference.safetensors"))
    assert meta == %{"format" => "pt", "who" => "reference"}
    assert Enum.sort(Map.keys(ours)) == Enum.sort(Map.keys(written["tensors"]))

    for {name, [dtype, shape, hex]} <- written["tensors"] do
      t = ours[name]
      assert Tensor.dtype(t) == canonical(dtype), name
      assert Tensor.shape(t) == List.to_tuple(shape), name
      assert Tensor.to_binary(t) == Base.decode16!(hex, case: :lower), name
    end

    %{tensors: many} = SafeTensors.open(Path.join(dir, "many.safetensors"))
    assert map_size(many) == 1000

    for i <- 0..999 do
      assert Tensor.to_binary(many["m#{i}"]) == <<i::little-32, i::little-32, i::little-32>>
      assert Tensor.memory(many["m#{i}"]) == :file
    end
  end

  test "the files written here open in the reference with the same values", %{dir: dir} do
    # the dtypes this release of the reference holds (it refuses a file
    # naming one it does not know)
    refused = python(@python_write, [dir, names_json(Enum.map(shared(), & &1.safetensors))])["refused"]

    tensors =
      for d <- shared(), not Map.has_key?(refused, d.safetensors), into: %{} do
        bytes =
          for i <- 0..(6 * d.element_size - 1),
              into: <<>>,
              do: <<if(d.name == :bool, do: rem(i, 2), else: rem(i * 53 + 5, 256))>>

        {"t_" <> d.safetensors, Tensor.from_binary(bytes, d.name, {2, 3})}
      end
      |> Map.merge(%{
        "scalar" => Tensor.from_binary(<<7::little-64>>, :int64, {}),
        "empty" => Tensor.zeros({0, 4}, :float32),
        "strided" => Tensor.transpose(Tensor.from_binary(<<1, 2, 3, 4, 5, 6>>, :uint8, {2, 3}), 0, 1)
      })

    path = Path.join(dir, "ours.safetensors")
    :ok = SafeTensors.write(path, tensors, %{"format" => "pt", "é" => "ü"})
    read = python(@python_read, [path])
    assert read["metadata"] == %{"format" => "pt", "é" => "ü"}
    assert Enum.sort(Map.keys(read["tensors"])) == Enum.sort(Map.keys(tensors))

    for {name, [dtype, shape, hex]} <- read["tensors"] do
      t = tensors[name]
      assert canonical(dtype) == Tensor.dtype(t), name
      assert List.to_tuple(shape) == Tensor.shape(t), name
      assert Base.decode16!(hex, case: :lower) == Tensor.to_binary(t), name
    end

    many = for i <- 0..999, into: %{}, do: {"m#{i}", Tensor.from_binary(<<i::little-32>>, :int32, {1})}
    :ok = SafeTensors.write(Path.join(dir, "many.safetensors"), many)
    read = python(@python_read, [Path.join(dir, "many.safetensors")])
    assert map_size(read["tensors"]) == 1000
    assert read["tensors"]["m999"] == ["I32", [1], Base.encode16(<<999::little-32>>, case: :lower)]
  end
end
