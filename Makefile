# tensor_blob: builds priv/tensor_blob_nif.so, and runs the project's commands.
#
#   make           build the NIF library
#   make test      set up what is missing, build, and run every test suite
#   make demo      set up what is missing, build, and run the demo
#   make bench     run the benchmarks (writes bench/results.json)
#
# LIBTORCH_DIR   a libtorch tree (include/, lib/); default: the system's
#                (Debian's libtorch-dev).

LIBTORCH_DIR ?=
BUILD ?= build
PRIV := priv
NIF ?= $(PRIV)/tensor_blob_nif.so

ERTS_INCLUDE := $(shell erl -noshell -eval 'io:format("~ts/erts-~ts/include", [code:root_dir(), erlang:system_info(version)])' -s init stop 2>/dev/null)

# LIBTORCH_DIR=/usr (what Torchx is given for a system libtorch) is the
# system's libtorch too.
ifeq ($(filter-out /usr /usr/,$(LIBTORCH_DIR)),)
TORCH_CFLAGS := -I/usr/include/torch/csrc/api/include
TORCH_LDFLAGS :=
else
TORCH_CFLAGS := -isystem $(LIBTORCH_DIR)/include -isystem $(LIBTORCH_DIR)/include/torch/csrc/api/include
TORCH_LDFLAGS := -L$(LIBTORCH_DIR)/lib -Wl,-rpath,$(LIBTORCH_DIR)/lib
endif
TORCH_LIBS := -ltorch -ltorch_cpu -lc10

# TB_CUDA=1 (the default where CUDA's headers are found) builds the CUDA
# paths; libcudart is opened at load, so the library still loads where there
# is no CUDA. TB_CUDA=0 builds none.
CUDA_HOME ?= /usr/local/cuda
TB_CUDA ?= $(if $(wildcard $(CUDA_HOME)/include/cuda_runtime_api.h),1,0)
CUDA_CFLAGS := -DTB_CUDA=$(TB_CUDA) $(if $(filter 1,$(TB_CUDA)),-isystem $(CUDA_HOME)/include)

OPT ?= -O2
SANITIZE ?=
CFLAGS := $(OPT) -g -fPIC -fvisibility=hidden -std=c11 -Wall -Wextra -Werror=implicit-function-declaration $(SANITIZE)
CXXFLAGS := $(OPT) -g -fPIC -fvisibility=hidden -std=c++17 -Wall -Wextra $(SANITIZE)
LDFLAGS := -shared $(SANITIZE)

C_SOURCES := $(wildcard c_src/tb_*.c)
C_OBJECTS := $(C_SOURCES:c_src/%.c=$(BUILD)/%.o)
SHIM_OBJECT := $(BUILD)/torch_shim.o
# -MMD -MP: each object depends on exactly the headers it includes.
DEPFLAGS = -MMD -MP

.PHONY: tsan-test check-c all nif chunks install-docs clean-nif foreign-nif nx-test nx-consumer-test torchx-test compat-test suites nocuda-test python-test setup test c-test shim-test valgrind-test mix-test eunit consumer-test docs-test demo bench asan-test clean dialyzer lint

all: nif chunks
nif: $(NIF)

# The build configuration, recorded beside the objects: a stamp named by its
# hash, so that changing LIBTORCH_DIR, CUDA, the compilers or the flags
# (or changing them back) rebuilds the library instead of keeping the old link.
BUILD_CONFIG := libtorch=$(LIBTORCH_DIR) cuda=$(TB_CUDA):$(CUDA_HOME) cc=$(CC) cxx=$(CXX) opt=$(OPT) sanitize=$(SANITIZE) erts=$(ERTS_INCLUDE)
CONFIG_STAMP := $(BUILD)/config-$(shell printf '%s' '$(BUILD_CONFIG)' | md5sum | cut -c1-16)

$(CONFIG_STAMP): | $(BUILD)
	@rm -f $(BUILD)/config-*
	@printf '%s\n' '$(BUILD_CONFIG)' > $@

$(BUILD)/%.o: c_src/%.c $(CONFIG_STAMP) | $(BUILD)
	$(CC) $(CFLAGS) $(DEPFLAGS) $(CUDA_CFLAGS) -Ipriv/include -I$(ERTS_INCLUDE) -c $< -o $@

