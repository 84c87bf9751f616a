#!/usr/bin/env bash
# Builds the OpenTelemetry Collector that runs collector-config/, and Jaeger v2, from source, or finds them
# already built. Prints the collector's path on its first line and Jaeger's on its second; progress goes to
# stderr. Each binary is cached outside the repository, keyed by the hash of what it is built from:
#   collector: builder/manifest.yaml (the OpenTelemetry Collector Builder's manifest) and the builder's release;
#   Jaeger:    builder/jaeger/go.mod and go.sum (Jaeger's module, every dependency pinned).
# A rebuild happens only when one of those changes.
#
#   bash collector-config/build.sh            # both paths, building what is missing (5 to 10 minutes on 2 cores)
#
# Environment:
#   TORCH_OTEL_BUILD_CACHE  where the binaries are kept (default: $XDG_CACHE_HOME/torch-otel, else ~/.cache/torch-otel)
#   GOPROXY, GOFLAGS, ...   as for any go command
#
# Needs Go 1.24.6 or newer and a Go module proxy. What fails is one line on stderr, and the exit code is 1.
set -euo pipefail

OCB_VERSION=v0.161.0 # the OpenTelemetry Collector Builder: the same release as the manifest's components

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
manifest=$here/builder/manifest.yaml
jaeger_mod=$here/builder/jaeger
cache=${TORCH_OTEL_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torch-otel}

say() { echo "collector-config/build.sh: $*" >&2; }
die() {
    say "$*"
    exit 1
}

command -v go >/dev/null 2>&1 ||
    die "no Go toolchain on PATH: install Go 1.24.6 or newer (https://go.dev/doc/install), then run this again"
command -v sha256sum >/dev/null 2>&1 || die "no sha256sum on PATH (GNU coreutils)"

key() { cat "$@" | sha256sum | cut -c1-16; }
otelcol=$cache/otelcol-$(key "$manifest" <(echo "$OCB_VERSION"))/otelcol-torch-otel
jaeger=$cache/jaeger-$(key "$jaeger_mod/go.mod" "$jaeger_mod/go.sum")/jaeger

mkdir -p "$cache" || die "cannot create the build cache $cache: set TORCH_OTEL_BUILD_CACHE to a writable directory"
# One build at a time (two test workers, or CI's background build and a test, may ask at once).
exec 9>"$cache/.build.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi

# A failed go command: one line naming what is missing, with the full log kept for the curious.
go_failed() {
    local what=$1 log=$2 work=$3 line
    rm -rf "$work"
    line=$(grep -m1 -E 'dial tcp|no such host|connection refused|403 Forbidden|404 Not Found|410 Gone|not available|i/o timeout|TLS handshake|go: cannot find|requires go >=|invalid version|unknown revision|checksum mismatch' "$log" || true)
    [ -n "$line" ] || line=$(grep -v '^\s*$' "$log" | tail -n 1)
    die "building $what failed: ${line# } (GOPROXY=$(go env GOPROXY); the whole log: $log)"
}

build_otelcol() {
    local work log
    work=$(mktemp -d "$cache/otelcol-build.XXXXXX")
    log=$cache/otelcol-build.log
    say "building the collector (ocb $OCB_VERSION, $(grep -c 'gomod:' "$manifest") components) in $work"
    cp "$manifest" "$work/manifest.yaml"
    if ! (cd "$work" &&
        GOBIN=$cache/bin-$OCB_VERSION go install "go.opentelemetry.io/collector/cmd/builder@$OCB_VERSION" &&
        "$cache/bin-$OCB_VERSION/builder" --config manifest.yaml --ldflags='-s -w') >"$log" 2>&1; then
        go_failed "the collector" "$log" "$work"
    fi
    mkdir -p "$(dirname "$otelcol")"
    mv "$work/_build/otelcol-torch-otel" "$otelcol.tmp" && mv "$otelcol.tmp" "$otelcol"
    rm -rf "$work"
}

build_jaeger() {
    local work log
    work=$(mktemp -d "$cache/jaeger-build.XXXXXX")
    log=$cache/jaeger-build.log
    say "building Jaeger ($(awk '/jaegertracing\/jaeger /{print $2; exit}' "$jaeger_mod/go.mod")) in $work"
    cp "$jaeger_mod/go.mod" "$jaeger_mod/go.sum" "$work/"
    if ! (cd "$work" && go build -trimpath -ldflags='-s -w' -o jaeger github.com/jaegertracing/jaeger/cmd/jaeger) >"$log" 2>&1; then
        go_failed "Jaeger" "$log" "$work"
    fi
    mkdir -p "$(dirname "$jaeger")"
    mv "$work/jaeger" "$jaeger.tmp" && mv "$jaeger.tmp" "$jaeger"
    rm -rf "$work"
}

[ -x "$otelcol" ] || build_otelcol
[ -x "$jaeger" ] || build_jaeger
echo "$otelcol"
echo "$jaeger"
