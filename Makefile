# dlpack for Lua 5.1 to 5.5 and LuaJIT. `make demo`, `make test`; see README.md.
# `make LUA=lua5.1` (lua5.2, lua5.3, lua5.5, luajit) builds for that Lua into build/<LUA>/; the
# default, Lua 5.4, builds into build/. A Lua given by its path (LUA=/opt/lua/bin/lua5.5) has its
# headers in the include/ folder beside its bin/ (as stage 19 builds Lua 5.5 into build/lua5.5/).

LUA        ?= lua5.4
# Parallel by default: as many jobs as the machine has cores; a -j on the command line wins (make -j1
# for a serial build). Only the top-level make adds it: GNU make 4.3 does not show a command line's
# -j in MAKEFLAGS while it reads the makefile, and a make run by a recipe marked + or $(MAKE)
# shares its parent's jobs. Each step prints one line ("CC src/core/tensor.c"); V=1 prints the
# commands instead, make -s neither.
ifeq ($(MAKELEVEL),0)
MAKEFLAGS  += -j$(shell nproc 2>/dev/null || echo 2)
endif
ifeq ($(V),1)
Q           =
say         = @true
else
Q           = @
say         = $(if $(findstring s,$(firstword -$(MAKEFLAGS))),@true,@printf '  %-4s %s\n')
endif
LUA_NAME    = $(notdir $(LUA))
# The pkg-config name, include folder and module version of each Lua.
LUA_PC      = $(if $(filter luajit,$(LUA_NAME)),luajit,$(LUA_NAME))
LUA_VERSION = $(if $(filter luajit,$(LUA_NAME)),5.1,$(patsubst lua%,%,$(LUA_NAME)))
LUA_INCDIR  = $(if $(filter luajit,$(LUA_NAME)),/usr/include/luajit-2.1,/usr/include/$(LUA_NAME))
LUA_INC    ?= $(if $(findstring /,$(LUA)),-I$(abspath $(dir $(LUA))../include),\
                $(shell pkg-config --cflags $(LUA_PC) 2>/dev/null || echo -I$(LUA_INCDIR)))
LUA_LIB    ?= $(shell pkg-config --libs $(LUA_PC) 2>/dev/null || echo -l$(LUA_PC))
# lua-compat-5.3's header (src/compat.h) for 5.1, 5.2 and LuaJIT, searched after the Lua headers.
COMPAT53_INC = $(if $(filter 5.1 5.2,$(LUA_VERSION)),-idirafter /usr/include/lua$(LUA_VERSION))
PYTHON     ?= /usr/bin/python3
CC         ?= cc
CFLAGS     ?= -O2 -g
# LPeg's stricter set, less -Wcast-qual and -Wbad-function-cast: tried, they flag only deliberate
# casts (the read-only dlpack.api table published as light userdata, CUDA device pointers as
# integers), nothing to fix.
WARNINGS    = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wpointer-arith -Wvla \
              -Wundef -Wwrite-strings -Wredundant-decls -Wnested-externs -Wmissing-declarations -Wcast-align
# A system <dlpack/dlpack.h> is used only when it is version 1.x (Debian's 0.6 is too old).
SYSTEM_DLPACK := $(shell printf '\043include <dlpack/dlpack.h>\n\043if DLPACK_MAJOR_VERSION != 1\n\043error old\n\043endif\n' \
                   | $(CC) -x c -E - >/dev/null 2>&1 && echo -DDLPACK_LUA_SYSTEM_HEADER)
