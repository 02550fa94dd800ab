# Fleetwright — the two commands a new user needs are `make run` and `make test`.
GO        ?= go
BIN       := bin/fleetwright
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
DATA_DIR  ?= ./var
LISTEN    ?= 127.0.0.1:8080
# System packages the product and its tests run: Postgres and Redis (embedded
# by the panel), Chromium (agents and browser tests), systemd (unit checks),
# prometheus (its promtool checks and unit-tests deploy/prometheus/alerts.yml),
# patroni, etcd-server and redis-sentinel (the HA harness in app/testenv
# starts a Patroni cluster and Sentinel-watched Redis on loopback).
APT_PKGS  := postgresql redis-server chromium systemd prometheus caddy patroni etcd-server redis-sentinel

.PHONY: all deps build run test vet fmt-check generate check-generated bench clean sbom vulncheck

all: build

## deps: install missing system packages with apt (as root), or say what is missing.
deps:
	@missing=""; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v systemd-analyze >/dev/null 2>&1 || missing="$$missing systemd"; \
	command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v caddy >/dev/null 2>&1 || missing="$$missing caddy"; \
	command -v patroni >/dev/null 2>&1 || missing="$$missing patroni"; \
	command -v etcd >/dev/null 2>&1 || missing="$$missing etcd-server"; \
	command -v redis-sentinel >/dev/null 2>&1 || missing="$$missing redis-sentinel"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "deps: installing$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || exit 1; \
	  else \
	    echo "deps: missing$$missing — run: sudo apt-get install -y$$missing (or run make as root)"; exit 1; \
	  fi; \
	fi

## build: the binary, without the race detector.
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) .

## run: install what is missing, build and start the demo (docs/DEMO.md): panel, board, tenants and agents.
run: deps build
	./$(BIN) --role=demo --listen=$(LISTEN) --data-dir=$(DATA_DIR)

## test: vet, the generated-code and format checks, then every test under -race.
test: deps vet fmt-check check-generated build
	FLEET_TEST_BIN=$(abspath $(BIN)) $(GO) test -race -timeout 20m ./...

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '_templ.go$$')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

generate:
	$(GO) tool templ generate

## check-generated: fails when committed templ output is stale.
check-generated:
	@$(GO) tool templ generate >/dev/null 2>&1
	@if [ -n "$$(git status --porcelain -- '*_templ.go')" ]; then \
	  echo "generated templ code is stale; run 'make generate' and commit:"; \
	  git status --porcelain -- '*_templ.go'; exit 1; fi

## bench: the Go benchmarks (figures go to docs/BENCHMARKS.md).
bench: build
	FLEET_TEST_BIN=$(abspath $(BIN)) $(GO) test -run '^$$' -bench . -benchtime 3x ./...

## sbom: a CycloneDX SBOM of the module graph (bin/sbom.cdx.json), by cyclonedx-gomod kept in go.mod's tool block.
sbom:
	@mkdir -p bin
	$(GO) tool cyclonedx-gomod mod -json -output bin/sbom.cdx.json .
	@echo "sbom: bin/sbom.cdx.json"

## vulncheck: govulncheck's report against the vulnerability database deploy/vulncheck_test.go pins (the golang.org/x/vulndb module's OSV reports).
vulncheck:
	@db=$$(sed -n 's/^const VulnDB = "\(.*\)"/\1/p' deploy/vulncheck_test.go); \
	dir=$$($(GO) mod download -json $$db | sed -n 's/^\t"Dir": "\(.*\)",/\1/p'); \
	if [ -z "$$dir" ]; then echo "vulncheck: could not fetch $$db through the Go module proxy"; exit 2; fi; \
	echo "vulncheck: database $$db"; \
	$(GO) tool govulncheck -db file://$$dir/data/osv ./...

clean:
	rm -rf bin
