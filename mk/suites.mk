# The BEAM suites and the commands around them: setup, test, lint, the
# sanitizer and no-CUDA runs, the demo and the benchmarks.

setup:
	@scripts/setup.sh

# An independent NIF library that reaches us only through
# priv/include/tensor_blob.h (and DLPack): the bridge tests load it
# (test/support/foreign_tensor_nif.erl: FOREIGN_TENSOR_NIF, default
# build/foreign_tensor_nif).
FOREIGN_NIF := $(BUILD)/foreign_tensor_nif.so
$(FOREIGN_NIF): test/support/foreign_tensor_nif.c $(wildcard priv/include/*.h)
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -fPIC -shared -std=c11 -Wall -Wextra -Werror -Ipriv/include -I$(ERTS_INCLUDE) $< -o $@ -ldl

# The same consumer built against the bridge's first header, as one built
# before the table: it must keep working with this library.
FOREIGN_NIF_V1 := $(BUILD)/foreign_tensor_nif_v1.so
$(FOREIGN_NIF_V1): test/support/foreign_tensor_nif.c test/support/bridge_v1/tensor_blob.h $(wildcard priv/include/*.h)
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -fPIC -shared -std=c11 -Wall -Wextra -Werror -DFOREIGN_TENSOR_NIF_MODULE=foreign_tensor_nif_v1 \
		-Itest/support/bridge_v1 -Ipriv/include -I$(ERTS_INCLUDE) $< -o $@ -ldl

foreign-nif: $(FOREIGN_NIF) $(FOREIGN_NIF_V1)

mix-test: nif foreign-nif
	MIX_ENV=test mix test

eunit: nif foreign-nif load-test-builds
	rebar3 eunit

# The build without CUDA code (TB_CUDA=0), under the whole ExUnit suite:
# CI builds and tests both ways.
NOCUDA_BUILD := $(BUILD)/nocuda
nocuda-test: setup foreign-nif
	$(MAKE) TB_CUDA=0 BUILD=$(NOCUDA_BUILD) NIF=$(NOCUDA_BUILD)/tensor_blob_nif.so nif
	TENSOR_BLOB_NIF=$(CURDIR)/$(NOCUDA_BUILD)/tensor_blob_nif MIX_ENV=test mix test

# Dialyzer, zero warnings: the Erlang code (rebar3 dialyzer, its PLT in
# rebar3's cache) and the Elixir code, driven directly over the compiled
# beams (no dialyxir, no Hex) with a PLT of erts, kernel, stdlib and elixir
# built once into _build/dialyzer (ignored). test/dialyzer/ holds user code
# that must pass too (a %TensorBlob.Blob{} match on to_blob/1, ...).
DIALYZER_DIR := _build/dialyzer
ELIXIR_EBIN = $(shell elixir -e 'IO.write(:code.lib_dir(:elixir, :ebin))')
# Mix too: the library ships a Mix task (mix tensor_blob.python_path).
MIX_EBIN = $(shell elixir -e 'IO.write(:code.lib_dir(:mix, :ebin))')
DIALYZER_FLAGS := -Wunmatched_returns -Werror_handling
$(DIALYZER_DIR)/elixir_mix.plt:
	@mkdir -p $(DIALYZER_DIR)
	dialyzer -pa $(ELIXIR_EBIN) --build_plt --output_plt $@ --apps erts kernel stdlib $(ELIXIR_EBIN) $(MIX_EBIN)

dialyzer: nif $(DIALYZER_DIR)/elixir_mix.plt
	rebar3 dialyzer
	MIX_ENV=dev mix compile
	@rm -rf $(DIALYZER_DIR)/scratch && mkdir -p $(DIALYZER_DIR)/scratch
	elixirc -pa _build/dev/lib/tensor_blob/ebin -o $(DIALYZER_DIR)/scratch test/dialyzer/*.ex
	dialyzer -pa $(ELIXIR_EBIN) -pa $(MIX_EBIN) --plt $(DIALYZER_DIR)/elixir_mix.plt $(DIALYZER_FLAGS) \
		_build/dev/lib/tensor_blob/ebin $(DIALYZER_DIR)/scratch

# The C style of .clang-format: check-format lists the files that differ
# (scripts/check_format.sh; FILES=... for some only), format rewrites them.
# lint runs check-format (LINT_FORMAT=0 skips it, for a machine without
# clang-format-14).
LINT_FORMAT ?= 1
check-format:
	scripts/check_format.sh $(FILES)
format:
	clang-format-14 --style=file -i $(or $(FILES),$(shell find c_src c_test bench/nif -type f \( -name '*.c' -o -name '*.h' -o -name '*.cpp' \)))

# Static checks, run by CI: dialyzer, mix format, the C style of
# .clang-format, no module of src/ or lib/ over 600 lines
# (scripts/check_module_size.sh), no C function of c_src over 60 lines
# (scripts/check_function_size.sh, by universal-ctags' extents), no call
# from lib/ to a private module of src/ (scripts/check_private_calls.sh),
# test/BAD_INPUTS.md current, and that nx-test builds the foreign NIF its
# bridge tests load.
# Tomorrow's warnings today, on the newest stack (make newest-test runs it
# in Debian testing's root). newest-lint-c: the library, the reaper, the C
# and shim tests built (not run) with every warning an error (-Wall
# -Wextra, and C++20's deprecations, which the standard libtorch 2.14 needs
# turns on), in a build folder of their own so that nothing built before
# hides a warning. newest-lint-beam: the Erlang sources and tests with
# erlc's optional warnings as errors, the Elixir code and every test file
# with warnings as errors (mix test --exclude test loads every test file
# and runs none). newest-test runs the beam half, and its suites with
# WERROR=-Werror in place of the C half.
LINT_BUILD := build/lint
ERLC_WARNINGS := -Werror +warn_export_vars +warn_shadow_vars +warn_obsolete_guard +warn_unused_import
newest-lint: newest-lint-c newest-lint-beam
newest-lint-c:
	$(MAKE) --no-print-directory BUILD=$(LINT_BUILD) NIF=$(LINT_BUILD)/tensor_blob_nif.so WERROR=-Werror \
		$(LINT_BUILD)/tensor_blob_nif.so $(LINT_BUILD)/tensor_blob_reaper $(C_TESTS:%=$(LINT_BUILD)/%) $(LINT_BUILD)/shim_test
newest-lint-beam:
	@mkdir -p $(LINT_BUILD)/ebin
	erlc $(ERLC_WARNINGS) -I src -I test/support -o $(LINT_BUILD)/ebin src/*.erl test/*.erl test/support/*.erl
	MIX_ENV=test mix compile --force --warnings-as-errors
	MIX_ENV=test mix test --warnings-as-errors --exclude test

lint: dialyzer bad-inputs-check
	mix format --check-formatted
	scripts/check_module_size.sh
	scripts/check_function_size.sh
	scripts/check_private_calls.sh
	mix run --no-start scripts/check_script_calls.exs
	@if [ "$(LINT_FORMAT)" = 1 ]; then scripts/check_format.sh; fi
	@$(MAKE) --no-print-directory -n -W test/support/foreign_tensor_nif.c nx-test NX_PATH=/nonexistent \
	    | grep -q foreign_tensor_nif || { echo "lint: make nx-test does not build the foreign NIF"; exit 1; }

# A scratch Mix project that depends on tensor_blob (scripts/consumer_test.sh),
# and the library built as a dependency in a folder whose path holds a space
# (scripts/space_path_test.sh).
consumer-test: nif
	scripts/consumer_test.sh
	scripts/space_path_test.sh

# Every code block of README.md and guides/*.md, run and checked against the
# output it shows (scripts/docs_test.exs; the convention is in
# ARCHITECTURE.md): one VM per file, and one PYTHON interpreter (python3 -i,
# the blocks pasted on its standard input) for its python blocks. The
# guides that say their blocks run in a named node (iex --sname a) run a
# second time in one (DOCS_NAMED).
DOCS := README.md $(sort $(wildcard guides/*.md))
DOCS_NAMED := guides/nodes.md
docs-test: nif
	MIX_ENV=test mix compile
	@status=0; for f in $(DOCS); do \
	    PYTHON=$(PYTHON) MIX_ENV=test mix run --no-compile scripts/docs_test.exs $$f || status=1; \
	done; \
	for f in $(DOCS_NAMED); do \
	    echo "docs-test $$f, in a named node:"; \
	    PYTHON=$(PYTHON) MIX_ENV=test elixir --sname tb_docs_$$$$ -S mix run --no-compile scripts/docs_test.exs $$f || status=1; \
	done; exit $$status

# Source checks: the layers of c_src as the compiler and the objects see
# them (every include and every call across units: scripts/check_layers.py),
# no test of a term that
# enif_raise_exception returned, each raise's argument the one its message
# names, each NIF in the file and on the scheduler the list of NIFs
# (c_src/beam/tb_nifs.h) says, no facade code that decides on an error
# message's text (and every reason the facades use in the reason table:
# scripts/check_errors.sh), and the NIF stubs produced from the list of
# NIFs up to date.
check-c: nif
	scripts/check_layers.py --objects $(BUILD) --reaper c_src/reaper/tensor_blob_reaper.c -- \
	    $(CC) -std=c11 $(CUDA_CFLAGS) $(C_INCLUDES) -Ipriv/include -I$(ERTS_INCLUDE) \
	    ++ $(CXX) -std=c++$(TORCH_CXX_STD) $(TORCH_CFLAGS) $(C_INCLUDES) -Ipriv/include
	scripts/check_c.sh
	scripts/check_private_calls.sh
	mix run --no-start scripts/check_script_calls.exs
	scripts/check_errors.sh
	scripts/gen_nifs.py --check

# Sharing with Python processes (test/python/*_test.py): PyTorch's
# file_system strategy and multiprocessing.shared_memory, by hand
# (sharing_test.py) and through the module shipped in priv/python
# (module_test.py). PYTHON: the interpreter; unset, the first of python3
# and /usr/bin/python3 (Debian's, with python3-torch, which make setup
# installs) that imports torch, else python3. The PyTorch tests are
# expected to run: without torch (or without python3) the suite fails,
# unless PYTHON_TORCH=0, which skips them with a note.
PYTHON ?= $(shell for p in python3 /usr/bin/python3; do $$p -c 'import torch' >/dev/null 2>&1 && { echo $$p; exit; }; done; command -v python3)
PYTHON_TORCH ?= 1
python-test: nif
	@if [ -z "$(PYTHON)" ]; then \
	    if [ "$(PYTHON_TORCH)" = 1 ]; then echo "python-test: no python3 (make setup installs python3-torch; PYTHON_TORCH=0 skips the PyTorch tests)" >&2; exit 1; fi; \
	    echo "python-test: no python3, skipped"; exit 0; fi; \
	MIX_ENV=test mix compile && status=0; \
	for t in test/python/*_test.py; do \
	    echo "==> $(PYTHON) $$t"; TB_EXPECT_TORCH=$(PYTHON_TORCH) $(PYTHON) $$t || status=1; \
	done; exit $$status

# test/BAD_INPUTS.md: written by `make bad-inputs`; `make test` and `make
# lint` fail when it is stale (scripts/bad_inputs.exs).
bad-inputs: nif foreign-nif
	scripts/bad_inputs.sh test/BAD_INPUTS.md

bad-inputs-check: nif foreign-nif
	scripts/bad_inputs.sh --check test/BAD_INPUTS.md

# The suites of `make test`, without the setup (compat-test runs them too).
suites: nif
	$(MAKE) check-c
	$(MAKE) bad-inputs-check
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

# The benchmarks' baselines (a bare NIF call, a bare resource) live in a
# NIF library of their own (bench/nif), which only bench/ loads: the
# library users load carries no benchmark code.
BENCH_NIF := $(BUILD)/tensor_blob_bench_nif.so
$(BENCH_NIF): bench/nif/tensor_blob_bench_nif.c bench/nif/exchange_loop.h $(wildcard priv/include/*.h) | $(BUILD)
	$(CC) $(CFLAGS) -Werror -shared -Ipriv/include -I$(ERTS_INCLUDE) $< -o $@
# The PyTorch side of the exchange API's C loop (bench/exchange_loop.exs):
# a Python extension, built where $(PYTHON)'s headers are.
BENCH_PY_INCLUDE = $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
BENCH_PY_EXT := $(BUILD)/torch_exchange_loop.so
$(BENCH_PY_EXT): bench/nif/torch_exchange_loop.c bench/nif/exchange_loop.h $(wildcard priv/include/*.h) | $(BUILD)
	$(CC) $(CFLAGS) -Werror -shared -Ipriv/include -I$(BENCH_PY_INCLUDE) $< -o $@
bench-nif: $(BENCH_NIF)
	@if [ -f "$(BENCH_PY_INCLUDE)/Python.h" ]; then $(MAKE) --no-print-directory $(BENCH_PY_EXT); \
	else echo "bench-nif: no Python.h for $(PYTHON): bench/exchange_loop.exs skips PyTorch's row"; fi
# The exchange API's C loop, tensor_blob's table beside PyTorch's.
bench-exchange: nif bench-nif
	TENSOR_BLOB_BENCH_NIF="$(CURDIR)/$(BUILD)/tensor_blob_bench_nif" PYTHON="$(PYTHON)" MIX_ENV=prod mix run bench/exchange_loop.exs
# The Python door's exchange API and batches (Pythonx: PYTHONX_PATH, or
# built by scripts/build_pythonx.sh), then the C loop, in one run.
bench-python-exchange: nif bench-nif
	px="$(PYTHONX_PATH)"; [ -n "$$px" ] || px="$$(scripts/build_pythonx.sh)"; \
	PYTHONX_PATH="$$px" TENSOR_BLOB_BENCH_NIF="$(CURDIR)/$(BUILD)/tensor_blob_bench_nif" PYTHON="$(PYTHON)" \
	    MIX_ENV=prod mix run bench/python_exchange.exs

bench:
	@scripts/setup.sh --bench
	$(MAKE) nif bench-nif
	nx_path="$(NX_PATH)"; [ -n "$$nx_path" ] || nx_path="$$(scripts/build_nx.sh)"; \
	NX_PATH="$$nx_path" TENSOR_BLOB_BENCH_NIF="$(CURDIR)/$(BUILD)/tensor_blob_bench_nif" MIX_ENV=prod mix run bench/bench.exs
	$(MAKE) bench-compile

# A no-op `mix compile` in a project depending on tensor_blob, against a
# plain project's, in the same run (guides/building.md has the figure).
bench-compile: nif
	scripts/noop_compile_bench.sh

# Files both ways with the safetensors reference implementation (python3
# with safetensors and torch: the Debian 13 root has them); fails where the
# reference is missing rather than skip.
safetensors-compat-test: nif
	$(PYTHON) -c "import safetensors, torch"
	MIX_ENV=test mix test --only safetensors_reference test/safetensors_reference_test.exs

# Loading a 1 GiB safetensors file beside elixir-nx's reader (read! and
# lazy: true, compiled from its archive with Jason's) and the reference's
# Python loop (python3 with safetensors and torch): the Debian 13 root has
# them all (bench/safetensors.exs). make bench runs our side alone.
bench-safetensors: nif
	@set -e; third_party="$$(scripts/build_nx.sh --sources)"; src="$(BUILD)/third_party"; mkdir -p "$$src"; \
	for a in safetensors jason; do \
	    f="$$(cd "$$third_party" && ls $$a-*.tar.gz | head -n1)"; \
	    rm -rf "$$src/$$a"; mkdir -p "$$src/$$a"; tar -C "$$src/$$a" --strip-components=1 -xzf "$$third_party/$$f"; \
	done; \
	nx_path="$(NX_PATH)"; [ -n "$$nx_path" ] || nx_path="$$(scripts/build_nx.sh)"; \
	NX_PATH="$$nx_path" SAFETENSORS_SRC="$(CURDIR)/$$src/safetensors" JASON_SRC="$(CURDIR)/$$src/jason" \
	    MIX_ENV=prod mix run bench/safetensors.exs --compare

# The whole ExUnit and EUnit suites against an -fsanitize=address,undefined
# build, on the stock BEAM with the sanitizer runtime preloaded. +Mea min
# sends the BEAM's own allocations through malloc so ASan sees them. Any
# report aborts the VM, which fails the run. Leak checks are off: the BEAM
# does not free everything at exit.
ASAN_BUILD := $(BUILD)/asan
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
ASAN_ENV := LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:halt_on_error=1:allocator_may_return_null=1 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	ERL_FLAGS="+Mea min" TENSOR_BLOB_NIF=$(CURDIR)/$(ASAN_BUILD)/tensor_blob_nif

asan-test: setup nif foreign-nif load-test-builds
	$(MAKE) BUILD=$(ASAN_BUILD) NIF=$(ASAN_BUILD)/tensor_blob_nif.so OPT=-O1 SANITIZE="$(ASAN_FLAGS)" \
		$(ASAN_BUILD)/tensor_blob_nif.so $(ASAN_BUILD)/tensor_blob_reaper $(C_TESTS:%=$(ASAN_BUILD)/%) $(ASAN_BUILD)/shim_test
	@set -e; for t in $(C_TESTS); do echo "$(ASAN_BUILD)/$$t"; $(ASAN_BUILD)/$$t; done
	ASAN_OPTIONS=detect_leaks=1 $(ASAN_BUILD)/shim_test
	MIX_ENV=test mix compile
	$(ASAN_ENV) MIX_ENV=test mix test
	$(ASAN_ENV) rebar3 eunit

.PHONY: setup foreign-nif mix-test eunit nocuda-test dialyzer lint newest-lint newest-lint-c newest-lint-beam check-format format consumer-test docs-test python-test check-c suites test demo bench bench-nif bench-exchange bench-python-exchange bench-compile bench-safetensors safetensors-compat-test asan-test
