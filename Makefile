# symm-mcp: build, run and check.
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
CC          ?= cc
BIN         := bin/symm-mcp
# The server is built static, as the hello-world binary that make bench
# compares its start with: a dynamically linked one (cgo, for the net and
# os/user lookups it never makes) pays the dynamic loader on every exec,
# about 0.5 ms (intent 0008).
BUILD       := CGO_ENABLED=0 $(GO) build -trimpath

.PHONY: all build run test test-long lint check fuzz bench bench-scale bench-bin acpx e2e webview-e2e dist npm clean

all: check

## build: the server binaries, bin/symm-mcp and beside it the daemon
## bin/symm-mcpd, which symm-mcp serve becomes (intent 0049), and the
## sandbox's pre-exec step, bin/symm-sandbox-exec (a small binary that
## starts a sandboxed agent some 4 ms sooner than symm-mcp's own subcommand)
build:
	$(BUILD) -o bin/ ./cmd/symm-mcp ./cmd/symm-mcpd ./cmd/symm-sandbox-exec

## run: build and start the server on stdio (an MCP client normally does this).
## stdout is the MCP channel, so nothing but the server writes there: the
## recipe is not echoed and the build reports on stderr.
run:
	@$(BUILD) -o $(BIN) ./cmd/symm-mcp >&2
	@exec ./$(BIN)

## test: every test but the longest end-to-end scenarios (make test-long),
## with the race detector
# LONG_TESTS are the end-to-end scenarios that take the longest: clusters
# of daemons on a real 3-node NATS cluster (a 10 s lease to outwait, a host
# killed mid-turn, a routine's first occurrence a minute after its
# creation) and the load harness at small scale. make test leaves
# them out, make test-long runs them, .ci/run runs both: go test ./...
# alone is still every test.
LONG_TESTS := ^(TestClusterOfDaemons|TestClusterDaemonLosesItsName|TestClusterRoutedCalls|TestClusterDispatch|TestClusterRoutineFiresOnce|TestHarness)$$
# RACE_TEST: every race-built program these tests run (each test binary,
# and the servers, daemons and fake host CLIs the tests start) exits
# without the race runtime's one-second wait at exit (GORACE's
# atexit_sleep_ms, 1000 by default): a race is reported when it happens,
# and a test fails on it then; the wait only lets a race found in the
# last second be printed, and it cost make test about a minute of wall
# time (intent 0055). Options the caller sets in GORACE still apply.
# -vet=off: go test's vet subset (16 s of CPU from a cold cache) runs in
# full in make lint, which .ci/run runs first.
RACE_TEST := GORACE="atexit_sleep_ms=0 $$GORACE" $(GO) test -race -vet=off -count=1
test:
	$(RACE_TEST) -skip '$(LONG_TESTS)' ./...

## test-long: the end-to-end scenarios make test leaves out, with the race
## detector; one package at a time (-p 1): the cluster scenarios hold
## timing bounds the load harness beside them could break
test-long:
	$(RACE_TEST) -p 1 -run '$(LONG_TESTS)' ./cmd/symm-mcp ./internal/bench

## lint: gofmt, go vet and a pinned staticcheck
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

## check: lint, test and the changelog rule
check: lint test
	./scripts/changelog-guard.sh

## bench: build the server, the fake agent and the load harness, install the
## peer (acpx), and print the harness's table of figures and targets (the
## npm launcher's start-up among them: node runs it), then
## the live view's figures in headless Chromium (first paint with 1,000
## tasks; a 100,000-update turn followed by a task page); every part runs,
## and it fails at the end when a part missed a target
## BASELINE (a commit of this repository, or a server binary; default
## b42b97a, the build before the daemon and the cluster; none: no
## baseline) is built by scripts/bench-baseline.sh into the bench's cache
## and measured beside today's server in the same run, every row: the
## table gives both figures and their ratio
BASELINE ?= b42b97a
bench: bench-bin acpx
	@base=$$(./scripts/bench-baseline.sh "$(BASELINE)" "$(BENCH_CACHE)") || exit 1; \
	failed=""; \
	./bin/symm-bench -harness -server $(BIN) -agent bin/fake-acp-agent -acpx "$(ACPX_DIR)/node_modules/acpx/dist/cli.js" -natscluster bin/natscluster $${base:+-baseline "$$base"} || failed="$$failed harness"; \
	./scripts/webview-e2e.sh bench || failed="$$failed live-view"; \
	if [ -n "$$failed" ]; then echo "bench: missed a target or failed:$$failed" >&2; exit 1; fi

## webview-e2e: the live view in Debian's headless Chromium (the chromium
## package), driven by playwright-core against a daemon with the fake agent;
## screenshots in bin/e2e/screenshots/
webview-e2e:
	./scripts/webview-e2e.sh