# The CUDA toolkit's headers are used when present; the driver is always found at run time.
CUDA_HOME  ?= /usr/local/cuda
CUDA_FLAGS := $(shell test -f $(CUDA_HOME)/include/cuda.h && echo -DDLPACK_LUA_HAVE_CUDA_H -I$(CUDA_HOME)/include)
# Windows, cross-built with MinGW-w64 (README, "Windows"), is told by what the compiler targets:
#   make CC=x86_64-w64-mingw32-gcc LUA_INC=-I<Lua's headers> LUA_LIB=<lua54.dll or its import library>
# builds $(BUILD)/dlpack/core.dll and the static library. A DLL names the Lua DLL it links
# against (LUA_LIB); MinGW's own C99 printf keeps %zu and %lld; and the assembler writes
# unaligned vector moves, since GCC assumes 32-byte aligned stack slots for AVX values that the
# Windows x64 stack (16-byte aligned) does not give (GCC bug 54412).
WINDOWS    := $(if $(findstring mingw,$(shell $(CC) -dumpmachine)),1)
ifeq ($(WINDOWS),1)
SO          = dll
EXE         = .exe
AR         := $(patsubst %gcc,%ar,$(CC))
PLATFORM_CFLAGS = -D__USE_MINGW_ANSI_STDIO=1 -Wa,-muse-unaligned-vector-move
LDLIBS      = -lm
MODULE_LIBS = $(LUA_LIB) -static-libgcc
# The test-only modules (fabricate, fakecuda) and the example host use POSIX threads: MinGW-w64's winpthreads, linked
# statically so that they need no libwinpthread-1.dll (the module itself uses platform.h).
TEST_LIBS   = -Wl,-Bstatic -lwinpthread -Wl,-Bdynamic
else
SO          = so
EXE         =
PLATFORM_CFLAGS = -fPIC -fvisibility=hidden -pthread
LDLIBS      = -pthread -ldl -lm
MODULE_LIBS =
TEST_LIBS   =
endif
# cuBLAS is found at run time too (src/cuda/cublas.c); its header, when the toolkit has one, only
# checks the prototypes src/cuda/cublas.h declares (not in Windows builds).
CUDA_FLAGS += $(if $(WINDOWS),,$(shell test -f $(CUDA_HOME)/include/cublas_api.h && echo -DDLPACK_LUA_HAVE_CUBLAS_H))
ALL_CFLAGS  = -std=c11 -Isrc $(PLATFORM_CFLAGS) $(WARNINGS) $(LUA_INC) $(COMPAT53_INC) $(SYSTEM_DLPACK) $(CUDA_FLAGS) $(CFLAGS)

PREFIX     ?= /usr/local
INST_LIBDIR ?= $(PREFIX)/lib/lua/$(LUA_VERSION)
INST_LUADIR ?= $(PREFIX)/share/lua/$(LUA_VERSION)
INST_INCDIR ?= $(PREFIX)/include
INST_ARCDIR ?= $(PREFIX)/lib

BUILD      ?= $(if $(filter lua5.4,$(LUA_NAME)),build,build/$(LUA_NAME))
SOURCES     = $(wildcard src/*.c src/*/*.c)
OBJECTS     = $(SOURCES:src/%.c=$(BUILD)/obj/%.o)
HEADERS     = $(wildcard src/*.h src/*/*.h src/*/*/*.h)
MODULE      = $(BUILD)/dlpack/core.$(SO)
STATIC      = $(BUILD)/libdlpack_lua.a
FABRICATE   = $(BUILD)/fabricate.$(SO)
FAKECUDA    = $(BUILD)/fakecuda.$(SO)
FAKECUDA_OLD = $(BUILD)/old-driver/fakecuda.$(SO)
HOST        = $(BUILD)/host$(EXE)
HOST_CPP    = $(BUILD)/host-cpp
HOST_IPC    = $(BUILD)/host-ipc
HOST_THREADS = $(BUILD)/host-threads
HOST_HOSTILE = $(BUILD)/host-hostile
CXX        ?= c++
PEERS       = $(BUILD)/peers

export LUA_PATH  := $(CURDIR)/lua/?.lua;$(CURDIR)/lua/?/init.lua;$(CURDIR)/spec/?.lua;;
export LUA_CPATH := $(CURDIR)/$(BUILD)/?.so;;

.PHONY: ptx rock all test-build static test conformance demo install deps asan asan-build tsan-build valgrind lint bench clean gpu gpu-build \
        fuzz fuzz-replay

GEN_MODULE  = $(BUILD)/gen/dlpack/core.$(SO)

