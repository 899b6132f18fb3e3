# vil: Vision Longhorn in C and CUDA.
#   make            build bin/vil, and the CUDA backend as the module $(BUILD)/lib/libvil-cuda.so
#                   when nvcc is found
#   make test       build and run every CPU test; closes with "N passed, N failed"
#   make test-gpu   CUDA-against-CPU tests (needs a GPU)
#   make test-asan  every CPU test again, built with AddressSanitizer + UBSan (in build/asan)
#   make test-slurm tools/train.sbatch on a one-node Slurm cluster of this machine (root)
#   make fuzz       libFuzzer harnesses: image decoder, .pth reader, unpickler, checkpoint load (clang)
#   make deps       check for the Debian packages of the build and the demo; install the missing
#   make demo       deps, build, a short CPU training run on Fashion-MNIST, eval and classify
# Knobs: CUDA=0 forces a CPU-only build; CUDA_HOME; DEPS_PREFIX=/path/usr adds an unpacked
# Debian package tree (headers and libraries) for machines without libstb-dev or libcjson-dev.
# NCCL=0 builds the CUDA backend without NCCL (the default uses it when nccl.h is found).
# MPI=0 builds without MPI (the default uses Open MPI when pkg-config finds ompi-c).
# ARCHIVE=0 builds without libarchive (tar shards; the default uses it when it is found).
# CUDA_ARCH: the GPU code (default: sm_80 sm_86 sm_89 sm_90 and the newer families this nvcc
# knows, plus PTX of the newest); a quick single-GPU dev build compiles one architecture:
#   make CUDA_ARCH="-gencode arch=compute_90,code=sm_90"
# The CUDA backend is a module: cuda/*.cu and cuda/core_shim.c make $(BUILD)/lib/libvil-cuda.so,
# the one file that links cudart, cuBLAS(Lt), cuDNN and NCCL; libvil.a, bin/vil, the tests and
# the tools link none of them, even in a CUDA build, and load the module when a command asks
# for --device cuda (or auto on a machine with an NVIDIA driver; vil/backend.h: where it is
# looked for, VIL_BACKEND_PATH; vil/backend_module.h: the boundary). The dev/cuda harnesses
# link cuda/'s objects themselves.

# `make` alone builds everything (the version rules below come before `all`)
.DEFAULT_GOAL := all

CC      ?= cc
NVCC    ?=
OPT     ?= -O3 -march=native
# -fno-math-errno: expf and log1pf need not set errno, so loops that call them can vectorize
# (vil/vecmath.h: glibc's libmvec); nothing in vil reads errno after a math function
# -fPIC -fvisibility=hidden: every object may go into libvil.so, which exports only include/vil.h's
# functions (VIL_API); inside a static link hidden symbols resolve as usual
CFLAGS  += $(OPT) -std=gnu11 -Wall -Wextra -Wno-unused-parameter -fno-math-errno -fopenmp -g -I. \
           -fPIC -fvisibility=hidden
# -ldl: vil/backend_load.c dlopen()s the CUDA module
LDLIBS  += -fopenmp -lm -lpthread -ldl
BUILD   := build

PKG_CONFIG ?= pkg-config
have_pkg = $(shell $(PKG_CONFIG) --exists $(1) 2>/dev/null && echo yes)

ifneq ($(DEPS_PREFIX),)
  CFLAGS  += -I$(DEPS_PREFIX)/include -I$(DEPS_PREFIX)/include/stb -I$(DEPS_PREFIX)/include/cjson
  LDFLAGS += -L$(DEPS_PREFIX)/lib/x86_64-linux-gnu -Wl,-rpath,$(DEPS_PREFIX)/lib/x86_64-linux-gnu
endif

# ---- required: libjpeg-turbo, stb_image, cJSON, libzip, zlib ----
ifeq ($(call have_pkg,libjpeg),yes)
  CFLAGS += $(shell $(PKG_CONFIG) --cflags libjpeg)
  LDLIBS += $(shell $(PKG_CONFIG) --libs libjpeg)
