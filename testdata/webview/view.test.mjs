// The live view in a real browser: Debian's headless Chromium, driven by
// playwright-core (pinned in package-lock.json, no browser download of its
// own), against a daemon (symm-mcp serve --http --dashboard-actions) whose
// codex is the fake ACP agent. Tasks are spawned over the daemon's /mcp
// with its bearer token, as a host would; the page is only looked at.
//
// Run by scripts/webview-e2e.sh, which builds the binaries and sets
// SYMM_MCP, FAKE_ACP_AGENT, CHROMIUM and SCREENSHOTS.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { chromium } from 'playwright-core';

import { spawnSync } from 'node:child_process';

import { MCP, WAIT, browserPath, gitRepo, script, server, shots, startDaemon } from './lib.mjs';

describe('live view in headless Chromium', () => {
  let dir, d, mcp, browser, ctx, page;
  const dialogs = [];
  const problems = [];

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'symm-webview-'));
    mkdirSync(shots, { recursive: true });
    d = await startDaemon(dir);
    mcp = new MCP(d.base, d.token);
    await mcp.init();
    browser = await chromium.launch({ executablePath: browserPath, args: ['--no-sandbox'] });
    ctx = await browser.newContext({ viewport: { width: 1280, height: 760 } });
    page = await ctx.newPage();
    page.setDefaultTimeout(WAIT);
    // An agent's string that ran as script would open a dialog or set a
    // global; a page of ours that broke the CSP would say so here.
    ctx.on('dialog', (dl) => { dialogs.push(dl.message()); dl.dismiss(); });
    page.on('console', (m) => { if (m.type() === 'error' || /Content.Security.Policy|Refused to/i.test(m.text())) problems.push(m.text()); });
    page.on('pageerror', (e) => problems.push(String(e)));
  });

  after(async () => {
    await browser?.close();
    if (d) {
      d.child.kill('SIGTERM');
      await new Promise((ok) => d.child.once('exit', ok));
    }
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('without a token the page shows the login and nothing else', async () => {
    const r = await page.goto(`${d.base}/`);
    assert.equal(new URL(page.url()).pathname, '/login');
    assert.equal(r.headers()['x-content-type-options'], 'nosniff');
    assert.match(r.headers()['content-security-policy'], /frame-ancestors 'none'/);
    assert.equal(await page.locator('input[name=token]').count(), 1);
    assert.equal(await page.locator('#groups, #timeline').count(), 0, 'the login page holds no list');
    assert.deepEqual(await page.locator('script').evaluateAll((ss) => ss.map((s) => s.getAttribute('src'))), ['/static/login.js'], 'only its own script');
    const api = await page.evaluate(async () => (await fetch('/api/stream/tasks')).status);
    assert.equal(api, 401);
    await page.goto(`${d.base}/tasks/anything`);
    assert.equal(new URL(page.url()).pathname, '/login');
    await page.fill('input[name=token]', 'not-the-token');
    await page.click('button[type=submit]');
    await page.waitForSelector('#login-error');
    assert.equal(new URL(page.url()).pathname, '/login');
    assert.ok(!page.url().includes('not-the-token'), 'the token is never in the URL');
  });

  test('login with the token opens the list', async () => {
    await page.fill('input[name=token]', d.token);
    await page.click('button[type=submit]');
    // The login goes on to the page that asked for it.
    await page.waitForURL(`${d.base}/tasks/anything`);
    assert.ok(!page.url().includes(d.token), 'the token is never in the URL');
    await page.waitForSelector('body[data-status=missing]');
    assert.match(await page.locator('#title').textContent(), /No task anything/);
    await page.goto(`${d.base}/`);
    const port = new URL(d.base).port;
    const cookie = (await ctx.cookies()).find((c) => c.name === `symm_session_${port}`);
    assert.ok(cookie, 'the cookie names the port');
    assert.ok(cookie.httpOnly, 'HttpOnly');
    assert.equal(cookie.sameSite, 'Strict');
    assert.ok(cookie.expires > Date.now() / 1000, 'an expiring cookie');
    assert.equal(await page.evaluate(() => document.cookie), '', 'the page script cannot read the cookie');
    // The cookie alone (what another loopback server could receive) opens
    // nothing: the page's requests carry the key from sessionStorage.
    assert.equal(await page.evaluate(async () => (await fetch('/api/session')).status), 401);
    assert.equal(await page.evaluate(async () => (await fetch('/api/session', { headers: { 'X-Symm-Key': sessionStorage.getItem('symm-key') } })).status), 200);
    // A tab opened afresh gets the key from an open tab of the view.
    const other = await ctx.newPage();
    await other.goto(`${d.base}/`);
    await other.waitForSelector('body[data-ready=true]');
    assert.equal(new URL(other.url()).pathname, '/');
    await other.close();
    await page.waitForSelector('body[data-ready=true]');
    await page.waitForSelector('.conn.live');
    // The header shows the daemon's version, as --version prints it.
    const version = spawnSync(server, ['--version'], { encoding: 'utf8' }).stderr.trim().replace(/^symm-mcp /, '');
    assert.match(version, /^v\d+\.\d+\.\d+/);
    await page.waitForFunction((v) => document.getElementById('version').textContent === v, version);
  });

  let done;
  test('a spawned task shows up live and reaches succeeded', async () => {
    const spawned = await mcp.call('spawn_task', {
      agent: 'codex', workspace: d.ws, initiator_id: 'orchestrator-1', executor_id: 'fake-codex', allow: ['read'],
      prompt: script([
        { raw_update: { sessionUpdate: 'session_info_update', title: 'Refactor the parser' } },
        { thought: 'Reading the parser first.' },
        { plan: [{ content: 'read parser.go', priority: 'high', status: 'completed' }, { content: 'split the lexer', priority: 'medium', status: 'pending' }] },
        { tool_call: { toolCallId: 't1', title: 'Read parser.go', kind: 'read', status: 'pending', rawInput: { path: 'parser.go' } } },
        { tool_call_update: { toolCallId: 't1', status: 'completed', rawOutput: { lines: 120 } } },
        { permission: { tool_call_id: 't2', title: 'Read lexer.go', kind: 'read' } },
        { stderr: 'warning: cache cold' },
        { stderr: 'warning: still cold' },
        { message: 'The parser is split into lexer.go and parser.go.' },
        { raw_update: { sessionUpdate: 'usage_update', used: 1200, size: 200000, cost: { amount: 0.0123, currency: 'USD' } } },
      ], { usage: { inputTokens: 1000, outputTokens: 200, totalTokens: 1200 } }),
    });
    done = spawned.task_id;
    const row = page.locator(`tr[data-task="${done}"]`);
    await row.waitFor();
    await page.locator(`tr[data-task="${done}"][data-status=succeeded]`).waitFor();
    assert.equal(await page.locator('section.group[data-initiator="orchestrator-1"]').count(), 1, 'grouped by initiator');
    assert.match(await row.textContent(), /Refactor the parser/);
    assert.match(await row.textContent(), /codex/);
    assert.match(await row.textContent(), /USD/);
  });

  test('its timeline shows the scripted messages', async () => {
    await page.click(`tr[data-task="${done}"] td.name a`);
    await page.waitForURL(`${d.base}/tasks/${done}`);
    await page.waitForSelector('body[data-status=succeeded]');
    await page.waitForSelector('#timeline .ev[data-type=process_exited]');
    const tl = page.locator('#timeline');
    await tl.locator('.message', { hasText: 'The parser is split into lexer.go and parser.go.' }).waitFor();
    await tl.locator('.thought', { hasText: 'Reading the parser first.' }).waitFor();
    const tool = tl.locator('.tool', { hasText: 'Read parser.go' });
    assert.match(await tool.textContent(), /read/);
    assert.match(await tool.textContent(), /completed/);
    assert.match(await tool.textContent(), /parser\.go/);
    assert.match(await tl.locator('ol.plan').textContent(), /split the lexer/);
    const perm = tl.locator('.permission');
    assert.match(await perm.textContent(), /Read lexer\.go/);
    assert.match(await perm.textContent(), /allow/);
    // stderr comes on a pipe of its own, so its lines may fall between
    // other events: each run of lines is one entry, collapsed.
    const stderr = tl.locator('.stderr details');
    assert.ok(await stderr.count() >= 1);
    assert.deepEqual(await stderr.evaluateAll((ds) => ds.map((e) => e.open)), Array(await stderr.count()).fill(false), 'collapsed');
    const lines = await stderr.locator('summary').evaluateAll((ss) => ss.reduce((n, s) => n + Number(/\((\d+) line/.exec(s.textContent)[1]), 0));
    assert.equal(lines, 2);
    assert.equal(await tl.locator('.stderr', { hasText: 'warning: cache cold' }).isVisible(), true);
    assert.equal(await tl.getByText('warning: cache cold').isVisible(), false, 'the lines show only when opened');
    // The URL is the task's: a reload shows it again.
    await page.reload();
    await tl.locator('.message', { hasText: 'lexer.go' }).waitFor();
    await page.uncheck('#follow');
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: join(shots, 'task.png'), fullPage: false });
  });

  test('a worktree task shows its diff', async () => {
    const repo = gitRepo(join(d.dir, 'repo'));
    const spawned = await mcp.call('spawn_task', {
      agent: 'codex', workspace: repo, initiator_id: 'orchestrator-1', isolation: 'worktree',
      // serve confines by default: without edit the worktree is read-only.
      allow: ['read', 'edit'],
      prompt: script([{ write_file: { path: 'lexer.go', content: 'package parser\n\nfunc lex() {}\n' } }, { write_file: { path: 'parser.go', content: 'package parser\n\n// split\n' } }, { message: 'split' }]),
    });
    await page.goto(`${d.base}/tasks/${spawned.task_id}`);
    await page.waitForSelector('body[data-status=succeeded]');
    await page.waitForSelector('#diff:not([hidden])');
    const diff = await page.locator('#diff').textContent();
    assert.match(diff, /lexer\.go/);
    assert.match(diff, /parser\.go/);
    assert.match(diff, /2 files/);
  });

  test('each task shows its sandbox mode', async () => {
    // serve confines by default (workspace; read-only without edit), and a
    // task may opt out: the list and the task page say which.
    const spawn = (extra) => mcp.call('spawn_task', { agent: 'codex', workspace: d.ws, initiator_id: 'sandboxes', prompt: script([{ message: 'ok' }]), ...extra });
    const confined = await spawn({ allow: ['read', 'edit'] });
    const readOnly = await spawn({});
    const open = await spawn({ sandbox: 'off' });
    for (const id of [confined.task_id, readOnly.task_id, open.task_id]) await mcp.call('wait_tasks', { task_ids: [id], timeout_seconds: 30 });
    await page.goto(`${d.base}/`);
    const shown = async (id) => page.locator(`tr[data-task="${id}"] .badge.sandbox`).textContent();
    await page.locator(`tr[data-task="${open.task_id}"] .badge.sandbox`).waitFor();
    assert.equal(await shown(confined.task_id), 'sandbox workspace');
    assert.equal(await shown(readOnly.task_id), 'sandbox read-only');
    assert.equal(await shown(open.task_id), 'unconfined');
    await page.goto(`${d.base}/tasks/${confined.task_id}`);
    await page.waitForSelector('body[data-status=succeeded]');
    const meta = await page.locator('#meta').textContent();
    assert.match(meta, /sandboxsandbox workspace Landlock ABI \d+; TCP [\d, ]*443/);
    assert.ok(meta.includes(d.ws), 'the workspace is among the writable directories');
  });

  test('cancel works through the page', async () => {
    const spawned = await mcp.call('spawn_task', {
      agent: 'codex', workspace: d.ws, initiator_id: 'orchestrator-1',
      prompt: script([{ message: 'working on it' }, { wait_for_cancel: true }]),
    });
    await page.goto(`${d.base}/tasks/${spawned.task_id}`);
    await page.locator('#timeline .message', { hasText: 'working on it' }).waitFor();
    await page.click('#cancel');
    await page.waitForSelector('dialog#confirm[open]');
    await page.click('#confirm-yes');
    await page.waitForSelector('body[data-status=cancelled]');
    await page.locator('#timeline .ev[data-type=task_cancelled]').waitFor();
    const rec = await mcp.call('get_task', { task_id: spawned.task_id });
    assert.equal(rec.status, 'cancelled');
    // A finished task offers a resolution instead, behind a confirmation too.
    await page.selectOption('#resolution', 'rejected');
    await page.fill('#note', 'cancelled from the page');
    await page.click('#resolve');
    await page.click('#confirm-yes');
    await page.waitForSelector('#action-msg:text("recorded")');
    const resolved = await mcp.call('get_task', { task_id: spawned.task_id });
    assert.equal(resolved.resolution, 'rejected');
    assert.equal(resolved.resolution_note, 'cancelled from the page');
    // One more, still running when the list is shot (the daemon's end
    // stops it).
    const live = await mcp.call('spawn_task', {
      agent: 'codex', workspace: d.ws, initiator_id: 'reviewer', executor_id: 'fake-codex',
      prompt: script([{ raw_update: { sessionUpdate: 'session_info_update', title: 'Review the lexer split' } }, { message: 'reading lexer.go' }, { wait_for_cancel: true }]),
    });
    await page.goto(`${d.base}/`);
    await page.locator(`tr[data-task="${spawned.task_id}"] td.res:text("rejected")`).waitFor();
    await page.locator(`tr[data-task="${live.task_id}"][data-status=running]`).waitFor();
    const box = await page.locator('#list').boundingBox();
    await page.screenshot({ path: join(shots, 'list.png'), clip: { x: 0, y: 0, width: 1280, height: Math.ceil(box.y + box.height) } });
  });

  test('a permission question answered from the page', async () => {
    // A host that offers elicitation and is asked, but whose person does
    // not answer there: the page's answer wins and withdraws its question.
    const host = new MCP(d.base, d.token, { elicitation: {} });
    await host.init();
    await host.listen();
    try {
      const spawned = await host.call('spawn_task', {
        agent: 'codex', workspace: d.ws, initiator_id: 'orchestrator-1', ask: ['execute'],
        prompt: script([
          { message: 'about to run the tests' },
          { permission: { tool_call_id: 'run1', title: 'Run go test ./...', kind: 'execute', raw_input: { command: 'go test ./...' }, report: true } },
          { message: 'the tests ran' },
        ]),
      });
      const id = spawned.task_id;
      const asked = await host.receivedMatching((m) => m.method === 'elicitation/create', 'elicitation/create');
      assert.match(asked.params.message, /Run go test/);
      // The list says which task waits for the person.
      await page.goto(`${d.base}/`);
      await page.locator(`tr[data-task="${id}"] .badge.waiting`).waitFor();
      await page.screenshot({ path: join(shots, 'list-waiting.png'), fullPage: false });
      await page.click(`tr[data-task="${id}"] td.name a`);
      await page.waitForURL(`${d.base}/tasks/${id}`);
      const q = page.locator('#decisions li.decision');
      await q.waitFor();
      assert.match(await q.textContent(), /Run go test \.\/\.\.\./);
      assert.match(await q.textContent(), /execute/);
      await page.screenshot({ path: join(shots, 'decision.png'), fullPage: false });
      await q.locator('button[data-decision=allow_once]').click();
      await page.waitForSelector('dialog#confirm[open]');
      await page.click('#confirm-yes');
      await page.waitForSelector('body[data-decisions="0"]');
      await page.waitForSelector('body[data-status=succeeded]');
      const perm = page.locator('#timeline .permission');
      assert.match(await perm.textContent(), /allow_once/);
      assert.match(await perm.textContent(), /by human via dashboard/);
      await page.locator('#timeline .message', { hasText: 'the tests ran' }).waitFor();
      await page.goto(`${d.base}/`);
      await page.locator(`tr[data-task="${id}"][data-status=succeeded]`).waitFor();
      assert.equal(await page.locator(`tr[data-task="${id}"] .badge.waiting`).count(), 0, 'no longer waiting');
      // The host's question was withdrawn.
      await host.receivedMatching((m) => m.method === 'notifications/cancelled' && m.params?.requestId === asked.id, 'notifications/cancelled for the elicitation');
      const ev = await host.call('get_events', { task_id: id, limit: 100 });
      const p = ev.events.filter((e) => e.type === 'permission');
      assert.equal(p.length, 1, 'one decision');
      assert.equal(p[0].decided_by, 'human');
      assert.equal(p[0].via, 'dashboard');
    } finally {
      host.close();
    }
  });

  test('a hostile task renders inert and stays responsive', async () => {
    const long = 'A'.repeat(1 << 20);
    const spawned = await mcp.call('spawn_task', {
      agent: 'codex', workspace: d.ws, initiator_id: '<img src=x onerror="window.__pwned=1">',
      prompt: script([
        { raw_update: { sessionUpdate: 'session_info_update', title: '<script>window.__pwned=2</script>' } },
        { message: '<script>window.__pwned=3;alert(3)</script><img src=x onerror="alert(4)">' },
        { tool_call: { toolCallId: 'evil', title: '<a href="javascript:alert(5)">click me</a>', kind: 'execute', status: 'pending', rawInput: { cmd: '<iframe src="javascript:alert(6)"></iframe>' } } },
        { stderr: '<svg onload="alert(7)">' },
        { message: '\n' + long },
        { plan: [{ content: '<b onmouseover="alert(8)">plan</b>', priority: 'high', status: 'pending' }] },
      ]),
    });
    const id = spawned.task_id;
    await page.goto(`${d.base}/`);
    const row = page.locator(`tr[data-task="${id}"][data-status=succeeded]`);
    await row.waitFor();
    assert.match(await row.textContent(), /<script>window.__pwned=2<\/script>/, 'the title shows as text');
    const start = Date.now();
    await page.goto(`${d.base}/tasks/${id}`);
    await page.waitForSelector('#timeline .ev[data-type=process_exited]');
    const rendered = Date.now() - start;
    const tl = page.locator('#timeline');
    assert.match(await tl.locator('.message').first().textContent(), /<script>window.__pwned=3;alert\(3\)<\/script>/);
    assert.match(await tl.locator('.tool').textContent(), /<a href="javascript:alert\(5\)">click me<\/a>/);
    assert.equal(await page.locator('#timeline script, #timeline img, #timeline iframe, #timeline svg, #timeline a, #timeline b, #meta img, #meta script').count(), 0, 'no element came from an agent');
    // The 1 MB line is clipped until asked for, and the page answers.
    const big = tl.locator('.message', { hasText: 'AAAA' });
    await big.locator('button.more').waitFor();
    const t0 = Date.now();
    assert.equal(await page.evaluate(() => 1 + 1), 2);
    await big.locator('button.more').click();
    await page.waitForFunction(() => [...document.querySelectorAll('#timeline .message .text')].some((n) => n.textContent.length > 1000000));
    const expanded = Date.now() - t0;
    await page.mouse.wheel(0, 2000);
    await page.screenshot({ path: join(shots, 'hostile.png'), fullPage: false });
    assert.equal(await page.evaluate(() => window.__pwned), undefined, 'no agent string ran');
    assert.deepEqual(dialogs, [], 'no agent string opened a dialog');
    console.log(`hostile task page: events rendered in ${rendered} ms, the 1 MB line shown whole in ${expanded} ms`);
    assert.ok(rendered < 5000 && expanded < 5000, 'the page stays responsive');
  });

  test('a stalled task shows its health and the stalled event', async () => {
    // A daemon of its own, whose tasks stall after 1 s without an ACP
    // update or CPU time (--stall-after 1): the fake agent says one thing,
    // then hangs, idle.
    const dir2 = mkdtempSync(join(tmpdir(), 'symm-webview-stall-'));
    const d2 = await startDaemon(dir2, ['--stall-after', '1']);
    try {
      const mcp2 = new MCP(d2.base, d2.token);
      await mcp2.init();
      const spawned = await mcp2.call('spawn_task', {
        agent: 'codex', workspace: d2.ws, initiator_id: 'stall-check',
        prompt: script([{ message: 'thinking hard' }, { hang: true }]),
      });
      const id = spawned.task_id;
      const waited = await mcp2.call('wait_tasks', { task_ids: [id], timeout_seconds: 60 });
      assert.equal(waited.reason, 'stalled', 'the wait ends on the stall');
      assert.equal(waited.pending[0].health, 'stalled');

      await page.goto(`${d2.base}/`);
      await page.fill('input[name=token]', d2.token);
      await page.click('button[type=submit]');
      await page.waitForSelector('body[data-ready=true]');
      const badge = page.locator(`tr[data-task="${id}"] .badge.h-stalled`);
      await badge.waitFor();
      assert.match(await badge.getAttribute('title'), /last ACP update \d{4}-/);
      await page.goto(`${d2.base}/tasks/${id}`);
      await page.locator('#meta .badge.h-stalled').waitFor();
      assert.match(await page.locator('#meta').textContent(), /last update \d{4}-.*last CPU \d{4}-/);
      await page.locator('#timeline .ev[data-type=stalled]', { hasText: 'nothing was stopped' }).waitFor();
      await page.screenshot({ path: join(shots, 'stalled.png'), fullPage: false });
      const rec = await mcp2.call('get_task', { task_id: id });
      assert.equal(rec.status, 'running', 'a stall stops nothing');
      assert.equal(rec.digest.health, 'stalled');
    } finally {
      d2.child.kill('SIGTERM');
      await new Promise((ok) => d2.child.once('exit', ok));
      rmSync(dir2, { recursive: true, force: true });
    }
  });

  test('the pages broke no rule of their own CSP', () => {
    // (The one resource answered 404 is the stream of the task that is not there.)
    assert.deepEqual(problems.filter((p) => !/status of 40[14]/.test(p)), []);
  });
});
