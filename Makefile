GO      ?= go
BIN     := bin/oma-sandbox
FAKEMSB := bin/fakemsb
# golang.org/x/tools, for cmd/deadcode (make deadcode).
DEADCODE_VERSION := v0.53.0

# The guest agent, embedded by guestagent/bundle (static, for both guest
# architectures).
AGENT_DIR := guestagent/bundle/bin

.PHONY: all agent build deps run test check vet cross deadcode image e2e-real fuzz bench mutate clean

all: build

agent:
	for arch in amd64 arm64; do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w" \
			-o $(AGENT_DIR)/oma-guest-agent-linux-$$arch ./cmd/oma-guest-agent || exit 1; \
	done

# The CLI without cgo: a static binary starts some 3 ms sooner (no dynamic
# loader, no libc), what every one-shot command pays (docs/BENCHMARKS.md
# §6a), and it can serve as its own agent where it must (docs/guest-agent.md).
build: agent
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/oma-sandbox
	$(GO) build -o $(FAKEMSB) ./fakemsb

deps:
	./scripts/deps.sh

# The main job: a session on the best backend this host has, a command in
# it with its output streamed, outputs collected into ./outputs, the session
# removed.
run: deps build
	./$(BIN) run --outputs run-outputs --overwrite -- bash -c 'echo "hello from $$(hostname) as $$(id -un)"; uname -sr; mkdir -p /mnt/session/outputs; date -u > /mnt/session/outputs/when.txt'

vet:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(MAKE) --no-print-directory cross
	$(MAKE) --no-print-directory deadcode

# No function that neither a command nor a test reaches.
deadcode:
	dead=$$($(GO) run golang.org/x/tools/cmd/deadcode@$(DEADCODE_VERSION) -test ./...) || exit 1; \
		test -z "$$dead" || { echo "$$dead"; echo "deadcode: the functions above are reached by no command and no test"; exit 1; }

# The CLI and library build and vet on every OS msb ships for (fakemsb and
# the tests that need Linux say so by build constraints).
cross:
	GOOS=darwin GOARCH=arm64 $(GO) build ./...
	GOOS=darwin GOARCH=arm64 $(GO) vet ./...
	GOOS=windows $(GO) build ./...
	GOOS=windows $(GO) vet ./...

# Everything CI runs: the checks below, then the real-VM suite.
test: check e2e-real

# gofmt, go vet, every test with -race (on fakemsb, local and the host
# stand-in), a short pass of every fuzz target.
check: deps vet agent
	$(GO) test -race -count=1 -timeout 20m ./...
	./scripts/fuzz-smoke.sh 20000x

# The guest image sessions run on msb, built from Debian packages with
# mmdebstrap and loaded into msb under microvm.DefaultImage (root needed).
image:
	./scripts/build-image.sh

# The real-VM suite on the real msb (.tools/msb) and the guest image
# (built when missing): the tools' and transfer's shared suites on one exec
# per call and on the guest agent's channel, whole sessions, poisoning,
# pause/resume, fork and the reaper (scripts/real-vm.sh). Where msb doctor
# fails here it runs in an outer guest under QEMU's software emulation.
e2e-real:
	./scripts/real-vm.sh

fuzz:
	./scripts/fuzz-smoke.sh 200000x

bench: deps agent build
	./scripts/bench.sh

# Mutation testing of the pure packages (slow); docs/TESTING.md has the
# results. PKGS=glob runs one package.
mutate:
	./scripts/mutate.sh $(PKGS)

clean:
	rm -rf bin outputs $(AGENT_DIR)/oma-guest-agent-linux-*