else
  LDLIBS += -ljpeg
endif
ifeq ($(call have_pkg,stb),yes)
  CFLAGS += $(shell $(PKG_CONFIG) --cflags stb)
  LDLIBS += $(shell $(PKG_CONFIG) --libs stb)
else
  CFLAGS += -I/usr/include/stb
  LDLIBS += -lstb
endif
ifeq ($(call have_pkg,libcjson),yes)
  CFLAGS += $(shell $(PKG_CONFIG) --cflags libcjson)
  LDLIBS += $(shell $(PKG_CONFIG) --libs libcjson)
else
  CFLAGS += -I/usr/include/cjson
  LDLIBS += -lcjson
endif

# libzip reads PyTorch's .pth checkpoints (zip archives)
ifeq ($(call have_pkg,libzip),yes)
  CFLAGS += $(shell $(PKG_CONFIG) --cflags libzip)
  LDLIBS += $(shell $(PKG_CONFIG) --libs libzip)
else
  LDLIBS += -lzip
endif

ifeq ($(call have_pkg,zlib),yes)
  LDLIBS += $(shell $(PKG_CONFIG) --libs zlib)
else
  LDLIBS += -lz
endif

# ---- optional: libarchive (libarchive-dev) indexes WebDataset tar shards (data/shards.c);
# without it vil reads every other layout and says what to install for shards ----
ARCHIVE ?= $(if $(or $(call have_pkg,libarchive),$(wildcard /usr/include/archive.h $(DEPS_PREFIX)/include/archive.h)),1,0)
ifeq ($(ARCHIVE),1)
  ifeq ($(call have_pkg,libarchive),yes)
    CFLAGS += -DVIL_ARCHIVE $(shell $(PKG_CONFIG) --cflags libarchive)
    LDLIBS += $(shell $(PKG_CONFIG) --libs libarchive)
  else
    CFLAGS += -DVIL_ARCHIVE
    LDLIBS += -larchive
  endif
endif

# ---- optional: a CBLAS (OpenBLAS) for the CPU matrix products ----
BLAS ?= $(if $(call have_pkg,openblas),openblas,$(if $(call have_pkg,blas),blas,))
ifneq ($(BLAS),)
  CFLAGS += -DVIL_BLAS $(shell $(PKG_CONFIG) --cflags $(BLAS))
  LDLIBS += $(shell $(PKG_CONFIG) --libs $(BLAS))
endif

# ---- optional: MPI (Open MPI: libopenmpi-dev) starts and joins the processes of multi-GPU or
# multi-node training (mpirun, srun); MPI=0 builds a single-process vil ----
MPI ?= $(if $(call have_pkg,ompi-c),1,0)
ifeq ($(MPI),1)
  ifneq ($(call have_pkg,ompi-c),yes)
    $(error MPI=1 but pkg-config finds no ompi-c: apt-get install libopenmpi-dev, or build with MPI=0)
  endif
  CFLAGS += -DVIL_MPI $(shell $(PKG_CONFIG) --cflags ompi-c)
  LDLIBS += $(shell $(PKG_CONFIG) --libs ompi-c)
endif

# ---- optional: CUDA (cuBLASLt, cuDNN; NCCL when found) ----
CUDA_HOME ?= $(firstword $(wildcard /usr/local/cuda /usr/lib/cuda))
ifeq ($(NVCC),)
  NVCC := $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
