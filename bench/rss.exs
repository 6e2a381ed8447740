# This OS process's resident memory, for the figures of bench/bench.exs
# and the leak check of scripts/stress.exs.
defmodule Bench.RSS do
  @doc "VmRSS of /proc/self/status, in KiB."
  def kib do
    "/proc/self/status"
    |> File.read!()
    |> String.split("\n")
    |> Enum.find_value(fn line ->
      case String.split(line) do
        ["VmRSS:", kib, "kB"] -> String.to_integer(kib)
        _ -> nil
      end
    end)
  end
end
