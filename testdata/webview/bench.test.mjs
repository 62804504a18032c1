// make bench's live view figure: the list's first paint with 1,000 tasks
// in headless Chromium, from the navigation's start to the frame after the
// first list is in the page (a performance mark list.js sets). Target 1 s.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { chromium } from 'playwright-core';

import { MCP, browserPath, script, startDaemon } from './lib.mjs';

const TASKS = 1000;
const TARGET_MS = 1000;
const RUNS = 5;
let dir, d, mcp, browser;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'symm-webview-bench-'));
  d = await startDaemon(dir, []);
  mcp = new MCP(d.base, d.token);
  await mcp.init();
  for (let n = 0; n < TASKS;) {
    const k = Math.min(64, TASKS - n);
    const tasks = Array.from({ length: k }, (_, i) => ({
      prompt: script([{ message: `task ${n + i}: done, and a last message of some length to show` }], { usage: { inputTokens: 100, outputTokens: 20, totalTokens: 120 } }),
      // Most from one orchestrator: one long group, the worst case.
      initiator_id: (n + i) % 10 < 8 ? 'orchestrator-a' : `orchestrator-${(n + i) % 10}`,
    }));
    await mcp.call('spawn_tasks', { tasks, defaults: { agent: 'codex', workspace: d.ws }, parallelism: 8 });
    n += k;
  }
  // Every task ends before the page is measured: no agent competes for the CPU.
  for (;;) {
    const live = await mcp.call('list_tasks', { status: ['created', 'starting', 'running'], limit: 100 });
    if (live.tasks.length === 0) break;
    await mcp.call('wait_tasks', { task_ids: live.tasks.map((t) => t.task_id), timeout_seconds: 30 });
  }
  browser = await chromium.launch({ executablePath: browserPath, args: ['--no-sandbox'] });
});

after(async () => {
  await browser?.close();
  if (d) {
    d.child.kill('SIGTERM');
    await new Promise((ok) => d.child.once('exit', ok));
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test(`first paint of the list with ${TASKS} tasks within ${TARGET_MS} ms`, async () => {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await ctx.newPage();
  await page.goto(`${d.base}/login`);
  await page.fill('input[name=token]', d.token);
  await page.click('button[type=submit]');
  await page.waitForURL(`${d.base}/`);
  const times = [];
  for (let i = 0; i < RUNS; i++) {
    await page.goto(`${d.base}/`);
    await page.waitForFunction(() => performance.getEntriesByName('symm:list-painted').length > 0, null, { timeout: 20000 });
    const rows = await page.locator('tr[data-task]').count();
    assert.equal(rows, TASKS);
    const m = await page.evaluate(() => ({
      painted: performance.getEntriesByName('symm:list-painted')[0].startTime,
      synced: performance.getEntriesByName('symm:list-synced')[0].startTime,
      render: performance.getEntriesByName('symm:list-render')[0].duration,
      dcl: performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd,
    }));
    console.log(`run ${i}: page loaded ${m.dcl.toFixed(0)} ms, list received ${m.synced.toFixed(0)} ms, rendered in ${m.render.toFixed(0)} ms, painted ${m.painted.toFixed(0)} ms`);
    times.push(m.painted);
  }
  times.sort((a, b) => a - b);
  const median = times[Math.floor(times.length / 2)];
  console.log(`live view: first paint of ${TASKS} tasks: median ${median.toFixed(0)} ms of ${RUNS} (${times.map((t) => t.toFixed(0)).join(', ')}), target ${TARGET_MS} ms`);
  assert.ok(median <= TARGET_MS, `median ${median} ms over ${TARGET_MS} ms`);
  await ctx.close();
});