# A LIBTORCH_DIR that holds no libtorch is said so, not left to the
# compiler's missing header.
CHECK_LIBTORCH := test -z "$(filter-out /usr /usr/,$(LIBTORCH_DIR))" || test -d "$(LIBTORCH_DIR)/include/torch" || \
	{ echo "no libtorch at LIBTORCH_DIR=$(LIBTORCH_DIR): expected its headers in $(LIBTORCH_DIR)/include/torch and its libraries in $(LIBTORCH_DIR)/lib (a libtorch tree, or the torch folder of a PyTorch install)" >&2; exit 1; }

$(SHIM_OBJECT): c_src/torch_shim.cpp $(CONFIG_STAMP) | $(BUILD)
	@$(CHECK_LIBTORCH)
	$(CXX) $(CXXFLAGS) $(DEPFLAGS) $(TORCH_CFLAGS) -Ipriv/include -c $< -o $@

-include $(C_OBJECTS:.o=.d) $(SHIM_OBJECT:.o=.d)

$(NIF): $(C_OBJECTS) $(SHIM_OBJECT) | $(PRIV)
	$(CXX) $(LDFLAGS) -o $@ $^ $(TORCH_LDFLAGS) $(TORCH_LIBS) -ldl

$(BUILD) $(PRIV):
	mkdir -p $@

# The Erlang API's doc chunks (EEP 48), for h(tensor_blob, to_blob) in the
# shell: doc/chunks/tensor_blob.chunk, shipped beside ebin. Mix and rebar3
# copy it into the application directory they build (install-docs).
CHUNKS := doc/chunks/tensor_blob.chunk
chunks: $(CHUNKS)
# Without edoc (Debian's erlang-edoc; erlang-nox brings it) the library still
# builds: the chunks are skipped with a note, and h/2 has no text to show.
$(CHUNKS): src/tensor_blob.erl
	@erl -noshell -eval 'case code:which(edoc) of non_existing -> io:format("note: edoc is not installed (Debian: erlang-edoc), so the Erlang API has no doc chunks~n"); _ -> ok = edoc:files(["src/tensor_blob.erl"], [{doclet, edoc_doclet_chunks}, {layout, edoc_layout_chunks}, {dir, "doc"}, {preprocess, true}]) end, halt().'

# install-docs APP_DIR=dir: the chunks into dir/doc/chunks (unless dir is here).
install-docs: $(CHUNKS)
	@test -n "$(APP_DIR)" || { echo "install-docs: set APP_DIR"; exit 2; }
	@if [ -f $(CHUNKS) ] && [ "$$(cd "$(APP_DIR)" 2>/dev/null && pwd -P)" != "$$(pwd -P)" ]; then \
	    mkdir -p "$(APP_DIR)/doc/chunks" && cp $(CHUNKS) "$(APP_DIR)/doc/chunks/"; fi

setup:
	@scripts/setup.sh

# Pure C unit tests of the validation code: no BEAM, no libtorch.
$(BUILD)/c_test: c_test/test_layout.c c_test/check.h c_test/intern.h c_src/tb_layout.c c_src/tb_dtype.c c_src/tb_layout.h c_src/tb_dtype.h priv/include/tensor_blob_dlpack.h | $(BUILD)
	$(CC) -O1 -g -std=c11 -Wall -Wextra $(SANITIZE) -Ic_src -Ipriv/include c_test/test_layout.c c_src/tb_layout.c c_src/tb_dtype.c -o $@

# The DLPack import checks (pure C too), and our DLPack declarations
# against the dlpack.h of the linked libtorch.
DLPACK_TEST_SOURCES := c_test/test_dlpack.c c_src/tb_dlpack_check.c c_src/tb_layout.c c_src/tb_dtype.c
$(BUILD)/c_test_dlpack: $(DLPACK_TEST_SOURCES) c_test/check.h priv/include/tensor_blob_dlpack.h c_src/tb_dlpack_check.h c_src/tb_layout.h c_src/tb_dtype.h | $(BUILD)
	$(CC) -O1 -g -std=c11 -Wall -Wextra $(SANITIZE) -Ic_src -Ipriv/include $(DLPACK_TEST_SOURCES) -o $@

