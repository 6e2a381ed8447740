ExUnit.start(exclude: [:cuda])
