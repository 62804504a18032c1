// Helpers of the live view's browser checks: a daemon with the fake ACP
// agent as codex, and a minimal MCP client of its /mcp.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

export const server = requiredPath('SYMM_MCP');
export const fakeAgent = requiredPath('FAKE_ACP_AGENT');
// floodbase prints make bench's CPU baseline (testdata/webview/floodbase);
// only the bench needs it.
export const floodbase = resolve(process.env.FLOODBASE || 'bin/floodbase');
export const browserPath = process.env.CHROMIUM || '/usr/bin/chromium';
export const shots = resolve(process.env.SCREENSHOTS || 'screenshots');
// Every wait is bounded by this; none sleeps.
export const WAIT = 20000;

function requiredPath(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run scripts/webview-e2e.sh)`);
  return resolve(v);
}

export function script(steps, extra = {}) {
  return JSON.stringify({ steps, ...extra });
}

// startDaemon starts serve with the fake agent as codex-acp and returns
// the live view's base URL once the daemon logged it.
export async function startDaemon(dir, extraArgs = ['--dashboard-actions']) {
  const bin = join(dir, 'bin');
  const ws = join(dir, 'ws');
  const state = join(dir, 'state');
  for (const d of [bin, ws, state]) mkdirSync(d, { mode: 0o700 });
  symlinkSync(fakeAgent, join(bin, 'codex-acp'));
  // git, for the worktree tasks: the daemon's PATH is bin alone.
  const git = execFileSync('sh', ['-c', 'command -v git'], { encoding: 'utf8' }).trim();
  symlinkSync(git, join(bin, 'git'));
  writeFileSync(join(ws, 'fake-agent.json'), JSON.stringify({
    agent_info: { name: 'fake-codex', version: '1.2.3' },
    modes: { current: 'read-only', available: [{ id: 'read-only', name: 'Read only' }] },
  }));
  const child = spawn(server, ['serve', '--socket', join(dir, 'symm.sock'), '--state-dir', state, '--ledger', 'memory',
    '--http', '127.0.0.1:0', ...extraArgs, '--log-level', 'info'], {
    cwd: ws, env: { PATH: bin, HOME: dir, TMPDIR: dir }, stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  const base = await new Promise((ok, fail) => {
    const timer = setTimeout(() => { child.kill('SIGKILL'); fail(new Error(`the daemon did not start:\n${log}`)); }, WAIT);
    child.stderr.on('data', (b) => {
      log += b;
      const m = /msg="serving the live view" url=(\S+)/.exec(log);
      if (m) { clearTimeout(timer); ok(m[1].replace(/\/$/, '')); }
    });
    child.on('exit', (code) => { clearTimeout(timer); fail(new Error(`the daemon exited (${code}):\n${log}`)); });
  });
  if (process.env.DAEMON_LOG) child.stderr.on('data', (b) => process.stderr.write(b));
  const token = readFileSync(join(state, 'token'), 'utf8').trim();
  return { child, base, token, ws, dir };
}

// mcp is a minimal Streamable HTTP client: initialize, then tool calls;
// with capabilities, what it declares (elicitation: the server may ask it
// questions, which listen() receives and never answers).
export class MCP {
  constructor(base, token, capabilities = {}) {
    this.url = `${base}/mcp`; this.token = token; this.id = 0; this.session = null; this.capabilities = capabilities;
    this.received = []; // the server's requests and notifications on the listening stream
    this.waiters = [];
  }

  // listen opens the session's stream for the server's own messages
  // (elicitation/create, notifications/cancelled) and keeps them.
  async listen() {
    this.listening = new AbortController();
    const r = await fetch(this.url, {
      headers: { Authorization: `Bearer ${this.token}`, Accept: 'text/event-stream', 'Mcp-Session-Id': this.session, 'MCP-Protocol-Version': '2025-06-18' },
      signal: this.listening.signal,
    });
    if (!r.ok) throw new Error(`MCP listen ${r.status}: ${await r.text()}`);
    (async () => {
      const dec = new TextDecoder();
      let buf = '';
      try {
        for await (const chunk of r.body) {
          buf += dec.decode(chunk, { stream: true });
          let nl;
          while ((nl = buf.indexOf('\n')) >= 0) {
            const line = buf.slice(0, nl);
            buf = buf.slice(nl + 1);
            if (!line.startsWith('data:')) continue;
            this.received.push(JSON.parse(line.slice(5)));
            for (const w of this.waiters.splice(0)) w();
          }
        }
      } catch { /* closed */ }
    })();
  }

  close() { this.listening?.abort(); }

  // receivedMatching waits until a message kept by listen() matches.
  async receivedMatching(pred, what) {
    const deadline = Date.now() + WAIT;
    for (;;) {
      const m = this.received.find(pred);
      if (m) return m;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${what} from the server; received ${JSON.stringify(this.received)}`);
      await new Promise((ok) => { const t = setTimeout(ok, left); this.waiters.push(() => { clearTimeout(t); ok(); }); });
    }
  }

  async post(body) {
    const headers = {
      Authorization: `Bearer ${this.token}`, 'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream', 'MCP-Protocol-Version': '2025-06-18',
    };
    if (this.session) headers['Mcp-Session-Id'] = this.session;
    const r = await fetch(this.url, { method: 'POST', headers, body: JSON.stringify(body) });
    if (r.headers.get('mcp-session-id')) this.session = r.headers.get('mcp-session-id');
    const text = await r.text();
    if (!r.ok) throw new Error(`MCP ${r.status}: ${text}`);
    if (body.id === undefined) return null;
    const lines = (r.headers.get('content-type') || '').includes('text/event-stream')
      ? text.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5))
      : [text];
    for (const l of lines) {
      const msg = JSON.parse(l);
      if (msg.id === body.id) {
        if (msg.error) throw new Error(`MCP error: ${JSON.stringify(msg.error)}`);
        return msg.result;
      }
    }
    throw new Error(`no answer to request ${body.id}: ${text}`);
  }

  async init() {
    await this.post({ jsonrpc: '2.0', id: ++this.id, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: this.capabilities, clientInfo: { name: 'webview-e2e', version: '1' } } });
    await this.post({ jsonrpc: '2.0', method: 'notifications/initialized' });
  }

  async call(name, args) {
    const res = await this.post({ jsonrpc: '2.0', id: ++this.id, method: 'tools/call', params: { name, arguments: args } });
    assert.notEqual(res.isError, true, `${name}: ${res.content?.[0]?.text}`);
    return res.structuredContent;
  }
}


// gitRepo makes a repository with one commit, for a worktree task.
export function gitRepo(dir) {
  mkdirSync(dir, { mode: 0o700 });
  const git = (...args) => execFileSync('git', ['-C', dir, '-c', 'user.name=t', '-c', 'user.email=t@example.invalid', ...args]);
  git('init', '-q');
  writeFileSync(join(dir, 'parser.go'), 'package parser\n');
  writeFileSync(join(dir, 'fake-agent.json'), JSON.stringify({ modes: { current: 'read-only', available: [{ id: 'read-only', name: 'Read only' }] } }));
  git('add', '.');
  git('commit', '-q', '-m', 'first');
  return dir;
}