# `all`: what is installed, the module and the static library. `test-build` adds the test-only
# libraries the specs load (never installed): the fake CUDA driver, the module that fabricates
# foreign tensors, and the test build of the module (short capsule generations, small tasks).
all: $(MODULE) $(STATIC)

test-build: all $(FABRICATE) $(FAKECUDA) $(FAKECUDA_OLD) $(GEN_MODULE)

static: $(STATIC)

$(BUILD)/obj/%.o: src/%.c $(HEADERS)
	@mkdir -p $(@D)
	$(say) CC '$<'
	$(Q)$(CC) $(ALL_CFLAGS) -c $< -o $@

# The elementwise loops (src/compute/kernels.c) are plain indexed loops written for the vectoriser: -O3
# turns it on for them whatever CFLAGS says (GCC's -O2 vectorises only loops it need not version),
# -fno-math-errno lets sqrt and friends compile to instructions (errno is never read here), and
# -fno-trapping-math lets selects on floats vectorise (the floating-point exception flags are never
# read either); neither changes a result. -ffp-contract=off keeps a * b + c two roundings in
# functions built for processors with FMA (GCC's default in ISO C; Clang would fuse them), so that
# every build of a loop gives the same bits.
KERNEL_FLAGS = -O3 -fno-math-errno -fno-trapping-math -ffp-contract=off
$(BUILD)/obj/compute/kernels.o: ALL_CFLAGS += $(KERNEL_FLAGS)
# The sorting and scanning loops (radix passes, key conversions, the AVX-512 sort's networks,
# scans) likewise.
$(BUILD)/obj/compute/sort.o $(BUILD)/obj/compute/sort_avx512.o $(BUILD)/obj/compute/scan.o: ALL_CFLAGS += $(KERNEL_FLAGS)
# The file is the build's longest compile: it is compiled once per group of compute dtypes
# (kernels.c's DLP_KERNELS_GROUP), so that a parallel build compiles the groups at the same time.
# kernels.o holds bool and the integers (group 0), these the floats (1) and complex (2).
KERNEL_GROUPS = $(BUILD)/obj/compute/kernels_floats.o $(BUILD)/obj/compute/kernels_complex.o
# On x86-64 each group is compiled a second time for AVX2, and the floats (group 1) a third time
# for AVX-512 (F, DQ, BW, VL), chosen at run time (kernels.c). The integers, the build's longest
# compile, and complex run their AVX2 build on AVX-512 processors: wider vectors gain little on
# them, and GCC 12 fuses the complex loops' a * b - c * d into VFMSUBADD whatever -ffp-contract
# says, which would change their bits. -ffp-contract=off: a * b + c stays two roundings (Clang
# would fuse it), so that the AVX-512 loops give the other builds' bits but where kernels.c asks
# for a fused multiply-add itself.
ifneq ($(filter x86_64%,$(shell $(CC) -dumpmachine)),)
KERNEL_GROUPS += $(BUILD)/obj/compute/kernels_avx2.o $(BUILD)/obj/compute/kernels_floats_avx2.o \
                 $(BUILD)/obj/compute/kernels_complex_avx2.o $(BUILD)/obj/compute/kernels_floats_avx512.o
$(BUILD)/obj/compute/kernels.o: ALL_CFLAGS += -DDLP_HAVE_AVX2_KERNELS=1 -DDLP_HAVE_AVX512_KERNELS=1
$(filter %_avx2.o,$(KERNEL_GROUPS)): KERNEL_FLAGS += -mavx2 -DDLP_KERNELS_AVX2
$(filter %_avx512.o,$(KERNEL_GROUPS)): KERNEL_FLAGS += -mavx512f -mavx512dq -mavx512bw -mavx512vl -ffp-contract=off \
                                                      -DDLP_KERNELS_AVX512
endif
OBJECTS += $(KERNEL_GROUPS)
$(BUILD)/obj/compute/kernels_floats.o $(BUILD)/obj/compute/kernels_floats_avx2.o \
  $(BUILD)/obj/compute/kernels_floats_avx512.o: KERNEL_GROUP = 1