endif
CUDA ?= $(if $(NVCC),1,0)
CU_SRC := $(wildcard cuda/*.cu)
ifeq ($(CUDA),1)
  CUDA_INC := $(CUDA_HOME)/include
  CUDA_LIB := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib))
  # cuDNN and NCCL: CUDA's own tree (Debian layout here) or the distribution's (Ubuntu)
  CUDNN_INC := $(firstword $(dir $(wildcard $(CUDA_INC)/cudnn.h /usr/include/cudnn.h /usr/include/x86_64-linux-gnu/cudnn.h)))
  NCCL_INC  := $(firstword $(dir $(wildcard $(CUDA_INC)/nccl.h /usr/include/nccl.h)))
  ifeq ($(CUDNN_INC),)
    $(error CUDA found at $(CUDA_HOME) but no cudnn.h: install cuDNN 9 or build with CUDA=0)
  endif
  # NCCL (multi-GPU training) is optional: without nccl.h, or with NCCL=0, vil builds without it
  # and vil_nccl_available() says so to the multi-GPU commands
  NCCL ?= $(if $(NCCL_INC),1,0)
  ifeq ($(NCCL),1)
    ifeq ($(NCCL_INC),)
      $(error NCCL=1 but no nccl.h in $(CUDA_INC) or /usr/include: install libnccl-dev or build with NCCL=0)
    endif
    NCCL_FLAGS := -DVIL_NCCL -I$(NCCL_INC)
    NCCL_LIBS := -lnccl
  endif
  # GPU code: SASS for sm_80 (A100, A30), sm_86 (RTX 30xx, A40, A10; also runs on sm_87 Orin),
  # sm_89 (L4, L40S, RTX 40xx), sm_90 (H100, H200) and the newer families this nvcc lists:
  # sm_100 (B200, B300: sm_103 runs it) and sm_120 (RTX 50xx, RTX PRO 6000; GB10's sm_121 runs
  # it) from CUDA 12.8 on; the variants (sm_87/88/101/103/110/121) are left out. Plus the newest
  # one's PTX, which the driver compiles for GPUs newer still. cuda/ needs sm_80 (cp.async, bf16).
  # CUDA_ARCH on the command line replaces all of it; VIL_CUDA_ARCHS tells the runtime check.
  ifeq ($(origin CUDA_ARCH),undefined)
    CUDA_CODES := $(shell $(NVCC) --list-gpu-code 2>/dev/null)
    CUDA_SMS := $(strip $(if $(strip $(CUDA_CODES)),$(filter $(CUDA_CODES),sm_80 sm_86 sm_89 sm_90) \
                $(filter-out sm_110,$(filter sm_1%0,$(CUDA_CODES))),sm_80 sm_86 sm_89 sm_90))
    CUDA_PTX := $(patsubst sm_%,compute_%,$(lastword $(sort $(filter sm_8% sm_9%,$(CUDA_SMS))) \
                $(sort $(filter sm_1%,$(CUDA_SMS)))))
    CUDA_ARCH := $(foreach s,$(CUDA_SMS),-gencode arch=compute_$(s:sm_%=%),code=$(s)) \
                 -gencode arch=$(CUDA_PTX),code=$(CUDA_PTX)
    CUDA_ARCHS_TEXT := $(CUDA_SMS) + PTX $(CUDA_PTX)
  else
    # the sm_XX and compute_XX that the given flags embed (code=..., -arch=sm_XX)
    comma := ,
    CUDA_ARCH_WORDS := $(subst $(comma), ,$(subst [, ,$(subst ], ,$(CUDA_ARCH))))
    CUDA_ARCH_WORDS := $(patsubst code=%,%,$(patsubst -code=%,%,$(patsubst --gpu-code=%,%,\
                       $(patsubst -arch=%,%,$(patsubst --gpu-architecture=%,%,$(CUDA_ARCH_WORDS))))))
    CUDA_ARCHS_TEXT := $(filter sm_%,$(CUDA_ARCH_WORDS))$(if $(filter compute_%,$(CUDA_ARCH_WORDS)), + PTX \
                       $(filter compute_%,$(CUDA_ARCH_WORDS)))
    CUDA_ARCHS_TEXT := $(or $(strip $(CUDA_ARCHS_TEXT)),$(subst $(comma), ,$(CUDA_ARCH)))
  endif
  # the objects go into a shared module: position-independent, every symbol hidden (the module
  # exports its entry point alone, which cuda/module.map also says to the linker)
  NVCCFLAGS += -O3 -std=c++17 $(CUDA_ARCH) -lineinfo -I. -I$(CUDNN_INC) $(NCCL_FLAGS) \
               -DVIL_CUDA_ARCHS='"$(strip $(CUDA_ARCHS_TEXT))"' \
               --expt-relaxed-constexpr -Xcompiler -fopenmp,-Wall,-Wno-unused-parameter,-fPIC,-fvisibility=hidden
  # VIL_CUDA: this build makes the module, so vil/backend_load.c looks for it
  CFLAGS += $(if $(wildcard cuda/backend_cuda.cu),-DVIL_CUDA)
  # the CUDA libraries: the module's link (and the dev/cuda harnesses'), never the core's
  CUDA_LDFLAGS := -L$(CUDA_LIB) -L/usr/lib/x86_64-linux-gnu -Wl,-rpath,$(CUDA_LIB)
  CUDA_LDLIBS := -lcudnn -lcublasLt -lcublas $(NCCL_LIBS) -lcudart -lstdc++ -lm
  CU_OBJ := $(patsubst %.cu,$(BUILD)/%.o,$(CU_SRC))
  CU_SHIM_OBJ := $(BUILD)/cuda/core_shim.o
  CUDA_MODULE := $(BUILD)/lib/libvil-cuda.so
  # what `vil version` says of CUDA without loading the module, and the build's own module
  # folder, the loader's last place but one to look (vil/backend.h)
  CUDA_VERSION_TEXT := $(shell $(NVCC) --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
  $(BUILD)/vil/backend_load.o: CFLAGS += -DVIL_MODULE_DIR='"$(abspath $(BUILD)/lib)"' \
      -DVIL_CUDA_VERSION='"$(CUDA_VERSION_TEXT)"' -DVIL_CUDA_ARCHS='"$(strip $(CUDA_ARCHS_TEXT))"' \
      -DVIL_CUDA_NCCL=$(if $(filter 1,$(NCCL)),1,0)
  $(CU_SHIM_OBJ): CFLAGS += -fPIC -fvisibility=hidden
endif

# ---- the git commit of the build, for `vil version` (and no date: builds stay reproducible) ----
# Only vil/version.o gets it, with the BLAS's pkg-config name, and that object is linked into
# bin/vil rather than libvil.a: a new commit recompiles one file and relinks vil, not the tests.
# The stamp file is rewritten only when the text changes, so it is what version.o depends on.
# Outside a git checkout (a tarball; .git is a file in a worktree) the commit is "unknown".
VIL_GIT := $(if $(wildcard .git),$(shell git describe --always --dirty --abbrev=12 2>/dev/null \
             | tr -cd 'A-Za-z0-9._+-'))
VIL_GIT := $(or $(VIL_GIT),unknown)
VERSION_OBJ := $(BUILD)/vil/version.o
$(VERSION_OBJ): CFLAGS += -DVIL_GIT_COMMIT='"$(VIL_GIT)"' -DVIL_BLAS_NAME='"$(BLAS)"'
$(VERSION_OBJ): $(BUILD)/gen/version.stamp
$(BUILD)/gen/version.stamp: FORCE
	@mkdir -p $(dir $@)
	@echo '$(VIL_GIT) $(BLAS)' > $@.tmp; if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
FORCE:

# ---- the options an object was built with: $(BUILD)/options holds every flag that changes
# objects or links (CUDA, MPI, NCCL, BLAS, the compilers and their flags), rewritten only when it
# differs, and everything built depends on it. Without it `make CUDA=0` after a CUDA build kept
# the CUDA objects and failed to link. ----
OPTIONS := CUDA=$(CUDA) MPI=$(MPI) NCCL=$(NCCL) BLAS=$(BLAS) ARCHIVE=$(ARCHIVE) CC=$(CC) NVCC=$(NVCC) \
           CFLAGS=$(CFLAGS) NVCCFLAGS=$(NVCCFLAGS) LDFLAGS=$(LDFLAGS) LDLIBS=$(LDLIBS) \
           CUDA_LDFLAGS=$(CUDA_LDFLAGS) CUDA_LDLIBS=$(CUDA_LDLIBS)
OPTIONS_FILE := $(BUILD)/options
$(OPTIONS_FILE): FORCE
	$(shell mkdir -p $(dir $@))$(file >$@.tmp,$(OPTIONS))
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi

LIBVIL_SO := $(BUILD)/lib/libvil.so
LIB_SRC := $(wildcard api/*.c vil/*.c formats/*.c data/*.c train/*.c eval/*.c charts/*.c)
LIB_OBJ := $(filter-out $(VERSION_OBJ),$(patsubst %.c,$(BUILD)/%.o,$(LIB_SRC))) \
           $(BUILD)/gen/imagenet_names.o
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
GPU_TEST_SRC := $(wildcard tests/gpu_*.c)
GPU_TEST_BIN := $(patsubst tests/%.c,$(BUILD)/tests/%,$(GPU_TEST_SRC))
TOOL_SRC := $(wildcard tools/*.c)
TOOL_BIN := $(patsubst tools/%.c,$(BUILD)/tools/%,$(TOOL_SRC))
HDR := $(wildcard include/*.h api/*.h vil/*.h vil/rec/*.h formats/*.h data/*.h train/*.h eval/*.h charts/*.h cli/*.h cuda/*.h cuda/*.cuh)

.PHONY: all test test-run test-gpu clean fuzz demo deps dev-cuda FORCE
all: bin/vil $(LIBVIL_SO) $(CUDA_MODULE) $(TEST_BIN) $(TOOL_BIN) $(if $(filter 1,$(CUDA)),$(GPU_TEST_BIN))

# the commands' flag tables (cli/args.h) leave a flag's optional range fields out
$(BUILD)/cli/%.o: CFLAGS += -Wno-missing-field-initializers

$(BUILD)/%.o: %.c $(HDR) Makefile $(OPTIONS_FILE)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/cuda/%.o: cuda/%.cu $(HDR) Makefile $(OPTIONS_FILE)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# ImageNet-1k's class names as a C table (vil/imagenet_names.h), from the names file users also
# pass to `vil train --names`: one source for both
$(BUILD)/gen/imagenet_names.c: data/imagenet_classes.tsv Makefile
	@mkdir -p $(dir $@)
	awk -F'\t' 'BEGIN { print "/* generated from data/imagenet_classes.tsv by the Makefile */"; \
	    print "#include \"vil/imagenet_names.h\""; \
	    print "const char *const vil_imagenet_class_names[1000] = {" } \
	    /^#/ || NF < 3 { next } \
	    { gsub(/\\/, "\\\\", $$3); gsub(/"/, "\\\"", $$3); printf "    \"%s\",\n", $$3; n++ } \
	    END { print "};"; if (n != 1000) { print "imagenet_classes.tsv: " n " names, not 1000" > "/dev/stderr"; exit 1 } }' \
	    $< > $@.tmp && mv $@.tmp $@
