# The C tests: pure C unit tests (no BEAM, no libtorch), the shim's test
# (libtorch, no BEAM), valgrind over them, and the load tests' builds.
# Objects go under $(BUILD)/test; -MMD makes each depend on the headers it
# includes.

TEST_CFLAGS = -O1 -g -std=c11 -Wall -Wextra $(WERROR) $(SANITIZE) $(C_INCLUDES) -Ic_test -Ipriv/include
TORCH_INCLUDE := $(if $(filter-out /usr /usr/,$(LIBTORCH_DIR)),$(LIBTORCH_DIR)/include,/usr/include)

$(BUILD)/test/%.o: c_test/%.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) $(DEPFLAGS) -c $< -o $@
$(BUILD)/test/src/%.o: $(SOURCE_OF_STEM) $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) $(DEPFLAGS) -c $< -o $@
-include $(wildcard $(BUILD)/test/*.d $(BUILD)/test/src/*.d)

# Our DLPack declarations against the dlpack.h of the linked libtorch.
$(BUILD)/test/test_dlpack_abi.o: TEST_CFLAGS += -I$(TORCH_INCLUDE)

# The bridge header as a consumer compiles it, over a stand-in VM.
$(BUILD)/test/test_bridge.o: TEST_CFLAGS += -I$(ERTS_INCLUDE)

# Each test and the sources it tests.
C_TESTS := c_test c_test_overlap c_test_intervals c_test_registry c_test_handed c_test_release c_test_slots c_test_dlpack c_test_cuda c_test_dlpack_abi c_test_shm c_test_bridge c_test_safetensors c_test_proc_maps c_test_once
# The validation code.
c_test_SOURCES := test_layout src/tb_layout src/tb_dtype
# Whether a layout's elements share memory, against a brute-force model.
c_test_overlap_SOURCES := test_overlap src/tb_overlap
# The interval set of the read-only and frozen registries, against a
# brute-force model.
c_test_intervals_SOURCES := test_intervals src/tb_intervals
# The registry of guarded memory and the counters, against a model and
# raced from threads (make tsan-test runs it under ThreadSanitizer).
c_test_registry_SOURCES := test_registry src/tb_registry src/tb_intervals src/tb_count src/tb_stripe
# The set of DLPack addresses handed out, past its room into the
# registry, raced from threads (make tsan-test too).
c_test_handed_SOURCES := test_handed src/tb_handed src/tb_registry src/tb_intervals src/tb_stripe
# The release thread, from many threads at once (make tsan-test too).
c_test_release_SOURCES := test_release src/tb_release
# The slots that carry a word to an embedded Python, from many threads at
# once (make tsan-test too).
c_test_slots_SOURCES := test_slots src/tb_slots
# The DLPack import checks.
c_test_dlpack_SOURCES := test_dlpack src/tb_dlpack_check src/tb_layout src/tb_dtype
# The CUDA logic that runs without a GPU (pointer-check decisions and the
# runtimes' dispatch of them, the stream contract, IPC handles), over a
# stand-in runtime defined in the test only.
c_test_cuda_SOURCES := test_cuda src/tb_devmem src/tb_runtime src/tb_stream src/tb_cuda_handle src/tb_torch_cuda src/tb_shm_names src/tb_fault src/tb_cuda_ops
c_test_dlpack_abi_SOURCES := test_dlpack_abi
# The bridge header's table: found once, retired, the first layout, and
# threads calling while builds come and go (make tsan-test too).
c_test_bridge_SOURCES := test_bridge
# Region files (names, opening by name, PyTorch's header count under the
# SIGBUS guard, what a dead VM left), in a private /dev/shm when the
# machine allows one.
c_test_shm_SOURCES := test_shm src/tb_shm_names src/tb_fault
# The safetensors header: each named refusal, a valid header, the writer.
c_test_safetensors_SOURCES := test_safetensors src/tb_safetensors src/tb_json src/tb_safetensors_decode src/tb_safetensors_encode src/tb_dtype
# A value made once and read without a lock, raced from threads (make
# tsan-test too).
c_test_once_SOURCES := test_once
# What the kernel says of an address: shared file mappings named by file,
# and threads asking at once (make tsan-test too).
c_test_proc_maps_SOURCES := test_proc_maps src/tb_proc_maps

.SECONDEXPANSION:
$(C_TESTS:%=$(BUILD)/%): $(BUILD)/%: $$(addprefix $(BUILD)/test/,$$(addsuffix .o,$$($$*_SOURCES)))
	$(CC) $(SANITIZE) $^ -o $@ -lpthread

TSAN_CC ?= clang-14
tsan-test: | $(BUILD)
	$(TSAN_CC) -O1 -g -std=c11 -Wall -Wextra -fsanitize=thread $(C_INCLUDES) \
		$(patsubst %,c_test/%.c,$(filter-out src/%,$(c_test_registry_SOURCES))) \
		$(foreach s,$(filter src/%,$(c_test_registry_SOURCES)),$(wildcard c_src/*/$(notdir $(s)).c)) -o $(BUILD)/c_test_registry_tsan -lpthread
	TSAN_OPTIONS=halt_on_error=1 $(BUILD)/c_test_registry_tsan
	$(TSAN_CC) -O1 -g -std=c11 -Wall -Wextra -fsanitize=thread $(C_INCLUDES) \
		c_test/test_handed.c c_src/system/tb_handed.c c_src/system/tb_registry.c c_src/core/tb_intervals.c \
		c_src/core/tb_stripe.c -o $(BUILD)/c_test_handed_tsan -lpthread
	TSAN_OPTIONS=halt_on_error=1 $(BUILD)/c_test_handed_tsan
	$(TSAN_CC) -O1 -g -std=c11 -Wall -Wextra -fsanitize=thread $(C_INCLUDES) \
		c_test/test_release.c c_src/system/tb_release.c -o $(BUILD)/c_test_release_tsan -lpthread
	TSAN_OPTIONS=halt_on_error=1 $(BUILD)/c_test_release_tsan
	$(TSAN_CC) -O1 -g -std=c11 -Wall -Wextra -fsanitize=thread $(C_INCLUDES) \
		c_test/test_slots.c c_src/core/tb_slots.c -o $(BUILD)/c_test_slots_tsan -lpthread
	TSAN_OPTIONS=halt_on_error=1 $(BUILD)/c_test_slots_tsan
	$(TSAN_CC) -O1 -g -std=c11 -Wall -Wextra -fsanitize=thread -Ipriv/include -I$(ERTS_INCLUDE) \
		c_test/test_bridge.c -o $(BUILD)/c_test_bridge_tsan -lpthread
	TSAN_OPTIONS=halt_on_error=1 $(BUILD)/c_test_bridge_tsan
	$(TSAN_CC) -O1 -g -std=c11 -Wall -Wextra -fsanitize=thread $(C_INCLUDES) \
		c_test/test_once.c -o $(BUILD)/c_test_once_tsan -lpthread
	TSAN_OPTIONS=halt_on_error=1 $(BUILD)/c_test_once_tsan
	$(TSAN_CC) -O1 -g -std=c11 -Wall -Wextra -fsanitize=thread $(C_INCLUDES) \
		c_test/test_proc_maps.c c_src/system/tb_proc_maps.c -o $(BUILD)/c_test_proc_maps_tsan -lpthread
	TSAN_OPTIONS=halt_on_error=1 $(BUILD)/c_test_proc_maps_tsan