$(BUILD)/obj/compute/kernels_complex.o $(BUILD)/obj/compute/kernels_complex_avx2.o: KERNEL_GROUP = 2
$(KERNEL_GROUPS): src/compute/kernels.c $(HEADERS)
	@mkdir -p $(@D)
	$(say) CC '$< (group $(or $(KERNEL_GROUP),0)$(if $(findstring avx2,$@), AVX2)$(if $(findstring avx512,$@), AVX-512))'
	$(Q)$(CC) $(ALL_CFLAGS) $(KERNEL_FLAGS) -DDLP_KERNELS_GROUP=$(or $(KERNEL_GROUP),0) -c $< -o $@

# The CUDA kernels of the computing functions (src/compute/cuda/kernels.cu) as PTX, one file per
# family, kept in the repository so that the module builds without the CUDA toolkit; `make ptx`
# regenerates them with nvcc (and CI checks that they match their source). The module embeds them
# as strings, at their numbers (src/cuda/cuda_private.h's DLP_KERNEL_FAMILIES exceeds the largest).
KERNEL_FAMILIES = $(shell seq 0 35) 42 44 46
PTX_DIR     = src/compute/cuda/ptx
PTX_FILES   = $(KERNEL_FAMILIES:%=$(PTX_DIR)/family%.ptx)
PTX_ARCH    = compute_80
OBJECTS    += $(BUILD)/obj/kernel_ptx.o

ptx:
	@mkdir -p $(PTX_DIR)
	for f in $(KERNEL_FAMILIES); do \
	  $(NVCC) -ptx -arch=$(PTX_ARCH) -fmad=false -Werror all-warnings -DDLP_FAMILY=$$f -Isrc -o $(PTX_DIR)/family$$f.ptx src/compute/cuda/kernels.cu || exit 1; \
	done

$(BUILD)/gen/kernel_ptx.c: $(PTX_FILES)
	@mkdir -p $(@D)
	$(say) GEN '$@'
	$(Q){ echo '/* Generated by the Makefile from $(PTX_DIR)/: the PTX of each kernel family. */'; \
	  echo '#include "cuda/cuda_private.h"'; \
	  for f in $(KERNEL_FAMILIES); do \
	    echo "static const char family$$f[] ="; \
	    sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $(PTX_DIR)/family$$f.ptx; \
	    echo ';'; \
	  done; \
	  echo 'const char *const dlp_kernel_ptx[DLP_KERNEL_FAMILIES] = {'; \
	  for f in $(KERNEL_FAMILIES); do echo "  [$$f] = family$$f,"; done; \
	  echo '};'; } > $@

$(BUILD)/obj/kernel_ptx.o: $(BUILD)/gen/kernel_ptx.c $(HEADERS)
	@mkdir -p $(@D)
	$(say) CC '$<'
	$(Q)$(CC) $(ALL_CFLAGS) -c $< -o $@

$(MODULE): $(OBJECTS)
	@mkdir -p $(@D)
	$(say) LD '$@'
	$(Q)$(CC) -shared $(ALL_CFLAGS) -o $@ $(OBJECTS) $(MODULE_LIBS) $(LDLIBS)

$(STATIC): $(OBJECTS)
	@rm -f $@
	$(say) AR '$@'
	$(Q)$(AR) rcs $@ $(OBJECTS)

# Test-only: the module with 2-bit capsule generations, so that a spec reaches the end of a
# capsule slot's life in a few hundred capsules (spec/safety_spec.lua), with an AVX-512 sort
# whose depth limit stops it after one partition, so that a spec runs its heap sort
# (spec/sort_spec.lua), and with tasks of 256 elements (DLP_TASK_ELEMENTS), so that operations
# split on several threads at sizes a spec draws by the hundred (spec/parallel_spec.lua); never
# installed.
GEN_TASKS = -DDLPACK_LUA_TEST_TASK_ELEMENTS=256
GEN_SPLITTING = compute/reduce compute/elementwise compute/iter core/copy
$(BUILD)/gen/capsule.o: src/exchange/capsule.c $(HEADERS)
	@mkdir -p $(@D)
	$(say) CC '$< (test: 2-bit generations)'
	$(Q)$(CC) $(ALL_CFLAGS) -DDLPACK_LUA_TEST_GEN_BITS=2 -c $< -o $@

