#!/usr/bin/env bash
# make npm: the npm packages, from the archives of make dist in DIST_DIR,
# packed with npm pack into DIST_DIR/npm (intent 0034):
#   symm-mcp                 the launcher (npm/symm-mcp), its optional
#                            dependencies the four below, at the same version
#   @symm-mcp/<os>-<cpu>     the binaries of one platform each (symm-mcp and
#                            the daemon symm-mcpd beside it, intent 0049),
#                            with "os" and "cpu" so that npm
#                            installs only the one of the machine
#   server.json              the MCP Registry entry, at this version
# The version is VERSION's without the v. Needs node and npm.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${DIST_DIR:?}" "${VERSION:?}"
version=${VERSION#v}
out=$DIST_DIR/npm
rm -rf "$out"
mkdir -p "$out/src"
out=$(cd "$out" && pwd)

# One package per archive: linux_amd64 → @symm-mcp/linux-x64.
for archive in "$DIST_DIR"/symm-mcp_"${version}"_*.tar.gz; do
  base=$(basename "$archive" .tar.gz)
  os_arch=${base#symm-mcp_"${version}"_}
  os=${os_arch%_*} arch=${os_arch#*_}
  case $arch in
  amd64) cpu=x64 ;;
  arm64) cpu=arm64 ;;
  *) echo "npm-pack: no npm cpu for $arch" >&2; exit 1 ;;
  esac
  dir=$out/src/$os-$cpu
  mkdir -p "$dir/bin"
  tar -xzf "$archive" -C "$dir" --strip-components=1
  mv "$dir/symm-mcp" "$dir/symm-mcpd" "$dir/bin/"
  files="bin/symm-mcp bin/symm-mcpd"
  if [ -f "$dir/symm-sandbox-exec" ]; then
    # The sandbox's pre-exec step, beside the binary that looks for it.
    mv "$dir/symm-sandbox-exec" "$dir/bin/symm-sandbox-exec"
    files="$files bin/symm-sandbox-exec"
  fi
  rm "$dir/README.md"
  OS=$os CPU=$cpu VERSION=$version FILES=$files node -e '
    const { OS, CPU, VERSION, FILES } = process.env;
    const names = { linux: "Linux", darwin: "macOS" };
    process.stdout.write(JSON.stringify({
      name: `@symm-mcp/${OS}-${CPU}`,
      version: VERSION,
      description: `The symm-mcp binaries for ${names[OS]} on ${CPU} (installed by the symm-mcp package).`,
      homepage: "https://github.com/symm-mcp/symm-mcp",
      repository: { type: "git", url: "git+https://github.com/symm-mcp/symm-mcp.git" },
      license: "Apache-2.0 OR MIT",
      os: [OS],
      cpu: [CPU],
      files: [...FILES.split(" "), "LICENSE-APACHE", "LICENSE-MIT"],
      preferUnplugged: true,
    }, null, 2) + "\n");
  ' >"$dir/package.json"
  printf '# @symm-mcp/%s-%s\n\nThe symm-mcp binaries (symm-mcp and its daemon, symm-mcpd) for %s/%s, installed by the [symm-mcp](https://www.npmjs.com/package/symm-mcp) package: `npx -y symm-mcp`.\n' \
    "$os" "$cpu" "$os" "$cpu" >"$dir/README.md"
  (cd "$dir" && npm pack --pack-destination "$out" --loglevel=error >/dev/null)
done

# The launcher's package, its optional dependencies at this version.
dir=$out/src/symm-mcp
mkdir -p "$dir/bin"
cp npm/symm-mcp/bin/symm-mcp.js "$dir/bin/"
cp README.md LICENSE-APACHE LICENSE-MIT "$dir/"
VERSION=$version node -e '
  const fs = require("node:fs");
  const p = JSON.parse(fs.readFileSync("npm/symm-mcp/package.json", "utf8"));
  p.version = process.env.VERSION;
  for (const k of Object.keys(p.optionalDependencies)) p.optionalDependencies[k] = process.env.VERSION;
  p.files.push("LICENSE-APACHE", "LICENSE-MIT");
  process.stdout.write(JSON.stringify(p, null, 2) + "\n");
' >"$dir/package.json"
(cd "$dir" && npm pack --pack-destination "$out" --loglevel=error >/dev/null)
rm -rf "$out/src"

# The MCP Registry entry of this release: server.json with its versions set
# to this one (the checked-in file says 0.0.0), ready for mcp-publisher.
VERSION=$version node -e '
  const fs = require("node:fs");
  const v = process.env.VERSION;
  const s = JSON.parse(fs.readFileSync("server.json", "utf8"));
  s.version = v;
  for (const p of s.packages) p.version = v;
  const meta = s._meta["io.modelcontextprotocol.registry/publisher-provided"];
  meta.goInstall = meta.goInstall.replace(/@v[^@]*$/, "@v" + v);
  process.stdout.write(JSON.stringify(s, null, 2) + "\n");
' >"$out/server.json"
echo "npm-pack: $version in $out:" >&2
(cd "$out" && ls -l) >&2
