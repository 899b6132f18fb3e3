# tests/fuzz.mk: builds tests/fuzz_decode.c with clang's libFuzzer + AddressSanitizer +
# UndefinedBehaviorSanitizer against the decode path, seeds a corpus from tests/data and runs
# it for FUZZ_SECONDS. `make fuzz` calls this file; crashes land in build/fuzz/ as crash-*.
# Knobs: FUZZ_SECONDS (120), FUZZ_JOBS (1), CLANG (clang).
CLANG        ?= clang
FUZZ_SECONDS ?= 120
FUZZ_JOBS    ?= 1
FUZZ_DIR     := build/fuzz
FUZZ_SRC     := data/image.c data/transform.c data/randaugment.c vil/common.c
# a 4-megapixel cap keeps each input fast under ASan; the real limit is tested in test_image
FUZZ_CFLAGS  := -g -O1 -std=gnu11 -I. -I/usr/include/stb -fno-omit-frame-pointer \
                -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
                -DVIL_IMAGE_MAX_PIXELS=4000000LL
FUZZ_LIBS    := -ljpeg -lstb -lm

.PHONY: fuzz fuzz-build
fuzz: $(FUZZ_DIR)/fuzz_decode
	@mkdir -p $(FUZZ_DIR)/corpus
	@cp -n tests/data/*.jpg tests/data/*.JPEG $(FUZZ_DIR)/corpus/ 2>/dev/null || true
	cd $(FUZZ_DIR) && ./fuzz_decode -max_total_time=$(FUZZ_SECONDS) \
	    $(if $(filter-out 1,$(FUZZ_JOBS)),-jobs=$(FUZZ_JOBS) -workers=$(FUZZ_JOBS)) \
	    -rss_limit_mb=2560 -timeout=10 -max_len=65536 -print_final_stats=1 corpus

fuzz-build: $(FUZZ_DIR)/fuzz_decode

$(FUZZ_DIR)/fuzz_decode: tests/fuzz_decode.c $(FUZZ_SRC) data/image.h data/transform.h data/randaugment.h vil/common.h tests/fuzz.mk
	@mkdir -p $(FUZZ_DIR)
	$(CLANG) $(FUZZ_CFLAGS) -o $@ tests/fuzz_decode.c $(FUZZ_SRC) $(FUZZ_LIBS)