$(BUILD)/gen/sort_avx512.o: src/compute/sort_avx512.c $(HEADERS)
	@mkdir -p $(@D)
	$(say) CC '$< (test: heap sort after one partition, small tasks)'
	$(Q)$(CC) $(ALL_CFLAGS) $(KERNEL_FLAGS) -DDLPACK_LUA_TEST_SORT_DEPTH=1 $(GEN_TASKS) -c $< -o $@

$(GEN_SPLITTING:%=$(BUILD)/gen/%.o): $(BUILD)/gen/%.o: src/%.c $(HEADERS)
	@mkdir -p $(@D)
	$(say) CC '$< (test: small tasks)'
	$(Q)$(CC) $(ALL_CFLAGS) $(GEN_TASKS) -c $< -o $@

GEN_REPLACED = exchange/capsule compute/sort_avx512 $(GEN_SPLITTING)
$(GEN_MODULE): $(filter-out $(GEN_REPLACED:%=$(BUILD)/obj/%.o),$(OBJECTS)) \
               $(BUILD)/gen/capsule.o $(BUILD)/gen/sort_avx512.o $(GEN_SPLITTING:%=$(BUILD)/gen/%.o)
	@mkdir -p $(@D)
	$(say) LD '$@'
	$(Q)$(CC) -shared $(ALL_CFLAGS) -o $@ $^ $(MODULE_LIBS) $(LDLIBS)

# Test-only module that fabricates foreign managed tensors; never installed.
$(FABRICATE): spec/c/fabricate.c src/dlpack_lua.h src/dlpack_abi.h
	$(say) LD '$@ (test)'
	$(Q)$(CC) -shared $(ALL_CFLAGS) -o $@ $< $(MODULE_LIBS) $(TEST_LIBS) $(LDLIBS)

# Test-only fake CUDA driver (and Lua module `fakecuda`) for the CUDA specs without a GPU; never installed.
# It runs the module's CUDA kernels as C: src/compute/cuda/kernels.cu is compiled into it.
$(FAKECUDA): spec/c/fakecuda.c src/compute/cuda/kernels.cu $(HEADERS)
	$(say) LD '$@ (test: fake CUDA driver)'
	$(Q)$(CC) -shared $(ALL_CFLAGS) -o $@ spec/c/fakecuda.c -x c src/compute/cuda/kernels.cu -x none $(MODULE_LIBS) $(TEST_LIBS) $(LDLIBS)

# The same as an old driver's library, without the stream-ordered allocator's functions.
$(FAKECUDA_OLD): spec/c/fakecuda.c src/compute/cuda/kernels.cu $(HEADERS)
	@mkdir -p $(dir $@)
	$(say) LD '$@ (test: fake old driver)'
	$(Q)$(CC) -shared $(ALL_CFLAGS) -DFAKECUDA_NO_ASYNC -o $@ spec/c/fakecuda.c -x c src/compute/cuda/kernels.cu -x none \
	  $(MODULE_LIBS) $(TEST_LIBS) $(LDLIBS)

$(HOST): examples/host.c $(STATIC)
	$(say) LD '$@'
	$(Q)$(CC) $(ALL_CFLAGS) -fvisibility=default -o $@ $< $(STATIC) $(LUA_LIB) $(TEST_LIBS) $(LDLIBS)

$(HOST_IPC): examples/host_ipc.c $(STATIC)
	$(say) LD '$@'
	$(Q)$(CC) $(ALL_CFLAGS) -fvisibility=default -o $@ $< $(STATIC) $(LUA_LIB) $(LDLIBS)

# Test-only: a host that hands the module its own job system (dlpack_lua_set_parallel_for).
$(HOST_THREADS): spec/c/host_threads.c spec/c/tap.h $(STATIC)
	$(say) LD '$@ (test)'
	$(Q)$(CC) $(ALL_CFLAGS) -fvisibility=default -o $@ $< $(STATIC) $(LUA_LIB) $(LDLIBS)