# The CUDA logic that runs without a GPU (pointer-check decisions, the stream
# contract, IPC handles), over a stand-in runtime defined in the test only.
CUDA_TEST_SOURCES := c_test/test_cuda.c c_src/tb_devmem.c c_src/tb_stream.c c_src/tb_cuda_handle.c
$(BUILD)/c_test_cuda: $(CUDA_TEST_SOURCES) c_test/check.h c_src/tb_cuda_ops.h c_src/tb_devmem.h c_src/tb_stream.h c_src/tb_cuda_handle.h c_src/torch_shim.h priv/include/tensor_blob_dlpack.h | $(BUILD)
	$(CC) -O1 -g -std=c11 -Wall -Wextra $(SANITIZE) -Ic_src -Ipriv/include $(CUDA_TEST_SOURCES) -o $@

# The interval set of the read-only and frozen registries, against a
# brute-force model.
$(BUILD)/c_test_intervals: c_test/test_intervals.c c_test/check.h c_src/tb_intervals.c c_src/tb_intervals.h | $(BUILD)
	$(CC) -O1 -g -std=c11 -Wall -Wextra $(SANITIZE) -Ic_src c_test/test_intervals.c c_src/tb_intervals.c -o $@

# The registry of guarded memory and the counters, against a model and
# raced from threads (make tsan-test runs it under ThreadSanitizer).
REGISTRY_TEST_SOURCES := c_test/test_registry.c c_src/tb_registry.c c_src/tb_intervals.c c_src/tb_count.c
$(BUILD)/c_test_registry: $(REGISTRY_TEST_SOURCES) c_test/check.h c_src/tb_registry.h c_src/tb_intervals.h c_src/tb_count.h | $(BUILD)
	$(CC) -O1 -g -std=c11 -Wall -Wextra $(SANITIZE) -Ic_src $(REGISTRY_TEST_SOURCES) -o $@ -lpthread

TSAN_CC ?= clang-14
tsan-test: | $(BUILD)
	$(TSAN_CC) -O1 -g -std=c11 -Wall -Wextra -fsanitize=thread -Ic_src $(REGISTRY_TEST_SOURCES) -o $(BUILD)/c_test_registry_tsan -lpthread
	TSAN_OPTIONS=halt_on_error=1 $(BUILD)/c_test_registry_tsan

TORCH_INCLUDE := $(if $(filter-out /usr /usr/,$(LIBTORCH_DIR)),$(LIBTORCH_DIR)/include,/usr/include)
$(BUILD)/c_test_dlpack_abi: c_test/test_dlpack_abi.c priv/include/tensor_blob_dlpack.h | $(BUILD)
	$(CC) -O1 -g -std=c11 -Wall -Wextra -Ic_src -Ipriv/include -I$(TORCH_INCLUDE) c_test/test_dlpack_abi.c -o $@

c-test: $(BUILD)/c_test $(BUILD)/c_test_dlpack $(BUILD)/c_test_dlpack_abi $(BUILD)/c_test_cuda $(BUILD)/c_test_intervals $(BUILD)/c_test_registry
	$(BUILD)/c_test
	$(BUILD)/c_test_intervals
	$(BUILD)/c_test_registry
	$(BUILD)/c_test_dlpack
	$(BUILD)/c_test_cuda
	$(BUILD)/c_test_dlpack_abi

# The shim through its C API, with libtorch but without the BEAM.
$(BUILD)/shim_test: c_test/test_shim.c c_test/check.h $(SHIM_OBJECT) c_src/tb_dtype.c c_src/tb_dtype.h c_src/torch_shim.h | $(BUILD)
	$(CC) $(OPT) -g $(SANITIZE) -std=c11 -Wall -Wextra -Ic_src -Ipriv/include -c c_test/test_shim.c -o $(BUILD)/test_shim.o
	$(CC) $(OPT) -g $(SANITIZE) -std=c11 -Wall -Wextra -Ic_src -Ipriv/include -c c_src/tb_dtype.c -o $(BUILD)/test_dtype.o
	$(CXX) $(SANITIZE) $(BUILD)/test_shim.o $(BUILD)/test_dtype.o $(SHIM_OBJECT) -o $@ \
		$(TORCH_LDFLAGS) $(TORCH_LIBS)

shim-test: $(BUILD)/shim_test
	$(BUILD)/shim_test

