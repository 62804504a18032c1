#!/usr/bin/env node
// The symm-mcp launcher of the npm package: it finds the binary of this
// platform's package (@symm-mcp/<os>-<cpu>, an optional dependency npm
// installs only where its os and cpu match, as esbuild and biome do) and
// runs it with this process's stdin, stdout and stderr (its serve is the
// daemon symm-mcpd, installed beside it in the same package): the MCP host's
// pipes reach the server itself, and nothing here reads or writes them.
// Node cannot replace itself with another program (no exec(2)), so it
// stays as the server's parent: it passes the signals a host sends on,
// and exits as the server did.
'use strict';

const { spawn } = require('node:child_process');

const packages = {
  'linux x64': '@symm-mcp/linux-x64',
  'linux arm64': '@symm-mcp/linux-arm64',
  'darwin x64': '@symm-mcp/darwin-x64',
  'darwin arm64': '@symm-mcp/darwin-arm64',
};

function fail(msg) {
  process.stderr.write(`symm-mcp: ${msg}\n`);
  process.exit(1);
}

const pkg = packages[`${process.platform} ${process.arch}`];
if (!pkg) {
  fail(`no binary for ${process.platform}/${process.arch}: symm-mcp is built for linux and darwin on x64 and arm64; ` +
    'elsewhere, build it with Go: go install github.com/symm-mcp/symm-mcp/cmd/...@latest');
}
let binary;
try {
  binary = require.resolve(`${pkg}/bin/symm-mcp`);
} catch {
  fail(`the package ${pkg}, which holds the binary for this platform, is not installed. npm installs it with ` +
    'symm-mcp as an optional dependency: install again without --omit=optional (or --no-optional), ' +
    `or install ${pkg} yourself`);
}

const child = spawn(binary, process.argv.slice(2), { stdio: 'inherit' });
// A host ends the server by closing its stdin or by a signal to the
// process it started, which is this one: the server gets the signal too.
const forwarded = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'];
for (const sig of forwarded) {
  process.on(sig, () => { child.kill(sig); });
}
child.on('error', (err) => fail(`cannot run ${binary}: ${err.message}`));
child.on('exit', (code, signal) => {
  if (signal) {
    // Die of the same signal, so that the host sees what the server did.
    for (const sig of forwarded) process.removeAllListeners(sig);
    process.kill(process.pid, signal);
    return;
  }
  process.exit(code ?? 1);
});
