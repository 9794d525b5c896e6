GO      ?= go
BIN     := bin/oma-sandbox
FAKEMSB := bin/fakemsb

.PHONY: all build deps run test vet cross image fuzz bench clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/oma-sandbox
	$(GO) build -o $(FAKEMSB) ./fakemsb

deps:
	./scripts/deps.sh

# The main job: a session on the best backend this host has, a command in
# it with its output streamed, outputs collected into ./outputs, the session
# removed.
run: deps build
	./$(BIN) run --outputs run-outputs -- bash -c 'echo "hello from $$(hostname) as $$(id -un)"; uname -sr; mkdir -p /mnt/session/outputs; date -u > /mnt/session/outputs/when.txt'

vet:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(MAKE) --no-print-directory cross

# The CLI and library build and vet on every OS msb ships for (fakemsb and
# the tests that need Linux say so by build constraints).
cross:
	GOOS=darwin GOARCH=arm64 $(GO) build ./...
	GOOS=darwin GOARCH=arm64 $(GO) vet ./...
	GOOS=windows $(GO) build ./...
	GOOS=windows $(GO) vet ./...

test: deps vet
	$(GO) test -race -count=1 -timeout 20m ./...
	./scripts/fuzz-smoke.sh 3s

# The guest image sessions run on msb, built from Debian packages with
# mmdebstrap and loaded into msb under session.DefaultImage (root needed).
image:
	./scripts/build-image.sh

fuzz:
	./scripts/fuzz-smoke.sh 30s

bench: deps build
	./scripts/bench.sh

clean:
	rm -rf bin outputs
