# `make check` is the quick tier for the edit loop: vet and every package's
# tests without the race detector, in -short mode, which skips the tests
# that run the built binary and the slow in-process ones (tandemtest.Long:
# several brokers or clusters, restarts, seconds of waiting). vet has run,
# so go test does not vet again (-vet=off), and its test binaries are
# linked without DWARF (-ldflags=-w: a third less link time; stack traces
# keep their function names and lines). docs/testing.md says what it
# costs. `make test` runs everything.
#
# The one test command (README.md, .ci/run): vet, then the race detector on
# every package but the client-heavy integration suite, and beside it that
# suite against the built binary without it, then franz-go's own kgo integration suite
# against a three-broker cluster (KGO_TEST_RF=3), then FUZZTIME of fuzzing
# every request type (a failing input is written to
# testdata/fuzz/FuzzRequests).
GO ?= go
INTEGRATION := ./testing/integration/...
FUZZTIME ?= 30s

.PHONY: test check build vet kgo fuzz

build:
	$(GO) build -o tandem ./cmd/tandem

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

check: vet
	$(GO) test -short -vet=off -ldflags=-w -timeout 10m ./...

# The race tier and the integration suite run at the same time: both
# spend most of their wall time waiting on brokers (elections, sessions,
# faults, clients' timeouts), so together they take little more than the
# longer of the two. The integration suite's output is held in a file
# and printed after the race tier's, so that neither is interleaved.
test: vet
	@log=$$(mktemp); status=0; \
	$(GO) test -count=1 -timeout 20m -v $(INTEGRATION) >$$log 2>&1 & pid=$$!; \
	$(GO) test -count=1 -race -timeout 20m $$($(GO) list ./... | grep -v /testing/integration) || status=1; \
	wait $$pid || status=1; \
	echo "== $(INTEGRATION)"; cat $$log; rm -f $$log; exit $$status
	$(MAKE) kgo
	$(MAKE) fuzz

kgo:
	KGO_BROKERS=3 sh testing/kgosuite.sh

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzRequests$$' -fuzztime $(FUZZTIME) ./testing/fuzz