$(BUILD)/gen/imagenet_names.o: $(BUILD)/gen/imagenet_names.c vil/imagenet_names.h $(OPTIONS_FILE)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libvil.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# the CUDA module (vil/backend_module.h): -z defs refuses a symbol that nothing linked defines,
# so a core function the CUDA sources call without a shim in cuda/core_shim.c fails here
ifeq ($(CUDA),1)
$(CUDA_MODULE): $(CU_OBJ) $(CU_SHIM_OBJ) cuda/module.map $(OPTIONS_FILE)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libvil-cuda.so -Wl,-z,defs -Wl,--version-script=cuda/module.map \
	    $(CUDA_LDFLAGS) -o $@ $(CU_OBJ) $(CU_SHIM_OBJ) $(CUDA_LDLIBS)
endif

# ---- libvil.so: the library other programs link (include/vil.h; README "Using vil from C"). Its
# SONAME carries the major version; it exports only the header's functions (tests/test_exports.sh
# checks the list against the header). version.o goes in here, as in bin/vil. ----
VIL_VERSION := $(shell sed -n 's/^\#define VIL_VERSION "\(.*\)"/\1/p' vil/version.h)
VIL_SOMAJOR := $(firstword $(subst ., ,$(VIL_VERSION)))
$(LIBVIL_SO): $(LIB_OBJ) $(VERSION_OBJ) $(OPTIONS_FILE)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libvil.so.$(VIL_SOMAJOR) -Wl,--no-undefined $(LDFLAGS) \
	    -o $@.$(VIL_VERSION) $(LIB_OBJ) $(VERSION_OBJ) $(LDLIBS)
	ln -sf libvil.so.$(VIL_VERSION) $@.$(VIL_SOMAJOR)
	ln -sf libvil.so.$(VIL_SOMAJOR) $@
