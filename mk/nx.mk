# The tests against Nx and Torchx, and the Debian 13 stack.

# The :nx tests against an Nx build: NX_PATH lists directories holding its
# ebin folders (Nx, complex, telemetry), colon-separated. Unset, Nx is built
# under $(BUILD) once from the source archives in NX_SOURCES
# (scripts/build_nx.sh: Nx 0.9.2 on Elixir < 1.17, Nx and Torchx main on
# newer). The Nx guide's code blocks run too, and the :telemetry tests and
# the telemetry guide's blocks (NX_PATH holds telemetry, which Nx needs).
nx-test: nif foreign-nif
	@nx_path="$(NX_PATH)"; [ -n "$$nx_path" ] || nx_path="$$(scripts/build_nx.sh)"; \
	echo "NX_PATH=$$nx_path MIX_ENV=test mix test --only nx --only telemetry"; \
	NX_PATH="$$nx_path" MIX_ENV=test mix test --only nx --only telemetry && \
	NX_PATH="$$nx_path" MIX_ENV=test mix run scripts/docs_test.exs guides/nx.md && \
	NX_PATH="$$nx_path" MIX_ENV=test mix run --no-compile scripts/docs_test.exs guides/telemetry.md

# Scratch Mix projects that depend on tensor_blob and Nx (path dependencies,
# no Hex): TensorBlob.Nx is there exactly when the consumer has Nx, after a
# fresh build, `mix deps.compile --force tensor_blob`, a removed
# _build/*/lib/tensor_blob, Nx added to or removed from a built project
# (scripts/nx_consumer_test.sh; Nx from build_nx.sh).
nx-consumer-test: nif
	scripts/nx_consumer_test.sh

# The :torchx tests: NX_PATH must hold a Torchx build too (Elixir >= 1.17;
# make compat-test runs them on Debian 13: Torchx does not build against
# libtorch 2.14).
torchx-test: nif foreign-nif
	@nx_path="$(NX_PATH)"; [ -n "$$nx_path" ] || nx_path="$$(scripts/build_nx.sh main)"; \
	echo "NX_PATH=$$nx_path MIX_ENV=test mix test --only torchx"; \
	NX_PATH="$$nx_path" MIX_ENV=test mix test --only torchx && \
	NX_PATH="$$nx_path" MIX_ENV=test mix run scripts/docs_test.exs guides/nx.md

# The ExTorch stage of compat-test alone, in the Debian 13 root compat-test
# made (scripts/compat_test.sh trixie --extorch; ExTorch does not build
# against libtorch 2.14); skipped, saying why, without one.
extorch-test:
	scripts/compat_test.sh trixie --extorch

# The :extorch tests against an AddressSanitizer/UBSan build of the NIF
# (asan-test's flags and environment): NX_PATH must hold ExTorch's build
# (scripts/build_extorch.sh) and Nx's; the ExTorch stage of compat-test
# (scripts/compat_extorch.sh) runs it.
extorch-asan-test: nif
	$(MAKE) BUILD=$(ASAN_BUILD) NIF=$(ASAN_BUILD)/tensor_blob_nif.so OPT=-O1 SANITIZE="$(ASAN_FLAGS)" \
		$(ASAN_BUILD)/tensor_blob_nif.so
	MIX_ENV=test mix compile
	$(ASAN_ENV) MIX_ENV=test mix test --only extorch

# The build, the test suites and the safetensors reference test on Debian
# 13's stack (OTP 27, Elixir 1.18, libtorch 2.6), then the clients that do
# not build against libtorch 2.14 (Torchx, ExTorch), in a debootstrap root
# cached under the build folder (scripts/compat_test.sh; needs root).
compat-test:
	scripts/compat_test.sh trixie

# The newest stack users install, Debian testing (OTP 29, Elixir 1.20, GCC
# 16, libtorch and PyTorch 2.14, Python 3.14): every suite with every
# warning an error, the safetensors reference test (0.8), then Nx main and
# Pythonx in the same VM as tensor_blob (scripts/compat_test.sh forky;
# needs root).
newest-test:
	scripts/compat_test.sh forky

# The :python tests (Python in the VM through Pythonx; Elixir >= 1.15, and a
# python3 with PyTorch, NumPy and its libpython): PYTHONX_PATH holds a
# Pythonx build, made from the third-party archives when unset
# (scripts/build_pythonx.sh); then the Python guide's blocks.
pythonx-test: nif
	@px="$(PYTHONX_PATH)"; [ -n "$$px" ] || px="$$(scripts/build_pythonx.sh)"; \
	echo "PYTHONX_PATH=$$px MIX_ENV=test mix test --only python"; \
	PYTHONX_PATH="$$px" MIX_ENV=test mix test --only python && \
	PYTHONX_PATH="$$px" MIX_ENV=test mix run scripts/docs_test.exs guides/python.md

# The :python tests against an AddressSanitizer/UBSan build of the NIF
# (asan-test's flags and environment), Pythonx as pythonx-test finds it;
# newest-test runs it after pythonx-test.
pythonx-asan-test: nif
	$(MAKE) BUILD=$(ASAN_BUILD) NIF=$(ASAN_BUILD)/tensor_blob_nif.so OPT=-O1 SANITIZE="$(ASAN_FLAGS)" \
		$(ASAN_BUILD)/tensor_blob_nif.so
	@px="$(PYTHONX_PATH)"; [ -n "$$px" ] || px="$$(scripts/build_pythonx.sh)"; \
	PYTHONX_PATH="$$px" MIX_ENV=test mix compile && \
	PYTHONX_PATH="$$px" $(ASAN_ENV) MIX_ENV=test mix test --only python

.PHONY: nx-test nx-consumer-test torchx-test extorch-test extorch-asan-test compat-test newest-test pythonx-test pythonx-asan-test
