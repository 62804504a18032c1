#!/usr/bin/env bash
# make dist: the release archives, reproducibly, with the Go toolchain
# alone (intent 0034). For each of linux and darwin on amd64 and arm64,
# the two static binaries, symm-mcp and the daemon symm-mcpd it hands
# serve to (intent 0049) (CGO_ENABLED=0, -trimpath, no VCS stamp, no
# build id, the version and commit linked in; on Linux with the sandbox's
# pre-exec step, symm-sandbox-exec, beside them), packed with the licenses
# and the README as
# symm-mcp_<version>_<os>_<arch>.tar.gz, and SHA256SUMS over them.
#
# Two runs on one commit give the same bytes: nothing in an archive
# depends on the machine, the path, the time or the user. The Go build is
# reproducible by itself once the paths (-trimpath), the VCS stamp and the
# build id are out; tar gets a name order, the commit's time, numeric
# owner 0 and fixed modes; gzip gets no name or time (-n).
#
# Environment: DIST_DIR (the output directory, emptied first), VERSION
# (vX.Y.Z), COMMIT (the full revision), COMMIT_TIME (unix seconds), GO.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${DIST_DIR:?}" "${VERSION:?}" "${COMMIT:?}" "${COMMIT_TIME:?}"
GO=${GO:-go}
case $VERSION in
v[0-9]*) ;;
*) echo "dist: VERSION must look like vX.Y.Z: $VERSION" >&2; exit 2 ;;
esac
platforms=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64)
pkg=github.com/symm-mcp/symm-mcp/internal/version
ldflags="-s -w -buildid= -X $pkg.version=$VERSION -X $pkg.commit=$COMMIT"
name_version=${VERSION#v} # archives and npm name versions without the v

rm -rf "$DIST_DIR"
mkdir -p "$DIST_DIR"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for p in "${platforms[@]}"; do
  os=${p%/*} arch=${p#*/}
  dir=symm-mcp_${name_version}_${os}_${arch}
  mkdir -p "$stage/$dir"
  # GOFLAGS is cleared so that a user's go env (say -buildvcs=true or
  # -race) cannot change the bytes.
  GOFLAGS= CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$GO" build -trimpath -buildvcs=false \
    -ldflags "$ldflags" -o "$stage/$dir/" ./cmd/symm-mcp ./cmd/symm-mcpd
  if [ "$os" = linux ]; then
    # The sandbox's pre-exec step (Landlock: Linux only), which symm-mcp
    # uses from beside itself when it is of the same build (intent 0048).
    GOFLAGS= CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$GO" build -trimpath -buildvcs=false \
      -ldflags "$ldflags" -o "$stage/$dir/symm-sandbox-exec" ./cmd/symm-sandbox-exec
    chmod 0755 "$stage/$dir/symm-sandbox-exec"
  fi
  cp LICENSE-APACHE LICENSE-MIT README.md "$stage/$dir/"
  chmod 0755 "$stage/$dir" "$stage/$dir/symm-mcp" "$stage/$dir/symm-mcpd"
  chmod 0644 "$stage/$dir/LICENSE-APACHE" "$stage/$dir/LICENSE-MIT" "$stage/$dir/README.md"
  tar -C "$stage" --sort=name --format=gnu --mtime="@$COMMIT_TIME" \
    --owner=0 --group=0 --numeric-owner -cf - "$dir" |
    gzip -n -9 >"$DIST_DIR/$dir.tar.gz"
done
(cd "$DIST_DIR" && LC_ALL=C sha256sum -- *.tar.gz >SHA256SUMS)
echo "dist: $VERSION ($COMMIT) in $DIST_DIR:" >&2
(cd "$DIST_DIR" && ls -l) >&2