# the static library a user links: libvil.a and version.o (the build's own libvil.a leaves it out,
# so that a new commit relinks bin/vil alone, not every test)
$(BUILD)/lib/libvil.a: $(LIB_OBJ) $(VERSION_OBJ)
	@mkdir -p $(dir $@)
	@rm -f $@
	ar rcs $@ $^

# ---- make install PREFIX=/usr/local DESTDIR=: the header, both libraries (and the CUDA module
# when built), vil.pc (written for PREFIX as it installs) and bin/vil; make uninstall removes
# exactly those ----
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR ?= $(PREFIX)/bin
PC_PRIVATE := $(filter-out -fopenmp,$(LDLIBS))
INSTALL_FILES := $(INCLUDEDIR)/vil.h $(LIBDIR)/libvil.so.$(VIL_VERSION) $(LIBDIR)/libvil.so.$(VIL_SOMAJOR) \
                 $(LIBDIR)/libvil.so $(LIBDIR)/libvil.a $(LIBDIR)/pkgconfig/vil.pc $(BINDIR)/vil
.PHONY: install uninstall
install: bin/vil $(LIBVIL_SO) $(BUILD)/lib/libvil.a vil.pc.in $(CUDA_MODULE)
	install -d $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(BINDIR)
	install -m 644 include/vil.h $(DESTDIR)$(INCLUDEDIR)/vil.h
	install -m 755 $(LIBVIL_SO).$(VIL_VERSION) $(DESTDIR)$(LIBDIR)/
	ln -sf libvil.so.$(VIL_VERSION) $(DESTDIR)$(LIBDIR)/libvil.so.$(VIL_SOMAJOR)
	ln -sf libvil.so.$(VIL_SOMAJOR) $(DESTDIR)$(LIBDIR)/libvil.so
	install -m 644 $(BUILD)/lib/libvil.a $(DESTDIR)$(LIBDIR)/libvil.a
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(VIL_VERSION)|' -e 's|@LIBS_PRIVATE@|-fopenmp $(PC_PRIVATE)|' vil.pc.in \
	    > $(DESTDIR)$(LIBDIR)/pkgconfig/vil.pc
	install -m 755 bin/vil $(DESTDIR)$(BINDIR)/vil