## bench-scale: the scale runs (1,000 live tasks, 200 spawns from 8 callers,
## those again timed on the server's clock, on the fake agent and on the light
## stand-in bin/light-acp-agent,
## 100,000 finished tasks); checks the open-file and process limits first.
## BENCH_SCALE_FLAGS=-misses=report (.ci/run) prints a missed target and
## fails only when a run could not run. Needs a C compiler and glibc's static
## library (Debian: gcc, libc6-dev) for the stand-in
BENCH_SCALE_FLAGS ?=
bench-scale: bench-bin
	./bin/symm-bench -harness -scale $(BENCH_SCALE_FLAGS) -server $(BIN) -agent bin/fake-acp-agent -light-agent bin/light-acp-agent

# The light stand-in agent is C, linked static: the Go runtime's start was
# most of what a Go stand-in cost per exec (intent 0050).
bench-bin: build
	$(GO) build -o bin/fake-acp-agent ./internal/acpsession/fakeagent/cmd/fake-acp-agent
	$(GO) build -o bin/natscluster ./internal/jetstream/testdata/natscluster
	$(CC) -O2 -static -Wall -Wextra -Werror -o bin/light-acp-agent internal/bench/testdata/lightagent/lightagent.c
	$(GO) test -c -o bin/symm-bench ./internal/bench

## acpx: the peer make bench sets the large turn beside, pinned (with its
## dependencies) by internal/bench/testdata/acpx, installed with npm into
## the bench's cache outside the checkout; again only when the lock changed
## (a copy of it is the stamp). npm install, not npm ci: npm 11 leaves the
## other platforms' optional packages out of a lock and npm ci then refuses
## it. Network: the npm registry only. Needs node and npm.
BENCH_CACHE ?= $(or $(SYMM_BENCH_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/symm-mcp/bench)
ACPX_DIR    := $(BENCH_CACHE)/acpx
acpx:
	@lock=internal/bench/testdata/acpx; \
	if ! cmp -s "$$lock/package-lock.json" "$(ACPX_DIR)/.symm-lock" || [ ! -f "$(ACPX_DIR)/node_modules/acpx/dist/cli.js" ]; then \
		echo "bench: installing acpx into $(ACPX_DIR)" >&2; \
		mkdir -p "$(ACPX_DIR)" && rm -rf "$(ACPX_DIR)/node_modules" && cp "$$lock/package.json" "$$lock/package-lock.json" "$(ACPX_DIR)/" && \
		npm install --prefix "$(ACPX_DIR)" --ignore-scripts --no-audit --no-fund --loglevel=error >&2 && \
		cp "$$lock/package-lock.json" "$(ACPX_DIR)/.symm-lock"; \
	fi

## e2e: install the pinned agents (scripts/install-agents.sh, cached outside
## the checkout) and run the end-to-end suite against them; where unshare and
## ip allow it, in a network namespace of its own that has only loopback.
## Logs, model requests, events and the matrix: bin/e2e/
E2E_FLAGS ?= -test.v
e2e: build
	./scripts/install-agents.sh
	$(GO) test -c -tags e2e -o bin/e2e.test ./internal/e2e
	@cd internal/e2e && run="../../bin/e2e.test -test.count=1 -test.timeout=15m $(E2E_FLAGS)"; \
	if command -v ip >/dev/null && unshare -n true 2>/dev/null; then iso="unshare -n"; \
	elif command -v ip >/dev/null && unshare -rn true 2>/dev/null; then iso="unshare -rn"; \
	else iso=""; echo "e2e: no network namespace available: not isolated to loopback" >&2; fi; \
	echo "e2e: $${iso:-no isolation}: $$run" >&2; \
	E2E_SYMM_MCP="$(CURDIR)/$(BIN)" $$iso sh -c "ip link set lo up 2>/dev/null; exec $$run"

## dist: the release archives in DIST_DIR (scripts/dist.sh): static
## binaries for linux and darwin on amd64 and arm64, each packed with the
## licenses and README.md as symm-mcp_<version>_<os>_<arch>.tar.gz, and
## SHA256SUMS; two runs on one commit give the same bytes
## (scripts/dist-check.sh). VERSION is the tag on HEAD (vX.Y.Z), else
## v0.0.0-dev; COMMIT and COMMIT_TIME are HEAD's.
DIST_DIR    ?= dist
VERSION     ?= $(or $(shell git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null),v0.0.0-dev)
COMMIT      ?= $(shell git rev-parse HEAD)
COMMIT_TIME ?= $(shell git log -1 --format=%ct)
dist:
	DIST_DIR="$(DIST_DIR)" VERSION="$(VERSION)" COMMIT="$(COMMIT)" COMMIT_TIME="$(COMMIT_TIME)" GO="$(GO)" ./scripts/dist.sh

## npm: the npm packages (scripts/npm-pack.sh) from the archives of make
## dist: symm-mcp, the launcher, and @symm-mcp/<os>-<cpu> with each
## binary, packed with npm pack into $(DIST_DIR)/npm
npm: dist
	DIST_DIR="$(DIST_DIR)" VERSION="$(VERSION)" ./scripts/npm-pack.sh

clean:
	rm -rf bin dist
