GO      ?= go
BIN     := bin/oma-sandbox
FAKEMSB := bin/fakemsb

# The guest agent, embedded by guestagent/bundle (static, for both guest
# architectures).
AGENT_DIR := guestagent/bundle/bin

.PHONY: all agent build deps run test vet cross image e2e-real fuzz bench mutate clean

all: build

agent:
	for arch in amd64 arm64; do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w" \
			-o $(AGENT_DIR)/oma-guest-agent-linux-$$arch ./cmd/oma-guest-agent || exit 1; \
	done

build: agent
	$(GO) build -o $(BIN) ./cmd/oma-sandbox
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

# The CLI and library build and vet on every OS msb ships for (fakemsb and
# the tests that need Linux say so by build constraints).
cross:
	GOOS=darwin GOARCH=arm64 $(GO) build ./...
	GOOS=darwin GOARCH=arm64 $(GO) vet ./...
	GOOS=windows $(GO) build ./...
	GOOS=windows $(GO) vet ./...

test: deps vet agent
	$(GO) test -race -count=1 -timeout 20m ./...
	./scripts/fuzz-smoke.sh 3s

# The guest image sessions run on msb, built from Debian packages with
# mmdebstrap and loaded into msb under microvm.DefaultImage (root needed).
image:
	./scripts/build-image.sh

# A whole session on the real msb (.tools/msb) and the guest image, loaded
# into a private MSB_HOME; it skips with msb doctor's reason where no VM can
# boot. The image archive is built (and loaded nowhere else) when it is
# missing and msb doctor passes.
e2e-real: deps
	test -f bin/sandbox-image.tar || ! .tools/msb/bin/msb doctor >/dev/null 2>&1 || OMA_IMAGE_NOLOAD=1 ./scripts/build-image.sh
	$(GO) test -count=1 -v -timeout 20m ./e2e/realmsb/

fuzz:
	./scripts/fuzz-smoke.sh 30s

bench: deps agent build
	./scripts/bench.sh

# Mutation testing of the pure packages (slow); docs/TESTING.md has the
# results. PKGS=glob runs one package.
mutate:
	./scripts/mutate.sh $(PKGS)

clean:
	rm -rf bin outputs $(AGENT_DIR)/oma-guest-agent-linux-*
