# Umbra. Every target installs what it needs first (a fresh machine has only Node and npm).
SHELL := /bin/bash
BUN := node_modules/.bin/bun
STAMP := node_modules/.umbra-installed
# No .env or bunfig.toml from the working directory: configuration comes from flags and UMBRA_* only.
BUILD_FLAGS := --compile --minify --bytecode --format=esm --sourcemap=none --no-compile-autoload-dotenv --no-compile-autoload-bunfig

.PHONY: console-assets dev test check typecheck lint format build bench soak migrations clean deps image firmware image-smoke image-reproducible

deps: $(STAMP)

# npm ci brings the pinned Bun (devDependency) and installs exactly package-lock.json, which it never
# rewrites: the tree stays clean. package-lock.json lists every platform's optional packages (npm
# install can drop them, npm/cli#9846; .ci/run checks npm ci accepts the lockfile) and its packages all
# run on the Node that package.json's engines names (test/unit/packaging). If npm ci refuses the
# lockfile, stop: the fix is a reviewed, committed lockfile, not a silent npm install here. If Bun's postinstall was skipped, its binary is a stub: repair it once here rather
# than fail later with a confusing error.
$(STAMP): package.json package-lock.json
	@npm ci --no-audit --no-fund || { \
	  echo "npm ci refused package-lock.json (above). Run npm install, review and commit package-lock.json." >&2; \
	  exit 1; }
	@$(BUN) --version >/dev/null 2>&1 || node node_modules/bun/install.js
	@$(BUN) --version >/dev/null
	@touch $@

# The console's browser app (console/build.ts): bundled into console/dist, which the coordinator embeds.
console-assets: deps
	$(BUN) console/build.ts

dev: deps console-assets
	$(BUN) src/coordinator/main.ts dev

# No runtime transpiler cache for the runner: its mmapped entries are shared (by content) with every other
# Bun process on the machine, and one rewritten under it crashed a run with SIGBUS (oven-sh/bun#37324).
# Two runs, both always: every file but the reliability suite in two worker processes (most tests wait on
# sockets, timers and child processes), then the reliability suite alone in one process (its cases time
# idle timeouts and deadlines, and its summary line covers the whole suite). Exit 1 if either failed.
TEST_RUN := BUN_RUNTIME_TRANSPILER_CACHE_PATH=0 $(BUN) test --timeout 30000
test: deps console-assets
	@status=0; \
	$(TEST_RUN) --parallel=2 --path-ignore-patterns='test/reliability/**' || status=1; \
	$(TEST_RUN) test/reliability || status=1; \
	exit $$status

typecheck: deps
	node_modules/.bin/tsc -p .
	node_modules/.bin/tsc -p console

lint: deps
	node_modules/.bin/biome check .

format: deps
	node_modules/.bin/biome check --write .

check: typecheck lint test

build: deps console-assets
	$(BUN) build $(BUILD_FLAGS) src/coordinator/main.ts src/store/sqlite/checkpoint-worker.ts --outfile dist/umbra-coordinator
	$(BUN) build $(BUILD_FLAGS) src/provider/main.ts --outfile dist/umbra-provider
	$(BUN) build $(BUILD_FLAGS) --target=bun-darwin-arm64 src/provider/main.ts --outfile dist/umbra-provider-darwin-arm64
	@cd dist && sha256sum umbra-coordinator umbra-provider umbra-provider-darwin-arm64

migrations: deps
	node_modules/.bin/drizzle-kit generate
	node_modules/.bin/drizzle-kit generate --config=drizzle.pg.config.ts


# The coordinator's confidential-VM image (image/README.md): kernel + one initramfs + command line from
# inputs pinned in image/inputs.lock, in dist/image. The scripts install the Debian packages they need
# when missing (apt-get). `make firmware` builds the AmdSev OVMF (about 5 minutes, cached outside the
# repository by source hash); `make image` takes it from that cache and then computes measurements.json.
image: build
	image/build/image.sh dist/image

firmware:
	image/build/ovmf.sh dist/image/OVMF.fd

# Boots dist/image under QEMU (TCG, stock firmware) and checks /healthz, /v1/attestation, the listening
# sockets and the console. Bounded by SMOKE_TIMEOUT (default 300 s).
image-smoke: image
	image/launch/qemu-smoke.sh dist/image

# Two builds of the image in two folders, compared byte for byte (diffoscope on a difference).
image-reproducible: deps
	image/check/reproducible.sh

clean:
	rm -rf dist .tmp

# Benchmarks (not tests): results in bench/results/. See bench/README.md.
bench: deps console-assets
	$(BUN) bench/money.ts
	$(BUN) bench/hot-account.ts
	$(BUN) bench/run.ts
	$(BUN) bench/stream-relay.ts
	$(BUN) bench/startup.ts
	$(BUN) bench/overhead.ts
	$(BUN) bench/alloc.ts
	$(BUN) bench/alloc-ops.ts
	$(BUN) bench/alloc-objects.ts
	$(BUN) bench/alloc-tokens.ts
	$(BUN) bench/gc-pause.ts
	$(BUN) bench/cluster.ts

# Soak (issue 7): SOAK_SECONDS (default 600) of mixed traffic with faults against real processes, then the
# books, holds, metrics against usage rows, memory and file descriptors. test/reliability/soak.ts.
soak: deps
	$(BUN) test ./test/reliability/soak.ts