# Test-only: the C API given NULLs, a state without the module, and its own exports edited.
$(HOST_HOSTILE): spec/c/host_hostile.c spec/c/tap.h $(STATIC)
	$(say) LD '$@ (test)'
	$(Q)$(CC) $(ALL_CFLAGS) -fvisibility=default -o $@ $< $(STATIC) $(LUA_LIB) $(LDLIBS)

# The same C API from C++ (examples/host.cpp): dlpack_lua.h gives Lua's functions C linkage.
$(HOST_CPP): examples/host.cpp $(STATIC)
	$(CXX) -std=c++17 -O2 -g -Wall -Wextra -Werror $(LUA_INC) -Isrc -pthread -o $@ $< $(STATIC) $(LUA_LIB) $(LDLIBS)

# Python.h redeclares some functions and its keyword lists are char *: its two warnings are off there.
PY_CFLAGS = $(shell $(PYTHON)-config --cflags 2>/dev/null | sed 's/-Werror[^ ]*//g')
PY_LIBS   = $(shell $(PYTHON)-config --embed --ldflags 2>/dev/null)
$(PEERS): spec/peers/peers.c $(STATIC)
	$(CC) $(ALL_CFLAGS) $(PY_CFLAGS) -Wno-missing-prototypes -Wno-redundant-decls -Wno-write-strings -o $@ $< $(STATIC) $(LUA_LIB) $(PY_LIBS) $(LDLIBS)

# The GPU suite's pieces (spec/gpu, docs/gpu.md): built here where they can be, run on a GPU machine.
NVCC       ?= $(CUDA_HOME)/bin/nvcc
NVCC_ARCH  ?= sm_90
GPU_KERNELS = $(BUILD)/gpu/gpu_kernels.so
LUAPEER     = $(BUILD)/gpu/libluapeer.so
BENCH_CUDA  = $(BUILD)/bench_cuda

$(GPU_KERNELS): spec/gpu/kernels.cu
	@mkdir -p $(@D)
	$(NVCC) -shared -Xcompiler -fPIC -arch=$(NVCC_ARCH) $(LUA_INC) -Isrc -o $@ $<

$(LUAPEER): spec/gpu/luapeer.c $(STATIC)
	@mkdir -p $(@D)
	$(CC) -shared $(ALL_CFLAGS) -Wno-missing-prototypes -Wno-missing-declarations -o $@ $< $(STATIC) $(LUA_LIB) $(LDLIBS)

# The C loops `make bench` compares the module with (bench/baselines.c), with the module's flags.
BENCH_BASE  = $(BUILD)/bench/baselines.so
$(BENCH_BASE): bench/baselines.c src/dlpack_lua.h src/dlpack_abi.h
	@mkdir -p $(@D)
	$(CC) -shared $(ALL_CFLAGS) -o $@ $< $(LDLIBS)

$(BENCH_CUDA): bench/cuda.c $(STATIC)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(STATIC) $(LUA_LIB) $(LDLIBS)

gpu-build: test-build $(LUAPEER) $(BENCH_CUDA) $(if $(wildcard $(NVCC)),$(GPU_KERNELS))

gpu:
	+bash spec/gpu/prepare.sh run

deps:
	@bash .ci/deps

# The dependencies first, then the build: prerequisites would run at the same time. A recipe that
# runs make, directly or through the stage scripts, is marked + so that it shares this make's jobs.
demo:
	@bash .ci/deps demo
	+@$(MAKE) --no-print-directory all
	$(LUA) examples/demo.lua

test: deps
	+@$(MAKE) --no-print-directory test-build
	+@bash spec/run.sh

# The API contract's conformance suite lives outside the repository (stage 20 uses the same path).
DLPACK_CONFORMANCE ?= ../shared/conformance/run.lua
conformance: all
	@$(LUA) $(DLPACK_CONFORMANCE)

lint:
	luacheck lua spec examples bench

