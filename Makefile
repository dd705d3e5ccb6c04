# tokroute — top-level entry points. `make` builds into build/ (CLI: build/tokroute); `make demo` runs the main
# job; `make test` runs the suite, then runs it again built with ASan+UBSan, then the server's suites under TSan.
# Each target installs missing Debian packages first (when run as root), so both work on a fresh machine: the build
# and the demo only what they build with (no cmocka, no npm), the test targets the test tools too. The other targets
# configure TR_TESTS=AUTO (tests only when cmocka is found), so they build with only `scripts/deps.sh build`'s
# packages whatever an earlier `make test` left in the cache; test targets configure TR_TESTS=ON (cmocka required: a
# cache left OFF, or a machine without cmocka, would otherwise run nothing) and ctest fails when no test was found.
# With cmocka present AUTO and ON configure the same build, so switching between them rebuilds nothing.
BUILD      ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
SHARED     ?= $(abspath ../shared)
PREFIX     ?= /usr/local
MAKEFLAGS  += --no-print-directory

.PHONY: all deps deps-test build cli demo eval test test-fast test-asan test-tsan clean llamacpp install uninstall python \
	check-portable wasm web

all: build

deps:
	@./scripts/deps.sh build

deps-test:
	@./scripts/deps.sh test

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTR_TESTS=AUTO >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

# The demo needs only the library and the CLI.
cli: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTR_TESTS=AUTO >/dev/null
	@cmake --build $(BUILD) -j$(JOBS) --target tokroute

demo: cli
	@./scripts/demo.sh $(BUILD)/tokroute $(SHARED)

# Issue 8's report: collect on stories 0-799, train and calibrate a router, evaluate on 800-999 (out/eval).
eval: cli
	@./scripts/eval.sh $(BUILD)/tokroute $(SHARED)

# The Python package (python/, README "Python"): libtokroute.so built, then a venv in .venv with Debian's NumPy and
# PyTorch (system site packages) and the package installed from the checkout, offline and editable.
VENV ?= .venv
python:
	@./scripts/deps.sh python
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j$(JOBS) --target tokroute tokroute_shared
	@[ -x $(VENV)/bin/python ] || /usr/bin/python3 -m venv --system-site-packages $(VENV)
	@$(VENV)/bin/pip install --quiet --no-index --no-build-isolation --no-deps -e python/
	@echo "tokroute: $(VENV)/bin/python -c 'import tokroute' works now"

# The remote-backend tests run a real llama.cpp server: build it once per machine (cached in ~/.cache/tokroute).
llamacpp:
	@./scripts/llamacpp.sh llama-server llama-quantize >/dev/null

test-fast: deps-test llamacpp
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTR_WERROR=ON -DTR_TESTS=ON >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)
	@cd $(BUILD) && ctest --output-on-failure --no-tests=error -j$(JOBS)

test-asan: deps-test llamacpp
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTR_SANITIZE=ON -DTR_WERROR=ON -DTR_TESTS=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS)
	@cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure \
		--no-tests=error -j$(JOBS)

# The server's suites (its threads: event loop, workers, scheduler, deadline sweep) under ThreadSanitizer.
test-tsan: deps-test llamacpp
	@cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTR_TSAN=ON -DTR_WERROR=ON -DTR_TESTS=ON >/dev/null
	@cmake --build $(TSAN_BUILD) -j$(JOBS) --target $$(cd $(TSAN_BUILD) && ctest -N -R '^test_server_' | \
		sed -n 's/^ *Test *#[0-9]*: //p')
	@cd $(TSAN_BUILD) && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure --no-tests=error -j$(JOBS) \
		-R '^test_server_'

test: test-fast test-asan test-tsan

# The device core (gguf, kernels, model, tokenizer, router, route, transport, common) compiled with gcc, clang,
# musl-gcc and emscripten, warnings as errors (scripts/check-portable.sh, run in CI by .ci/run; installs its
# compilers when run as root).
check-portable:
	@./scripts/check-portable.sh

# The browser as the device (docs/web.md): `make wasm` builds the static bundle build-wasm/web (the device core in
# WebAssembly, two variants: threads when cross-origin isolated, one thread otherwise; installs emscripten and
# builds PCRE2/cJSON for wasm32 once, cached in ~/.cache/tokroute); `make web` serves it on 127.0.0.1:$(WEB_PORT)
# with the COOP/COEP headers threads need (WEB_MODELS=DIR also serves DIR's GGUF files under /models/).
WEB_PORT   ?= 8000
WEB_MODELS ?=
wasm:
	@./scripts/wasm.sh

web: wasm
	@node scripts/serve-web.mjs --dir build-wasm/web --port $(WEB_PORT) $(if $(WEB_MODELS),--models $(WEB_MODELS))

# The CLI, libtokroute (.so and .a), the headers, tokroute.pc and the CMake package under PREFIX (DESTDIR=DIR stages
# it); builds only what is installed. `make uninstall` removes exactly the files $(BUILD)/install_manifest.txt lists
# (under the same DESTDIR).
install: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTR_TESTS=AUTO >/dev/null
	@cmake --build $(BUILD) -j$(JOBS) --target tokroute tokroute_lib tokroute_shared
	@DESTDIR=$(DESTDIR) cmake --install $(BUILD) --prefix $(abspath $(PREFIX))

uninstall:
	@DESTDIR=$(DESTDIR) cmake -DMANIFEST=$(abspath $(BUILD))/install_manifest.txt -P cmake/uninstall.cmake

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) build-wasm
