# mix format; CI checks it (make lint: mix format --check-formatted).
# examples/*/_checkouts links back to this repository: not an input.
[
  inputs: [
    "{mix,.formatter}.exs",
    "{lib,test,scripts,bench}/**/*.{ex,exs}",
    "examples/*.exs",
    "examples/mix_consumer/mix.exs",
    "examples/mix_consumer/{lib,test}/**/*.{ex,exs}"
  ],
  line_length: 120
]