c-test: $(C_TESTS:%=$(BUILD)/%)
	@set -e; for t in $(C_TESTS); do echo "$(BUILD)/$$t"; $(BUILD)/$$t; done

# The shim through its C API, with libtorch but without the BEAM.
$(BUILD)/shim_test: $(BUILD)/test/test_shim.o $(BUILD)/test/src/tb_dtype.o $(BUILD)/test/src/tb_fault.o $(SHIM_OBJECT)
	$(CXX) $(SANITIZE) $^ -o $@ $(TORCH_LDFLAGS) $(TORCH_LIBS)

shim-test: $(BUILD)/shim_test
	$(BUILD)/shim_test

# memcheck over every C test program (C_TESTS, so a new one is never left
# out) and the shim's tests.
VALGRIND := valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite
valgrind-test: $(C_TESTS:%=$(BUILD)/%) $(BUILD)/shim_test
	@set -e; for t in $(C_TESTS); do echo "valgrind $(BUILD)/$$t"; $(VALGRIND) $(BUILD)/$$t; done
	scripts/valgrind_shim.sh $(VALGRIND) --suppressions=c_test/valgrind.supp $(BUILD)/shim_test

# Two more builds of the library for the load tests
# (test/tensor_blob_load_tests.erl): one of another TB_ABI, and one that
# fails the load step named by the environment variable TB_LOAD_FAULT
# (c_src/core/tb_load.h). Only the objects that differ are rebuilt.
LOAD_TEST := $(BUILD)/load_test
LOAD_TEST_CFLAGS = $(CFLAGS) $(DEPFLAGS) $(CUDA_CFLAGS) $(C_INCLUDES) -Ipriv/include -I$(ERTS_INCLUDE)
$(LOAD_TEST)/abi/%.o: $(SOURCE_OF_STEM) $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(LOAD_TEST_CFLAGS) -DTB_ABI=0x7e57u -c $< -o $@
$(LOAD_TEST)/faults/%.o: $(SOURCE_OF_STEM) $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(LOAD_TEST_CFLAGS) -DTB_LOAD_FAULTS -c $< -o $@
-include $(wildcard $(LOAD_TEST)/*/*.d)

FAULT_OBJECTS := $(LOAD_TEST)/faults/tb_nif.o $(LOAD_TEST)/faults/tb_state.o
$(LOAD_TEST)/abi/tensor_blob_nif.so: $(C_OBJECTS:$(BUILD)/%=$(LOAD_TEST)/abi/%) $(SHIM_OBJECT)
	$(LINK_NIF)
$(LOAD_TEST)/faults/tensor_blob_nif.so: $(FAULT_OBJECTS) $(filter-out $(FAULT_OBJECTS:$(LOAD_TEST)/faults/%=$(BUILD)/%),$(C_OBJECTS)) $(SHIM_OBJECT)
	$(LINK_NIF)

load-test-builds: $(LOAD_TEST)/abi/tensor_blob_nif.so $(LOAD_TEST)/faults/tensor_blob_nif.so

.PHONY: c-test shim-test valgrind-test tsan-test load-test-builds
