# tests/fuzz.mk: libFuzzer + AddressSanitizer + UndefinedBehaviorSanitizer harnesses for the
# readers of untrusted bytes: fuzz_decode (images: libjpeg-turbo, stb_image, the transforms),
# fuzz_pth (PyTorch checkpoints: libzip, the unpickler, the storages) and fuzz_pickle (the
# unpickler alone). `make fuzz` builds them, seeds each corpus from tests/data and runs each for
# FUZZ_SECONDS; crashes land in build/fuzz/ as crash-*. Knobs: FUZZ_SECONDS (120), FUZZ_JOBS (1),
# FUZZ_TARGETS (all three), CLANG (clang).
CLANG        ?= clang
FUZZ_SECONDS ?= 120
FUZZ_JOBS    ?= 1
FUZZ_TARGETS ?= fuzz_decode fuzz_pth fuzz_pickle
FUZZ_DIR     := build/fuzz
FUZZ_FLAGS   := -g -O1 -std=gnu11 -I. -I/usr/include/stb -I/usr/include/cjson -fno-omit-frame-pointer \
                -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
# a 4-megapixel cap keeps each input fast under ASan; the real limit is tested in test_image
DECODE_SRC   := data/image.c data/transform.c data/randaugment.c vil/common.c
PTH_SRC      := vil/pth.c vil/pickle.c vil/safetensors.c vil/common.c
PICKLE_SRC   := vil/pickle.c vil/common.c

.PHONY: fuzz fuzz-build  # (run-% stay out: make matches no pattern rule for a phony target)
fuzz: $(FUZZ_TARGETS:%=run-%)
fuzz-build: $(FUZZ_TARGETS:%=$(FUZZ_DIR)/%)

$(FUZZ_DIR)/fuzz_decode: tests/fuzz_decode.c $(DECODE_SRC) data/image.h data/transform.h data/randaugment.h vil/common.h tests/fuzz.mk
	@mkdir -p $(FUZZ_DIR)
	$(CLANG) $(FUZZ_FLAGS) -DVIL_IMAGE_MAX_PIXELS=4000000LL -o $@ tests/fuzz_decode.c $(DECODE_SRC) -ljpeg -lstb -lm
$(FUZZ_DIR)/fuzz_pth: tests/fuzz_pth.c $(PTH_SRC) vil/pth.h vil/pickle.h vil/safetensors.h vil/common.h tests/fuzz.mk
	@mkdir -p $(FUZZ_DIR)
	$(CLANG) $(FUZZ_FLAGS) -o $@ tests/fuzz_pth.c $(PTH_SRC) -lzip -lcjson -lm
$(FUZZ_DIR)/fuzz_pickle: tests/fuzz_pickle.c $(PICKLE_SRC) vil/pickle.h vil/common.h tests/fuzz.mk
	@mkdir -p $(FUZZ_DIR)
	$(CLANG) $(FUZZ_FLAGS) -o $@ tests/fuzz_pickle.c $(PICKLE_SRC) -lm

# seeds: the test images; the torch.save files of tests/data/pth; their data.pkl entries
$(FUZZ_DIR)/corpus_fuzz_decode:
	@mkdir -p $@ && cp -n tests/data/*.jpg tests/data/*.JPEG $@/ 2>/dev/null || true
$(FUZZ_DIR)/corpus_fuzz_pth:
	@mkdir -p $@ && cp -n tests/data/pth/*.pth $@/
	@# a small file too: mutations of a 1 KB archive run many times faster than of a 170 KB one
	-@/usr/bin/python3 -c "import torch, collections; torch.save({'model': collections.OrderedDict(w=torch.arange(6.).reshape(2, 3), b=torch.ones(3).half())}, '$@/tiny.pth')"
$(FUZZ_DIR)/corpus_fuzz_pickle:
	@mkdir -p $@ && for f in tests/data/pth/*.pth; do n=$$(basename $$f .pth); \
	    unzip -p $$f "*/data.pkl" > $@/$$n.pkl; done

run-%: $(FUZZ_DIR)/% | $(FUZZ_DIR)/corpus_%
	cd $(FUZZ_DIR) && ./$* -max_total_time=$(FUZZ_SECONDS) \
	    $(if $(filter-out 1,$(FUZZ_JOBS)),-jobs=$(FUZZ_JOBS) -workers=$(FUZZ_JOBS)) \
	    -rss_limit_mb=2560 -timeout=10 -max_len=$(if $(filter fuzz_decode,$*),65536,262144) \
	    -artifact_prefix=$*- -print_final_stats=1 corpus_$*