ifeq ($(CUDA),1)
	install -m 755 $(CUDA_MODULE) $(DESTDIR)$(LIBDIR)/libvil-cuda.so
endif
uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALL_FILES) $(LIBDIR)/libvil-cuda.so)

CLI_SRC := $(wildcard cli/*.c)
CLI_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(CLI_SRC)) $(VERSION_OBJ)
bin/vil: $(CLI_OBJ) $(BUILD)/libvil.a $(OPTIONS_FILE)
	@mkdir -p bin
	$(CC) $(LDFLAGS) -o $@ $(filter-out $(OPTIONS_FILE),$^) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(wildcard tests/*.h) $(BUILD)/libvil.a $(OPTIONS_FILE)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(TEST_EXTRA_$*) $(BUILD)/libvil.a $(LDLIBS)
# the API's tests reach vil_version_text (version.o: bin/vil's and libvil.so's, not libvil.a's)
TEST_EXTRA_test_api := $(VERSION_OBJ)
# gpu_api is a CUDA program of a user's: cudart of its own (the core links none)
TEST_EXTRA_gpu_api := $(VERSION_OBJ) $(CUDA_LDFLAGS) -lcudart
$(BUILD)/tests/gpu_api: CFLAGS += -I$(CUDA_INC)
$(BUILD)/tests/gpu_api: $(VERSION_OBJ)
$(BUILD)/tests/test_api: $(VERSION_OBJ)

$(BUILD)/tools/%: tools/%.c $(BUILD)/libvil.a $(OPTIONS_FILE)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(TEST_EXTRA_$*) $(BUILD)/libvil.a $(LDLIBS)
TEST_EXTRA_bench_api := $(VERSION_OBJ)
$(BUILD)/tools/bench_api: $(VERSION_OBJ)

# the packages first (a fresh machine has none of them), then the build, then every test
test:
	@sh tools/deps.sh test
	@$(MAKE) --no-print-directory test-run

test-run: bin/vil $(CUDA_MODULE) $(TEST_BIN) $(BUILD)/tools/ref_dump $(BUILD)/tools/idx_to_folder $(BUILD)/tools/length_sets $(BUILD)/tools/folder_to_shards $(BUILD)/tools/scan_dump $(LIBVIL_SO) $(BUILD)/lib/libvil.a
	@VIL_BUILD=$(BUILD) sh tests/run_all.sh $(TEST_BIN) tests/test_torch_reference.sh tests/test_python.sh tests/test_pth_reference.sh \
	    tests/test_length_report.py

test-gpu: bin/vil $(CUDA_MODULE) $(GPU_TEST_BIN) $(LIBVIL_SO)
	@VIL_BUILD=$(BUILD) sh tests/run_all.sh $(GPU_TEST_BIN) tests/gpu_python.sh

# Slurm and munge first, then the README's sbatch script on a one-node cluster that the test
# starts and stops (tools/slurm_local.sh, tests/slurm_train.c)
.PHONY: test-slurm
test-slurm: bin/vil $(BUILD)/tests/slurm_train
	@sh tools/deps.sh slurm
	@sh tests/run_all.sh $(BUILD)/tests/slurm_train

# vil of a build in another folder (BUILD=build/asan, build/cpu), leaving bin/vil as it is
ifneq ($(BUILD),build)
$(BUILD)/bin/vil: $(CLI_OBJ) $(BUILD)/libvil.a $(OPTIONS_FILE)
	@mkdir -p $(dir $@)
	$(CC) $(OPT) $(LDFLAGS) -o $@ $(filter-out $(OPTIONS_FILE),$^) $(LDLIBS)
endif

# The CPU library, vil (as build/asan/bin/vil: bin/vil stays as it is), every test, ref_dump and
# idx_to_folder built with AddressSanitizer + UBSan in build/asan by a recursive make, then the suite run
# against them (the tests run $VIL_BIN where they say bin/vil). A report also fails the target
# when it came from a vil run whose stderr a test discards: ASan and LeakSanitizer (and UBSan
# under clang; gcc's prints to stderr only) log to build/asan/reports/, and every sanitizer
# exits 99, a status no test expects. allocator_may_return_null: an allocation the sanitizer's
# allocator cannot make returns NULL, as malloc does, so the try allocators' failures (vil/common.h)
# are tested as they run (it would stop the process instead); a size past its 1 TiB maximum then
# logs "WARNING: AddressSanitizer failed to allocate", which the tests ask for on purpose: a
# report of nothing else is no finding.
ASAN_OPT := -O1 -g -fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer -fno-sanitize-recover=undefined,float-cast-overflow
.PHONY: test-asan
ifneq ($(ASAN_BUILD),1)
test-asan:
	@$(MAKE) --no-print-directory BUILD=build/asan CUDA=0 OPT="$(ASAN_OPT)" ASAN_BUILD=1 test-asan
else
test-asan: $(BUILD)/bin/vil $(TEST_BIN) $(BUILD)/tools/ref_dump $(BUILD)/tools/idx_to_folder $(BUILD)/tools/length_sets $(BUILD)/tools/folder_to_shards $(BUILD)/tools/scan_dump
	@rm -rf $(BUILD)/reports && mkdir -p $(BUILD)/reports
	@VIL_BIN=$(BUILD)/bin/vil VIL_BUILD=$(BUILD) \
	    ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:exitcode=99:log_path=$(CURDIR)/$(BUILD)/reports/asan \
	    LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=99:log_path=$(CURDIR)/$(BUILD)/reports/ubsan \
	    sh tests/run_all.sh $(TEST_BIN) tests/test_torch_reference.sh tests/test_pth_reference.sh; \
	rc=$$?; for f in $(BUILD)/reports/*; do \
	    [ -f "$$f" ] && ! grep -qv 'WARNING: AddressSanitizer failed to allocate' "$$f" && rm -f "$$f"; done; \
	if [ -n "$$(ls $(BUILD)/reports)" ]; then cat $(BUILD)/reports/*; \
	    echo "test-asan: sanitizer reports above (in $(BUILD)/reports)"; exit 1; fi; exit $$rc
endif

fuzz:
	$(MAKE) -f tests/fuzz.mk

# CUDA kernel sandbox (dev/cuda/README.md), not part of `make`: a harness per kernel under study
# (dev/cuda/*.cu: versions validated against the live CPU reference, then timed) and the
# whole-block timing tool bench_ops.c, built against this tree's library. A harness links
# cuda/'s objects itself (its kernels use the backend's context) without the shims, so they
# reach libvil.a's functions, and hands their table to the loader (harness.h)
ifeq ($(CUDA),1)
DEV_CUDA_BIN := $(patsubst dev/cuda/%,$(BUILD)/dev/cuda/%,$(basename $(wildcard dev/cuda/*.c dev/cuda/*.cu)))
dev-cuda: $(DEV_CUDA_BIN)
$(BUILD)/dev/cuda/%: dev/cuda/%.c dev/cuda/harness.h $(HDR) $(BUILD)/libvil.a $(CU_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) $(CUDA_LDFLAGS) -o $@ $< $(CU_OBJ) $(BUILD)/libvil.a $(LDLIBS) $(CUDA_LDLIBS)
$(BUILD)/dev/cuda/%: dev/cuda/%.cu dev/cuda/harness.h $(HDR) $(BUILD)/libvil.a $(CU_OBJ)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@.o
	$(CC) $(LDFLAGS) $(CUDA_LDFLAGS) -o $@ $@.o $(CU_OBJ) $(BUILD)/libvil.a $(LDLIBS) $(CUDA_LDLIBS)
else
dev-cuda:
	@echo "make dev-cuda: the CUDA kernel sandbox needs a CUDA build (nvcc not found, or CUDA=0): install the CUDA toolkit or set CUDA_HOME" >&2; exit 1
endif

deps:
	@sh tools/deps.sh

# the build comes after deps (it needs the packages), hence the recursive make. The demo trains
# on the CPU: where nvcc is found but no GPU is visible, it builds a CPU-only vil in build/cpu
# (bin/vil stays as it is; `make` builds it with CUDA): ~30 s on 2 cores, where compiling the
# CUDA kernels for every GPU family takes ~5 minutes there
demo:
	@sh tools/deps.sh demo
	@if [ "$(CUDA)" = 1 ] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then \
	    echo "demo: no GPU visible: a CPU-only build in build/cpu (make builds bin/vil with CUDA)"; \
	    $(MAKE) --no-print-directory BUILD=build/cpu CUDA=0 build/cpu/bin/vil build/cpu/tools/export_png && \
	    VIL=build/cpu/bin/vil EXPORT_PNG=build/cpu/tools/export_png sh tools/demo.sh; \
	else \
	    $(MAKE) --no-print-directory bin/vil $(BUILD)/tools/export_png && sh tools/demo.sh; \
	fi

clean:
	rm -rf $(BUILD) bin
