# symm-mcp: build, run and check.
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
BIN         := bin/symm-mcp

.PHONY: all build run test lint check fuzz bench clean

all: check

## build: the server binary, bin/symm-mcp
build:
	$(GO) build -o $(BIN) ./cmd/symm-mcp

## run: build and start the server on stdio (an MCP client normally does this)
run: build
	./$(BIN)

## test: every test, with the race detector
test:
	$(GO) test -race -count=1 ./...

## lint: gofmt, go vet and a pinned staticcheck
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

## check: lint, test and the changelog rule
check: lint test
	./scripts/changelog-guard.sh

clean:
	rm -rf bin