install: $(MODULE) $(STATIC)
	install -d $(DESTDIR)$(INST_LIBDIR)/dlpack $(DESTDIR)$(INST_LUADIR)/dlpack $(DESTDIR)$(INST_INCDIR) $(DESTDIR)$(INST_ARCDIR)
	install -m 755 $(MODULE) $(DESTDIR)$(INST_LIBDIR)/dlpack/core.$(SO)
	install -m 644 lua/dlpack.lua $(DESTDIR)$(INST_LUADIR)/dlpack.lua
	install -m 644 lua/dlpack/unsafe.lua lua/dlpack/ipc.lua lua/dlpack/entry.lua lua/dlpack/ffi.lua $(DESTDIR)$(INST_LUADIR)/dlpack/
	install -m 644 src/dlpack_lua.h src/dlpack_abi.h $(DESTDIR)$(INST_INCDIR)/
	install -m 644 $(STATIC) $(DESTDIR)$(INST_ARCDIR)/
	install -d $(DESTDIR)$(INST_ARCDIR)/pkgconfig
	install -m 644 $(PC_FILE) $(DESTDIR)$(INST_ARCDIR)/pkgconfig/dlpack-lua.pc

# pkg-config file for hosts that link the static library:
#   cc host.c $(pkg-config --cflags --libs dlpack-lua)
# It requires Lua's own .pc when the build machine has one (Debian: lua5.4).
VERSION    := $(shell sed -n 's/^\#define DLPACK_LUA_VERSION "\(.*\)"/\1/p' src/dlpack_lua.h)
LUA_PC     ?= $(shell for p in lua5.4 lua-5.4 lua54; do pkg-config --exists $$p 2>/dev/null && echo $$p && break; done)
PC_FILE     = $(BUILD)/dlpack-lua.pc
# Paths relative to the .pc file (${pcfiledir}) where GNU realpath can say so, so that a binary
# rock installed into another tree stays right; absolute otherwise.
$(PC_FILE): src/dlpack_lua.h Makefile FORCE   # always: it holds PREFIX and the INST_*DIRs
	@mkdir -p $(@D)
	inc=$$(realpath -m --relative-to='$(INST_ARCDIR)/pkgconfig' '$(INST_INCDIR)' 2>/dev/null) \
	  && inc='$${pcfiledir}/'"$$inc" || inc='$(INST_INCDIR)'; \
	lib=$$(realpath -m --relative-to='$(INST_ARCDIR)/pkgconfig' '$(INST_ARCDIR)' 2>/dev/null) \
	  && lib='$${pcfiledir}/'"$$lib" || lib='$(INST_ARCDIR)'; \
	printf '%s\n' "includedir=$$inc" "libdir=$$lib" '' 'Name: dlpack-lua' \
	  'Description: DLPack tensors for Lua, the C API for hosts (static library)' \
	  'URL: https://github.com/dlpack-lua/dlpack-lua' 'Version: $(VERSION)' \
	  $(if $(LUA_PC),'Requires: $(LUA_PC)') 'Cflags: -I$${includedir}' \
	  'Libs: -L$${libdir} -ldlpack_lua -ldl -lm -pthread' >$@
install: $(PC_FILE)
FORCE:

# A source rock of the working tree (tracked files as they are now), installable offline:
#   make rock && luarocks --lua-version 5.4 install build/dist/dlpack-scm-1.src.rock
# The tarball and a copy of the rockspec whose source.url points at it are packed together.
ROCK_NAME   = dlpack-scm-1
DIST        = $(BUILD)/dist
rock:
	@command -v luarocks >/dev/null || { echo "make rock: luarocks not found (install luarocks)" >&2; exit 1; }
	rm -rf $(DIST) && mkdir -p $(DIST)/$(ROCK_NAME)
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then git ls-files -z; \
	else find . \( -path ./build -o -path ./.git \) -prune -o -type f -print0; fi \
	  | tar --null -T - -cf - | tar -xf - -C $(DIST)/$(ROCK_NAME)
	tar -czf $(DIST)/$(ROCK_NAME).tar.gz -C $(DIST) $(ROCK_NAME)
	sed 's|^  url = .*|  url = "file://$(abspath $(DIST))/$(ROCK_NAME).tar.gz",|' \
	  rockspec/$(ROCK_NAME).rockspec >$(DIST)/$(ROCK_NAME).rockspec
	cd $(DIST) && luarocks --lua-version 5.4 pack $(ROCK_NAME).rockspec
	rm -rf $(DIST)/$(ROCK_NAME)
	@echo "make rock: $(DIST)/$(ROCK_NAME).src.rock"