# memcheck over the pure-C tests and the shim's tests.
valgrind-test: $(BUILD)/c_test $(BUILD)/c_test_cuda $(BUILD)/c_test_intervals $(BUILD)/shim_test
	valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite $(BUILD)/c_test
	valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite $(BUILD)/c_test_cuda
	valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite $(BUILD)/c_test_intervals
	valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
		--suppressions=c_test/valgrind.supp $(BUILD)/shim_test

# An independent NIF library that reaches us only through
# priv/include/tensor_blob.h (and DLPack): the bridge tests load it.
FOREIGN_NIF := build/foreign_tensor_nif.so
$(FOREIGN_NIF): test/support/foreign_tensor_nif.c $(wildcard priv/include/*.h)
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -fPIC -shared -std=c11 -Wall -Wextra -Werror -Ipriv/include -I$(ERTS_INCLUDE) $< -o $@ -ldl

foreign-nif: $(FOREIGN_NIF)

mix-test: nif foreign-nif
	MIX_ENV=test mix test

eunit: nif foreign-nif
	rebar3 eunit

# The build without CUDA code (TB_CUDA=0), under the whole ExUnit suite:
# CI builds and tests both ways.
NOCUDA_BUILD := build/nocuda
nocuda-test: setup foreign-nif
	$(MAKE) TB_CUDA=0 BUILD=$(NOCUDA_BUILD) NIF=$(NOCUDA_BUILD)/tensor_blob_nif.so $(NOCUDA_BUILD)/tensor_blob_nif.so
	TENSOR_BLOB_NIF=$(CURDIR)/$(NOCUDA_BUILD)/tensor_blob_nif MIX_ENV=test mix test

# The :nx tests against an Nx build: NX_PATH lists directories holding its
# ebin folders (Nx, complex, telemetry), colon-separated. Unset, Nx is built
# from the source archives in NX_SOURCES (scripts/build_nx.sh: Nx 0.9.2 on
# Elixir < 1.17, Nx and Torchx main on newer) under build/, once.
nx-test: nif foreign-nif
	@nx_path="$(NX_PATH)"; [ -n "$$nx_path" ] || nx_path="$$(scripts/build_nx.sh)"; \
	echo "NX_PATH=$$nx_path MIX_ENV=test mix test --only nx"; \
	NX_PATH="$$nx_path" MIX_ENV=test mix test --only nx && \
	NX_PATH="$$nx_path" MIX_ENV=test mix run scripts/docs_test.exs guides/nx.md

# Scratch Mix projects that depend on tensor_blob and Nx (path dependencies,
# no Hex), in build/nx_consumers: TensorBlob.Nx is there exactly when the
# consumer has Nx, after a fresh build, `mix deps.compile --force
# tensor_blob`, a removed _build/*/lib/tensor_blob, Nx added to or removed
# from a built project (scripts/nx_consumer_test.sh; Nx from build_nx.sh).
nx-consumer-test: nif
	scripts/nx_consumer_test.sh

# The :torchx tests: NX_PATH must hold a Torchx build too (Elixir >= 1.17;
# make compat-test runs them on Debian 13).
torchx-test: nif foreign-nif
	@nx_path="$(NX_PATH)"; [ -n "$$nx_path" ] || nx_path="$$(scripts/build_nx.sh main)"; \
	echo "NX_PATH=$$nx_path MIX_ENV=test mix test --only torchx"; \
	NX_PATH="$$nx_path" MIX_ENV=test mix test --only torchx && \
	NX_PATH="$$nx_path" MIX_ENV=test mix run scripts/docs_test.exs guides/nx.md

# Every suite of `make test`, then the :nx and :torchx tests, on Debian 13's
# stack (OTP 27, Elixir 1.18, libtorch 2.6) in a debootstrap root cached in
# build/compat (scripts/compat_test.sh; needs root).
compat-test:
	scripts/compat_test.sh

# Dialyzer, zero warnings: the Erlang code (rebar3 dialyzer, its PLT in
# rebar3's cache) and the Elixir code, driven directly over the compiled
# beams (no dialyxir, no Hex) with a PLT of erts, kernel, stdlib and elixir
# built once into _build/dialyzer (ignored). test/dialyzer/ holds user code
# that must pass too (a %TensorBlob.Blob{} match on to_blob/1, ...).
DIALYZER_DIR := _build/dialyzer
ELIXIR_EBIN = $(shell elixir -e 'IO.write(:code.lib_dir(:elixir, :ebin))')
DIALYZER_FLAGS := -Wunmatched_returns -Werror_handling
$(DIALYZER_DIR)/elixir.plt:
	@mkdir -p $(DIALYZER_DIR)
	dialyzer -pa $(ELIXIR_EBIN) --build_plt --output_plt $@ --apps erts kernel stdlib $(ELIXIR_EBIN)

dialyzer: nif $(DIALYZER_DIR)/elixir.plt
	rebar3 dialyzer
	MIX_ENV=dev mix compile
	@rm -rf $(DIALYZER_DIR)/scratch && mkdir -p $(DIALYZER_DIR)/scratch
	elixirc -pa _build/dev/lib/tensor_blob/ebin -o $(DIALYZER_DIR)/scratch test/dialyzer/*.ex
	dialyzer -pa $(ELIXIR_EBIN) --plt $(DIALYZER_DIR)/elixir.plt $(DIALYZER_FLAGS) \
		_build/dev/lib/tensor_blob/ebin $(DIALYZER_DIR)/scratch

# Static checks, run by CI: dialyzer, mix format, and that nx-test builds
# the foreign NIF its bridge tests load.
lint: dialyzer
	mix format --check-formatted
	@$(MAKE) --no-print-directory -n -W test/support/foreign_tensor_nif.c nx-test NX_PATH=/nonexistent \
	    | grep -q foreign_tensor_nif || { echo "lint: make nx-test does not build the foreign NIF"; exit 1; }

consumer-test: nif
	scripts/consumer_test.sh

# Every code block of README.md and guides/*.md, run and checked against the
# output it shows (scripts/docs_test.exs; the convention is in
# ARCHITECTURE.md): one VM per file.
DOCS := README.md $(sort $(wildcard guides/*.md))
docs-test: nif
	MIX_ENV=test mix compile
	@status=0; for f in $(DOCS); do \
	    MIX_ENV=test mix run --no-compile scripts/docs_test.exs $$f || status=1; \
	done; exit $$status

# Source checks: no include circle in c_src, and no test of a term that
# enif_raise_exception returned.
check-c:
	scripts/check_c.sh

# Sharing with Python processes (test/python/sharing_test.py): PyTorch's
# file_system strategy where torch imports, multiprocessing.shared_memory
# wherever python3 runs. PYTHON: the interpreter; unset, the first of
# python3 and /usr/bin/python3 that imports torch, else python3. Skipped,
# with a note, where there is no python3.
PYTHON ?= $(shell for p in python3 /usr/bin/python3; do $$p -c 'import torch' >/dev/null 2>&1 && { echo $$p; exit; }; done; command -v python3)
python-test: nif
	@if [ -z "$(PYTHON)" ]; then echo "python-test: no python3, skipped"; exit 0; fi; \
	MIX_ENV=test mix compile && $(PYTHON) test/python/sharing_test.py

# The suites of `make test`, without the setup (compat-test runs them too).
suites: nif
	$(MAKE) check-c
	$(MAKE) c-test
	$(MAKE) shim-test
	$(MAKE) mix-test
	$(MAKE) eunit
	$(MAKE) docs-test
	$(MAKE) consumer-test
	$(MAKE) python-test

test: setup
	$(MAKE) suites

demo: setup
	$(MAKE) nif
	mix run examples/demo.exs

bench:
	@scripts/setup.sh --bench
	$(MAKE) nif
	nx_path="$(NX_PATH)"; [ -n "$$nx_path" ] || nx_path="$$(scripts/build_nx.sh)"; \
	NX_PATH="$$nx_path" MIX_ENV=prod mix run bench/bench.exs

# The whole ExUnit and EUnit suites against an -fsanitize=address,undefined
# build, on the stock BEAM with the sanitizer runtime preloaded. +Mea min
# sends the BEAM's own allocations through malloc so ASan sees them. Any
# report aborts the VM, which fails the run. Leak checks are off: the BEAM
# does not free everything at exit.
ASAN_BUILD := build/asan
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
ASAN_ENV := LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:halt_on_error=1:allocator_may_return_null=1 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	ERL_FLAGS="+Mea min" TENSOR_BLOB_NIF=$(CURDIR)/$(ASAN_BUILD)/tensor_blob_nif

asan-test: setup nif foreign-nif
	$(MAKE) BUILD=$(ASAN_BUILD) NIF=$(ASAN_BUILD)/tensor_blob_nif.so OPT=-O1 SANITIZE="$(ASAN_FLAGS)" \
		$(ASAN_BUILD)/tensor_blob_nif.so $(ASAN_BUILD)/c_test $(ASAN_BUILD)/c_test_cuda $(ASAN_BUILD)/c_test_intervals \
		$(ASAN_BUILD)/c_test_registry $(ASAN_BUILD)/shim_test
	$(ASAN_BUILD)/c_test
	$(ASAN_BUILD)/c_test_intervals
	$(ASAN_BUILD)/c_test_registry
	$(ASAN_BUILD)/c_test_cuda
	ASAN_OPTIONS=detect_leaks=1 $(ASAN_BUILD)/shim_test
	MIX_ENV=test mix compile
	$(ASAN_ENV) MIX_ENV=test mix test
	$(ASAN_ENV) rebar3 eunit

clean:
	rm -rf $(BUILD) $(NIF) doc/chunks _build

# What Mix's clean removes: the library's build products, not _build, and
# not what else lives under build/ (the Debian 13 root, Nx builds, the
# consumer projects): a consumer's `mix deps.compile --force tensor_blob`
# runs this in our checkout.
clean-nif:
	rm -f $(BUILD)/*.o $(BUILD)/*.d $(BUILD)/config-* $(NIF)
	rm -rf doc/chunks

# ---------------------------------------------------------------------------
# Reliability: fuzzing (libFuzzer, clang-14) and stress (issue 6).
#
#   make fuzz         run each fuzz harness for FUZZ_SECONDS (default 60)
#   make fuzz-ci      the same, 30 s each
#   make stress       1,000,000 create-and-drop cycles of pinned views
#   make stress-ci    100,000 cycles
#
# The harnesses run on a copy of the committed seed corpus in
# fuzz/corpus-run/ (gitignored), which keeps what they find between runs;
# crashes are written there too (crash-*, leak-*, timeout-*).
# ---------------------------------------------------------------------------

FUZZ_CC ?= clang-14
FUZZ_SECONDS ?= 60
FUZZ_FLAGS := -g -O1 -std=c11 -Wall -Wextra -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Ic_src -Ic_test -Ipriv/include
FUZZ_HARNESSES := layout dtype
STRESS_CYCLES ?= 1000000

.PHONY: fuzz fuzz-ci fuzz-build stress stress-ci

$(BUILD)/fuzz_layout: fuzz/fuzz_layout.c c_src/tb_layout.c c_src/tb_dtype.c c_src/tb_layout.h c_src/tb_dtype.h priv/include/tensor_blob_dlpack.h | $(BUILD)
	$(FUZZ_CC) $(FUZZ_FLAGS) fuzz/fuzz_layout.c c_src/tb_layout.c c_src/tb_dtype.c -o $@

$(BUILD)/fuzz_dtype: fuzz/fuzz_dtype.c c_test/intern.h c_src/tb_dtype.c c_src/tb_dtype.h priv/include/tensor_blob_dlpack.h | $(BUILD)
	$(FUZZ_CC) $(FUZZ_FLAGS) fuzz/fuzz_dtype.c c_src/tb_dtype.c -o $@

fuzz-build: $(FUZZ_HARNESSES:%=$(BUILD)/fuzz_%)

fuzz: fuzz-build
	@set -e; for h in $(FUZZ_HARNESSES); do \
	    mkdir -p fuzz/corpus-run/$$h; \
	    cp fuzz/corpus/$$h/* fuzz/corpus-run/$$h/; \
	    echo "== fuzz_$$h: $(FUZZ_SECONDS) s"; \
	    $(BUILD)/fuzz_$$h fuzz/corpus-run/$$h -max_total_time=$(FUZZ_SECONDS) \
	        -artifact_prefix=fuzz/corpus-run/$$h- -print_final_stats=1; \
	done

fuzz-ci:
	$(MAKE) fuzz FUZZ_SECONDS=30

stress: nif
	mix run scripts/stress.exs $(STRESS_CYCLES)

stress-ci:
	$(MAKE) stress STRESS_CYCLES=100000
