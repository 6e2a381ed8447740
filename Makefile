# tensor_blob: builds priv/tensor_blob_nif.so. The project's other commands
# live in mk/ (included at the end):
#
#   make           build the NIF library
#   make test      set up what is missing, build, and run every test suite
#   make demo      set up what is missing, build, and run the demo
#   make bench     run the benchmarks (writes _build/bench/results.json; BENCH_RESULTS=bench/results.json records a run)
#
# LIBTORCH_DIR   a libtorch tree (include/, lib/); default: the system's
#                (Debian's libtorch-dev).

LIBTORCH_DIR ?=

# Where the build goes. Building tensor_blob itself: the objects in build/,
# the library in priv/, the doc chunks in doc/. Built as a dependency, Mix
# and rebar3 give the application's directory in their own build folder as
# APP_DIR (Mix: _build/<env>/lib/tensor_blob): then the objects go to
# APP_DIR/obj, the library and the reaper are built there and installed into
# APP_DIR/priv, the doc chunks into APP_DIR/doc/chunks, and nothing is
# written into this checkout. So a read-only checkout builds, and projects
# that share one checkout with different LIBTORCH_DIRs keep their builds
# apart. This project's own _build (its Mix and rebar3 builds), and a
# checkout that is its own application directory (a rebar3 dependency
# fetched into the build folder), build in build/ and priv/.
#
# Paths may hold spaces (a project in "My Projects"): make's own functions
# split words at spaces, so APP_DIR is resolved by the shell, and a target
# under it is named relative to this checkout, which climbs out of a
# shared folder with a space without naming it. A build folder that no
# path without a space names (the space lies between this checkout and
# APP_DIR) stops with an error that says so.
APP_DIR ?=
ifneq ($(strip $(APP_DIR)),)
QUOTED_APP_DIR := '$(subst ','\'',$(APP_DIR))'
APP_DIR_ABS := $(shell realpath -m -- $(QUOTED_APP_DIR))
ifeq ($(shell here="$$(pwd -P)"; case "$$(realpath -m -- $(QUOTED_APP_DIR))" in ("$$here"|"$$here"/_build/*) ;; (*) echo 1;; esac),1)
AS_DEPENDENCY := 1
endif
ifdef AS_DEPENDENCY
ifneq ($(words $(APP_DIR_ABS)),1)
APP_DIR_ABS := $(shell realpath -m --relative-to=. -- $(QUOTED_APP_DIR))
ifneq ($(words $(APP_DIR_ABS)),1)
$(error APP_DIR "$(APP_DIR)" holds a space, and so does its path from this checkout ("$(APP_DIR_ABS)"), which make cannot name targets under: build from a project whose path has no space, or keep this dependency inside the project (its deps/ or _checkouts/))
endif
endif
endif
endif

ifdef AS_DEPENDENCY
BUILD ?= $(APP_DIR_ABS)/obj
NIF ?= $(BUILD)/tensor_blob_nif.so
DOC_DIR := $(APP_DIR_ABS)/doc
else
BUILD ?= build
NIF ?= priv/tensor_blob_nif.so
DOC_DIR := doc
endif
# The process that removes a VM's shared-memory names once it is gone: it
# lives beside the library, which starts it.
REAPER = $(dir $(NIF))tensor_blob_reaper

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

# -O3: from_blob's path (decode the spec once in tb_term, then view) is
# about 25 ns slower at 4 B with gcc's -O2 choices than the code it
# replaced, and as fast at -O3 (guides/performance.md).
OPT ?= -O3
SANITIZE ?=
# WERROR=-Werror turns every warning into an error (make newest-lint).
WERROR ?=
# -fdebug-prefix-map: no checkout path in the objects' debug information, so
# an object is the same wherever the checkout is (the object cache below).
# Left out where the checkout's path holds a space (gcc cannot take it).
DEBUG_MAP := $(if $(word 2,$(CURDIR)),,-fdebug-prefix-map=$(CURDIR)=.)
CFLAGS := $(OPT) -g $(DEBUG_MAP) -fPIC -fvisibility=hidden -std=c11 -Wall -Wextra -Werror=implicit-function-declaration $(WERROR) $(SANITIZE)
# The shim's C++ standard is the one the linked libtorch asks of its users
# (libtorch 2.14's headers need C++20), never older than C++17.
TORCH_CXX_STD := $(shell LIBTORCH_DIR='$(LIBTORCH_DIR)' sh scripts/libtorch.sh cxx-std)
CXXFLAGS := $(OPT) -g $(DEBUG_MAP) -fPIC -fvisibility=hidden -std=c++$(TORCH_CXX_STD) -Wall -Wextra $(WERROR) $(SANITIZE)
LDFLAGS := -shared $(SANITIZE)

# c_src's folders are bands of its layers (c_src/LAYERS); every folder is on the
# include path, and an object's source is the file of its name in whichever
# folder holds it (SOURCE_OF_STEM, in a rule's prerequisites: the path
# itself, so that a dependency file naming a unit's old folder cannot
# send the compiler there).
C_DIRS := $(patsubst %/,%,$(sort $(dir $(wildcard c_src/*/*.c c_src/*/*.h c_src/*/*.cpp))))
C_INCLUDES := $(addprefix -I,$(C_DIRS))
C_SOURCES := $(wildcard c_src/*/tb_*.c)
SOURCE_OF_STEM = $$(or $$(wildcard $$(addsuffix /$$(notdir $$*).c,$$(C_DIRS))),no-source/$$*.c)
.SECONDEXPANSION:
C_OBJECTS := $(patsubst %.c,$(BUILD)/%.o,$(notdir $(C_SOURCES)))
SHIM_OBJECT := $(BUILD)/torch_shim.o
# -MMD -MP: each object depends on exactly the headers it includes.
DEPFLAGS = -MMD -MP

.PHONY: all nif chunks install-docs clean clean-nif

# Quiet by default: a compile or link prints its command line only when it
# fails. V=1 (or TB_VERBOSE=1) prints every command, as make does.
ifneq ($(filter 1,$(V) $(TB_VERBOSE)),)
Q :=
else
Q := @
endif

# The object cache (scripts/build_cache.sh says how it is keyed, where it
# lives and how to turn it off): every object, the library and the reaper
# are taken from it when the same command over the same sources made them
# before, in this build folder or another (another MIX_ENV, another
# consumer). Its key from here: the compilers, every header of c_src and
# priv/include, and libtorch's version header and library (size and time),
# computed once, when something is to be built.
CACHED = sh scripts/build_cache.sh
TORCH_VERSION_FILE = $(shell LIBTORCH_DIR='$(LIBTORCH_DIR)' sh scripts/libtorch.sh version-file)
ifeq ($(filter-out /usr /usr/,$(LIBTORCH_DIR)),)
TORCH_IDENTITY_FILES = $(TORCH_VERSION_FILE) $(shell $(CC) -print-file-name=libtorch.so)
else
TORCH_IDENTITY_FILES = $(TORCH_VERSION_FILE) $(wildcard $(LIBTORCH_DIR)/lib/libtorch.*)
endif
CACHE_KEY = $(eval CACHE_KEY := $(shell { $(CC) --version; $(CXX) --version; \
	cat $(sort $(wildcard c_src/*/*.h priv/include/*.h)) $(TORCH_IDENTITY_FILES); \
	stat -L -c '%s %Y' $(TORCH_IDENTITY_FILES); } 2>/dev/null | sha256sum | cut -c1-40))$(CACHE_KEY)

all: nif chunks
nif: $(NIF) $(REAPER)

# The build configuration, recorded beside the objects: a stamp named by its
# hash, so that changing LIBTORCH_DIR, CUDA, the compilers or the flags
# (or changing them back) rebuilds the library instead of keeping the old link.
BUILD_CONFIG := libtorch=$(LIBTORCH_DIR) c++$(TORCH_CXX_STD) cuda=$(TB_CUDA):$(CUDA_HOME) cc=$(CC) cxx=$(CXX) opt=$(OPT) werror=$(WERROR) sanitize=$(SANITIZE) erts=$(ERTS_INCLUDE)
CONFIG_STAMP := $(BUILD)/config-$(shell printf '%s' '$(BUILD_CONFIG)' | md5sum | cut -c1-16)

$(CONFIG_STAMP): | $(BUILD)
	@$(CHECK_LIBTORCH)
	@rm -f $(BUILD)/config-*
	@printf '%s\n' '$(BUILD_CONFIG)' > $@

$(BUILD)/%.o: $(SOURCE_OF_STEM) $(CONFIG_STAMP) | $(BUILD)
	$(Q)$(CACHED) $@ '$(CACHE_KEY)' -- $(CC) $(CFLAGS) $(DEPFLAGS) $(CUDA_CFLAGS) $(C_INCLUDES) -Ipriv/include -I$(ERTS_INCLUDE) -c $< -o $@

# A LIBTORCH_DIR that holds no libtorch is said so, not left to the
# compiler's missing header: checked when the configuration changes, before
# anything compiles (every object depends on the configuration's stamp).
ifeq ($(filter-out /usr /usr/,$(LIBTORCH_DIR)),)
CHECK_LIBTORCH := test -d /usr/include/torch/csrc/api/include || \
	{ echo "no libtorch: the system has none (Debian: apt-get install libtorch-dev) and LIBTORCH_DIR is not set (a libtorch tree, or the torch folder of a PyTorch install)" >&2; exit 1; }
else
CHECK_LIBTORCH := { test -d "$(LIBTORCH_DIR)/include/torch" && ls "$(LIBTORCH_DIR)"/lib/libtorch.* >/dev/null 2>&1; } || \
	{ echo "no libtorch at LIBTORCH_DIR=$(LIBTORCH_DIR): expected its headers in $(LIBTORCH_DIR)/include/torch and its libraries in $(LIBTORCH_DIR)/lib (a libtorch tree, or the torch folder of a PyTorch install)" >&2; exit 1; }
endif

$(SHIM_OBJECT): c_src/device/torch_shim.cpp $(CONFIG_STAMP) | $(BUILD)
	$(Q)$(CACHED) $@ '$(CACHE_KEY)' -- $(CXX) $(CXXFLAGS) $(DEPFLAGS) $(TORCH_CFLAGS) $(C_INCLUDES) -Ipriv/include -c $< -o $@

-include $(C_OBJECTS:.o=.d) $(SHIM_OBJECT:.o=.d)
# A dependency file made before a unit moved names its source at the old
# path: that path is remade (so the object rebuilds from the source where
# it is now, and the dependency file is rewritten) instead of stopping make.
c_src/%.c c_src/%.cpp: ;

LINK_NIF = $(CACHED) $@ '$(CACHE_KEY)' -- $(CXX) $(LDFLAGS) -o $@ $^ $(TORCH_LDFLAGS) $(TORCH_LIBS) -ldl
$(NIF): $(C_OBJECTS) $(SHIM_OBJECT)
	@mkdir -p $(dir $@)
	$(Q)$(LINK_NIF)

REAPER_SOURCES := c_src/reaper/tensor_blob_reaper.c c_src/system/tb_shm_names.c c_src/system/tb_fault.c
$(REAPER): $(REAPER_SOURCES) c_src/system/tb_shm_names.h c_src/system/tb_fault.h c_src/core/tb_layout.h $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(Q)$(CACHED) $@ '$(CACHE_KEY)' -- $(CC) -O2 -g $(DEBUG_MAP) -std=c11 -Wall -Wextra $(WERROR) $(C_INCLUDES) $(REAPER_SOURCES) -o $@

$(BUILD):
	$(Q)mkdir -p $@

ifdef AS_DEPENDENCY
# The application's priv: the library and the reaper beside the shipped
# files (priv/include, priv/python), in a folder of its own. Mix and rebar3
# link APP_DIR/priv to the checkout's priv; that link becomes a folder
# (which they keep, Mix copying the checkout's priv into it before each
# compile: hence writable copies), and the products are copied in on every
# build, through a new file renamed over the old (a VM may have the old one
# loaded).
APP_PRIV := $(APP_DIR_ABS)/priv
SHIPPED_PRIV := $(filter-out priv/tensor_blob_nif.so priv/tensor_blob_reaper,$(wildcard priv/*))
nif: install-nif
install-nif: $(NIF) $(REAPER)
	@if [ -L "$(APP_PRIV)" ]; then rm -f "$(APP_PRIV)"; fi
	@mkdir -p "$(APP_PRIV)"
	@for f in $(SHIPPED_PRIV); do rm -rf "$(APP_PRIV)/$${f#priv/}" && cp -R "$$f" "$(APP_PRIV)/" && chmod -R u+w "$(APP_PRIV)/$${f#priv/}" || exit 1; done
	@for f in $(NIF) $(REAPER); do t="$(APP_PRIV)/$$(basename "$$f")"; \
	    cmp -s "$$f" "$$t" || { cp "$$f" "$$t.new" && mv -f "$$t.new" "$$t"; } || exit 1; done
	@chmod -R u+w "$(APP_PRIV)"
.PHONY: install-nif
endif

# The Erlang API's doc chunks (EEP 48), for h(tensor_blob, to_blob) in the
# shell: doc/chunks/tensor_blob.chunk, shipped beside ebin. Mix and rebar3
# copy it into the application directory they build (install-docs).
# The API's modules get their docs; the other modules are internal
# (@private, -moduledoc false): their chunks say hidden, with no entries
# (scripts/doc_chunks.escript). Without edoc (Debian's erlang-edoc;
# erlang-nox brings it) the library still builds: the chunks are skipped
# with a note, and h/2 has no text to show.
PUBLIC_MODULES := tensor_blob tensor_blob_ipc tensor_blob_options tensor_blob_door tensor_blob_python tensor_blob_safetensors
CHUNKS := $(DOC_DIR)/chunks/tensor_blob.chunk
INTERNAL_MODULES := $(filter-out $(PUBLIC_MODULES),$(basename $(notdir $(wildcard src/tensor_blob*.erl))))
chunks: $(CHUNKS)
$(CHUNKS): scripts/doc_chunks.escript $(wildcard src/tensor_blob*.erl) Makefile
	@escript scripts/doc_chunks.escript "$(DOC_DIR)" "$(PUBLIC_MODULES)" "$(INTERNAL_MODULES)"

# install-docs APP_DIR=dir: the chunks into dir/doc/chunks (built there
# directly for a dependency; nothing to do when dir is here).
install-docs: $(CHUNKS)
	@test -n "$(APP_DIR)" || { echo "install-docs: set APP_DIR"; exit 2; }
	@if [ -f $(CHUNKS) ] && [ "$$(cd "$(APP_DIR)" 2>/dev/null && pwd -P)" != "$$(pwd -P)" ] && \
	    [ "$(DOC_DIR)" = doc ]; then mkdir -p "$(APP_DIR)/doc/chunks" && cp $(DOC_DIR)/chunks/*.chunk "$(APP_DIR)/doc/chunks/"; fi

clean:
	rm -rf $(BUILD) $(NIF) $(REAPER) doc/chunks _build

# What Mix's clean removes: the library's build products, not _build, and
# not what else lives under $(BUILD) (the Debian 13 root, Nx builds, the
# consumer projects). For a dependency (APP_DIR), its objects and what was
# installed into its application directory.
ifdef AS_DEPENDENCY
clean-nif:
	rm -rf $(BUILD) $(APP_PRIV)/tensor_blob_nif.so $(APP_PRIV)/tensor_blob_reaper $(DOC_DIR)/chunks
else
clean-nif:
	rm -f $(BUILD)/*.o $(BUILD)/*.d $(BUILD)/config-* $(NIF) $(REAPER)
	rm -rf doc/chunks
endif

# The tests, the checks and the tools (absent from a package, which only
# builds).
-include mk/c_tests.mk mk/suites.mk mk/nx.mk mk/fuzz.mk
