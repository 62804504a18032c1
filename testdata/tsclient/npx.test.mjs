// The official MCP TypeScript SDK client against symm-mcp as the npm
// package runs it: `npx symm-mcp` from a prefix the packed tarballs were
// installed into (the launcher, then this platform's binary package). The
// tools of plain mode are listed with the SDK's own strict schema, and the
// server says the version of the binary the packages were made from.
//
// Run by scripts/npm-check.sh, which sets NPM_PREFIX (the install) and
// SYMM_MCP_VERSION (what `symm-mcp --version` of the archive printed).
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const prefix = process.env.NPM_PREFIX;
const version = process.env.SYMM_MCP_VERSION;

const TOOLS = [
  'cancel_task', 'cleanup_worktrees', 'describe_agent', 'get_events',
  'get_task', 'list_hosts', 'list_tasks', 'resolve_task', 'send_task', 'spawn_task',
  'spawn_tasks', 'wait_tasks',
];

test('npx symm-mcp lists the twelve tools', async () => {
  assert.ok(prefix, 'NPM_PREFIX names the install (scripts/npm-check.sh sets it)');
  assert.ok(version, 'SYMM_MCP_VERSION is the binary\'s version (scripts/npm-check.sh sets it)');
  // --no: npx runs what the prefix holds and never installs from the
  // registry; -- ends npx's own flags.
  const transport = new StdioClientTransport({
    command: 'npx',
    args: ['--prefix', prefix, '--no', '--', 'symm-mcp', '--no-notify'],
    stderr: 'inherit',
  });
  const client = new Client({ name: 'npm-check', version: '1' });
  await client.connect(transport);
  try {
    assert.deepEqual(client.getServerVersion(), { name: 'symm-mcp', version });
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), TOOLS);
  } finally {
    await client.close();
  }
});