# The module and test module built with AddressSanitizer and UBSan, in their own build folder.
asan-build:
	$(MAKE) BUILD=build/asan CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all" test-build

# The module and test modules built with ThreadSanitizer, for the threads specs (stage 52).
tsan-build:
	$(MAKE) BUILD=build/tsan CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=thread" test-build

# The specs under AddressSanitizer+UBSan, and under valgrind memcheck (each a stage of `make test`).
asan: deps
	+@bash spec/run.sh 50

valgrind: deps
	+@$(MAKE) --no-print-directory test-build
	+@bash spec/run.sh 60

# The fuzzer (spec/fuzz/README.md) under the ASan+UBSan build, any report fatal: the CPU half
# (the safe API), the fake-CUDA half and the dlpack.ipc half, each for a third of SECONDS:
#   make fuzz SECONDS=600 [SEED=1] [STEPS=400] [CORPUS=30] [WITHOUT=raw,...] [CUDA_STEPS=300] [IPC_STEPS=200]
#   make fuzz-replay SEED=S [STEPS=400]    one CPU seed, every call printed before it runs
#   make fuzz-replay CUDA=1 SEED=S         one fake-CUDA seed, likewise
#   make fuzz-replay IPC=1 SEED=S          one dlpack.ipc seed, likewise
SECONDS ?= 60
SEED    ?= 1
STEPS   ?= 400
CORPUS  ?= 30
CUDA_STEPS ?= 300
IPC_STEPS ?= 200
FUZZ_WITHOUT = $(if $(WITHOUT),--without $(WITHOUT))
fuzz:
	+@rc=0; \
	bash spec/fuzz/asan.sh --seed $(SEED) --seconds $$(( ($(SECONDS) + 2) / 3 )) --steps $(STEPS) --corpus $(CORPUS) \
	  $(FUZZ_WITHOUT) || rc=$$?; \
	FUZZ_NO_BUILD=1 bash spec/fuzz/asan.sh --cuda --seed $(SEED) --seconds $$(( ($(SECONDS) + 1) / 3 )) \
	  --steps $(CUDA_STEPS) || rc=$$?; \
	FUZZ_NO_BUILD=1 bash spec/fuzz/asan.sh --ipc --seed $(SEED) --seconds $$(( $(SECONDS) / 3 )) \
	  --steps $(IPC_STEPS) || rc=$$?; \
	exit $$rc

fuzz-replay:
ifneq ($(IPC),)
	+@bash spec/fuzz/asan.sh --ipc --seed $(SEED) --seeds 1 --steps $(IPC_STEPS) --verbose
else ifneq ($(CUDA),)
	+@bash spec/fuzz/asan.sh --cuda --seed $(SEED) --seeds 1 --steps $(CUDA_STEPS) --verbose
else
	+@bash spec/fuzz/asan.sh --seed $(SEED) --seeds 1 --steps $(STEPS) --corpus $(CORPUS) --verbose $(FUZZ_WITHOUT)
endif

# The CUDA bench embeds Lua 5.4; under other Luas (make bench LUA=luajit) it is left out.
bench: all $(BENCH_BASE) $(if $(filter lua5.4,$(LUA_NAME)),$(BENCH_CUDA))
	$(LUA) bench/run.lua

clean:
	rm -rf $(BUILD)

# What a script of one's own needs to find the module built here (make LUA=... env for another Lua):
#   eval "$(make -s env)"; lua5.4 my.lua
env:
	@printf "export LUA_PATH='%s'\nexport LUA_CPATH='%s'\n" \
	  '$(CURDIR)/lua/?.lua;$(CURDIR)/lua/?/init.lua;;' '$(CURDIR)/$(BUILD)/?.$(SO);;'
.PHONY: env
