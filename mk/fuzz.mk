# Reliability: fuzzing (libFuzzer, clang-14) and stress.
#
#   make fuzz         run each fuzz harness for FUZZ_SECONDS (default 60)
#   make fuzz-ci      the same, 30 s each
#   make stress       1,000,000 create-and-drop cycles of pinned views
#   make stress-ci    100,000 cycles
#
# The harnesses run on a copy of the committed seed corpus in
# fuzz/corpus-run/ (gitignored), which keeps what they find between runs;
# crashes are written there too (crash-*, leak-*, timeout-*).

FUZZ_CC ?= clang-14
FUZZ_SECONDS ?= 60
FUZZ_FLAGS := -g -O1 -std=c11 -Wall -Wextra -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined $(C_INCLUDES) -Ic_test -Ipriv/include
FUZZ_HARNESSES := layout dtype overlap safetensors
STRESS_CYCLES ?= 1000000

# Each harness and the sources it fuzzes.
fuzz_layout_SOURCES := fuzz_layout src/tb_layout src/tb_dtype
fuzz_dtype_SOURCES := fuzz_dtype src/tb_dtype
fuzz_overlap_SOURCES := fuzz_overlap src/tb_overlap
fuzz_safetensors_SOURCES := fuzz_safetensors src/tb_safetensors src/tb_json src/tb_safetensors_decode src/tb_safetensors_encode src/tb_dtype

$(BUILD)/fuzz/%.o: fuzz/%.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(DEPFLAGS) -c $< -o $@
$(BUILD)/fuzz/src/%.o: $(SOURCE_OF_STEM) $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(DEPFLAGS) -c $< -o $@
-include $(wildcard $(BUILD)/fuzz/*.d $(BUILD)/fuzz/src/*.d)

.SECONDEXPANSION:
$(FUZZ_HARNESSES:%=$(BUILD)/fuzz_%): $(BUILD)/%: $$(addprefix $(BUILD)/fuzz/,$$(addsuffix .o,$$($$*_SOURCES)))
	$(FUZZ_CC) $(FUZZ_FLAGS) $^ -o $@

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

.PHONY: fuzz fuzz-ci fuzz-build stress stress-ci
