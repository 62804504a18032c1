// The official MCP TypeScript SDK client against the built symm-mcp binary,
// with the fake ACP agent standing in for codex-acp: a strict listTools()
// (the SDK's own ListToolsResultSchema), then every tool and every error
// code a caller can meet, with the SDK checking each structuredContent
// against the tool's outputSchema; a wait's progress notifications; the
// task resources listed, read and subscribed to; one permission question
// answered through elicitation (spawn_task's ask). Once per protocol version
// this SDK speaks and symm-mcp's hosts use.
//
// Run by scripts/ts-client.sh, which builds the binaries and sets
// SYMM_MCP (the server) and FAKE_ACP_AGENT (the fake agent).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import {
  ElicitRequestSchema,
  ErrorCode,
  ListPromptsResultSchema,
  ListResourcesResultSchema,
  ListToolsResultSchema,
  McpError,
  ResourceUpdatedNotificationSchema,
  SUPPORTED_PROTOCOL_VERSIONS,
} from '@modelcontextprotocol/sdk/types.js';

const server = requiredPath('SYMM_MCP');
const fakeAgent = requiredPath('FAKE_ACP_AGENT');

// 2025-11-25 is the newest this SDK speaks (its LATEST_PROTOCOL_VERSION);
// 2025-06-18 is what most hosts speak today.
const VERSIONS = ['2025-06-18', '2025-11-25'];

const TOOLS = [
  'cancel_task', 'cleanup_worktrees', 'describe_agent', 'get_events',
  'get_task', 'list_hosts', 'list_tasks', 'resolve_task', 'send_task', 'spawn_task',
  'spawn_tasks', 'wait_tasks',
];

function requiredPath(name) {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} must name a built binary (scripts/ts-client.sh sets it)`);
  }
  return resolve(v);
}

// The SDK's client always asks for its latest version in initialize. This
// transport asks for another one, and records the version the server
// answered with (the client hands it to setProtocolVersion). tamper, when
// set, rewrites messages from the server before the client sees them.
class VersionTransport extends StdioClientTransport {
  constructor(params, version) {
    super(params);
    this.version = version;
    this.negotiated = undefined;
    this.tamper = undefined;
  }

  async send(message, options) {
    if (message.method === 'initialize') {
      message = { ...message, params: { ...message.params, protocolVersion: this.version } };
    }
    return super.send(message, options);
  }

  setProtocolVersion(version) {
    this.negotiated = version;
  }

  set onmessage(handler) {
    this._handler = handler;
  }

  get onmessage() {
    return this._handler && ((m) => this._handler(this.tamper ? this.tamper(m) : m));
  }
}

// A task's script for the fake agent: the prompt text itself.
function script(steps, extra = {}) {
  return JSON.stringify({ steps, ...extra });
}

// One fixture per protocol version: a PATH holding the fake agent as
// codex-acp, a workspace whose fake-agent.json offers the mode the codex
// adapter pins, a marker directory, and a server connected to a client.
async function open(version) {
  const dir = mkdtempSync(join(tmpdir(), 'symm-tsclient-'));
  const bin = join(dir, 'bin');
  const workspace = join(dir, 'ws');
  const notify = join(dir, 'notify');
  for (const d of [bin, workspace, notify]) mkdirSync(d, { mode: 0o700 });
  symlinkSync(fakeAgent, join(bin, 'codex-acp'));
  writeFileSync(join(workspace, 'fake-agent.json'), JSON.stringify({
    agent_info: { name: 'fake-codex', version: '1.2.3' },
    modes: { current: 'read-only', available: [{ id: 'read-only', name: 'Read only' }] },
  }));
  const file = join(dir, 'not-a-dir');
  closeSync(openSync(file, 'w'));

  const transport = new VersionTransport({
    command: server,
    args: ['--log-level', 'warn', '--notify-dir', notify],
    cwd: workspace,
    env: { PATH: bin, HOME: dir, TMPDIR: dir },
    stderr: 'inherit',
  }, version);
  // The client offers elicitation: a task spawned with ask puts its
  // permission questions to it. elicited holds each question; answer
  // decides the reply.
  const client = new Client({ name: 'symm-tsclient', version: '1' }, { capabilities: { elicitation: {} } });
  const f = { dir, workspace, file, transport, client, elicited: [], answer: { action: 'decline' } };
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    f.elicited.push(req.params);
    return f.answer;
  });
  await client.connect(transport);
  return f;
}

// call calls a tool that must succeed: the SDK has validated its
// structuredContent against the tool's outputSchema by the time it
// returns; the text block must be the same JSON.
async function call(client, name, args) {
  assert.ok(client.getToolOutputValidator(name), `${name}: the client holds a validator for its outputSchema`);
  const res = await client.callTool({ name, arguments: args });
  assert.notEqual(res.isError, true, `${name}: ${res.content?.[0]?.text}`);
  assert.ok(res.structuredContent, `${name} returned structuredContent`);
  assert.equal(res.content.length, 1);
  assert.deepEqual(JSON.parse(res.content[0].text), res.structuredContent, `${name}: text and structuredContent agree`);
  return res.structuredContent;
}

// callErr calls a tool that must fail with a tool error, and returns its text.
async function callErr(client, name, args) {
  const res = await client.callTool({ name, arguments: args });
  assert.equal(res.isError, true, `${name} should fail: ${JSON.stringify(res)}`);
  return res.content.map((c) => c.text).join('');
}

// untilSaid waits, woken by the task resource's updates, until the task's
// agent said something: from then on the fake agent only waits, so its
// record holds still and a resource read and a tool call can agree.
async function untilSaid(client, id) {
  const uri = `symm://tasks/${id}`;
  let woken = () => {};
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
    if (n.params.uri === uri) woken();
  });
  try {
    await client.subscribeResource({ uri });
    for (;;) {
      const next = new Promise((resolve) => { woken = resolve; });
      const page = await call(client, 'get_events', { task_id: id });
      if (page.events.some((e) => e.type === 'agent_message')) break;
      await next;
    }
    await client.unsubscribeResource({ uri });
  } finally {
    client.removeNotificationHandler('notifications/resources/updated');
  }
}

// waitTerminal waits with wait_tasks until the task is finished.
async function waitTerminal(client, id) {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    const out = await call(client, 'wait_tasks', { task_ids: [id], timeout_seconds: 30 });
    if (out.reason === 'terminal') {
      assert.deepEqual(out.completed.map((s) => s.task_id), [id]);
      return out.completed[0];
    }
    // needs_decision: a permission question was open (and, to this
    // client, sent as elicitation/create).
    assert.ok(['timeout', 'needs_decision'].includes(out.reason), out.reason);
  }
  assert.fail(`task ${id} did not finish`);
}

for (const version of VERSIONS) {
  describe(`protocol ${version}`, { timeout: 120_000 }, () => {
    let f;
    before(async () => { f = await open(version); });
    after(async () => {
      await f?.client.close();
      if (f) rmSync(f.dir, { recursive: true, force: true });
    });

    test('the SDK speaks this version and the server agreed to it', () => {
      assert.ok(SUPPORTED_PROTOCOL_VERSIONS.includes(version));
      assert.equal(f.transport.negotiated, version);
      assert.equal(f.client.getServerVersion().name, 'symm-mcp');
      assert.deepEqual(Object.keys(f.client.getServerCapabilities()).sort(), ['resources', 'tools']);
      assert.deepEqual(f.client.getServerCapabilities().resources, { subscribe: true });
    });

    test('tools/list passes the SDK\'s own ListToolsResultSchema', async () => {
      // listTools parses with ListToolsResultSchema and throws on any
      // deviation; it also compiles every outputSchema with Ajv for the
      // calls below.
      const res = await f.client.listTools();
      assert.deepEqual(res.tools.map((t) => t.name).sort(), TOOLS);
      // The same check on the list as it came over the wire, to be
      // independent of what listTools does with it.
      const raw = await f.client.request({ method: 'tools/list' }, ListToolsResultSchema);
      assert.deepEqual(raw.tools.map((t) => t.name).sort(), TOOLS);
      for (const tool of res.tools) {
        assert.equal(tool.inputSchema.type, 'object', tool.name);
        assert.equal(tool.outputSchema?.type, 'object', tool.name);
        assert.ok(f.client.getToolOutputValidator(tool.name), `${tool.name}: the client validates its output`);
      }
    });

    test('output validation is on: a reply that breaks the schema is refused', async () => {
      // The validators refuse what the schemas exclude...
      const validate = f.client.getToolOutputValidator('list_tasks');
      const real = await call(f.client, 'list_tasks', {});
      assert.equal(validate(real).valid, true);
      assert.equal(validate({ ...real, tasks: 'none' }).valid, false);
      // ...and callTool applies them: a real reply with its status removed
      // on the way in is an error, not a result.
      f.transport.tamper = (m) => {
        if (m.result?.structuredContent?.tasks) {
          return { ...m, result: { ...m.result, structuredContent: { tasks: [{ task_id: 'x' }] } } };
        }
        return m;
      };
      try {
        await assert.rejects(f.client.callTool({ name: 'list_tasks', arguments: {} }), (err) => {
          assert.ok(err instanceof McpError);
          assert.equal(err.code, ErrorCode.InvalidParams);
          assert.match(err.message, /Structured content does not match the tool's output schema/);
          return true;
        });
      } finally {
        f.transport.tamper = undefined;
      }
    });

    test('describe_agent', async () => {
      const d = await call(f.client, 'describe_agent', { agent: 'codex', workspace: f.workspace });
      assert.equal(d.agent, 'codex');
      assert.equal(d.executable, 'codex-acp');
      assert.equal(d.error, null);
      assert.equal(d.version, '1.2.3');
      assert.deepEqual(d.pins, [{ setting: 'mode', value: 'read-only', available: true }]);
    });

    test('a task from spawn to resolution, its events paged to the end', async () => {
      const prompt = script([
        { message: 'hello from the fake agent' },
        { chunks: { n: 40, text: 'c{i} ', tool_call_every: 2 } },
        { raw_update: { sessionUpdate: 'usage_update', used: 10, size: 100 } },
      ], { usage: { inputTokens: 3, outputTokens: 4, totalTokens: 7 } });
      const spawned = await call(f.client, 'spawn_task', {
        agent: 'codex', prompt, workspace: f.workspace, allow: ['read'],
        initiator_id: 'ts-client', executor_id: 'fake-codex',
      });
      const id = spawned.task_id;
      assert.ok(id);
      assert.ok(spawned.notify_path, 'markers are on');
      assert.deepEqual(spawned.allow, ['read']);

      const done = await waitTerminal(f.client, id);
      assert.equal(done.status, 'succeeded');

      const task = await call(f.client, 'get_task', { task_id: id });
      assert.equal(task.status, 'succeeded');
      assert.equal(task.exit_code, 0);
      assert.equal(task.initiator_id, 'ts-client');
      assert.ok(task.usage, 'the agent reported usage');
      assert.ok(task.session_id);

      // Page with a small limit so that paging takes several calls.
      const events = [];
      let after = 0;
      let pages = 0;
      for (;;) {
        const page = await call(f.client, 'get_events', { task_id: id, after_seq: after, limit: 7 });
        pages++;
        assert.ok(page.events.length <= 7);
        events.push(...page.events);
        assert.ok(page.cursor >= after);
        after = page.cursor;
        assert.equal(page.status, 'succeeded');
        if (!page.has_more) break;
        assert.ok(pages < 1000, 'paging ends');
      }
      assert.ok(pages > 2, `paged in ${pages} calls`);
      assert.deepEqual(events.map((e) => e.seq), events.map((_, i) => i + 1), 'every event once, in order');
      assert.equal(after, events.length, 'the last cursor is the last seq');
      const types = new Set(events.map((e) => e.type));
      for (const t of ['status_changed', 'process_started', 'session_started', 'agent_message', 'tool_call']) {
        assert.ok(types.has(t), `an event of type ${t} (got ${[...types]})`);
      }
      const text = events.filter((e) => e.type === 'agent_message').map((e) => e.text).join('');
      assert.match(text, /hello from the fake agent/);

      // A filtered read still pages to the end of the log.
      const calls = await call(f.client, 'get_events', { task_id: id, event_types: ['tool_call'], limit: 1000 });
      assert.equal(calls.has_more, false);
      assert.equal(calls.cursor, events.length);
      assert.ok(calls.events.length > 0 && calls.events.every((e) => e.type === 'tool_call'));

      const resolved = await call(f.client, 'resolve_task', { task_id: id, resolution: 'accepted', note: 'checked by the TypeScript client' });
      assert.equal(resolved.resolution, 'accepted');
      assert.equal(resolved.resolution_note, 'checked by the TypeScript client');
      const revised = await call(f.client, 'resolve_task', { task_id: id, resolution: 'needs_followup' });
      assert.equal(revised.resolution, 'needs_followup');

      const listed = await call(f.client, 'list_tasks', {});
      assert.ok(listed.tasks.some((s) => s.task_id === id && s.resolution === 'needs_followup'));

      const unchanged = await call(f.client, 'cancel_task', { task_id: id });
      assert.equal(unchanged.status, 'succeeded', 'a finished task is returned unchanged');
    });

    test('cancel_task stops a running task; it cannot be resolved before', async () => {
      const spawned = await call(f.client, 'spawn_task', {
        agent: 'codex', prompt: script([{ message: 'working' }, { wait_for_cancel: true }]), workspace: f.workspace,
      });
      const id = spawned.task_id;
      const pending = await call(f.client, 'wait_tasks', { task_ids: [id], timeout_seconds: 0 });
      assert.equal(pending.reason, 'timeout');
      assert.deepEqual(pending.pending.map((s) => s.task_id), [id]);

      const early = await callErr(f.client, 'resolve_task', { task_id: id, resolution: 'accepted' });
      assert.match(early, /^invalid_transition: /);

      const cancelled = await call(f.client, 'cancel_task', { task_id: id });
      assert.equal(cancelled.status, 'cancelled');
      assert.ok(cancelled.ended_at);
      const done = await waitTerminal(f.client, id);
      assert.equal(done.status, 'cancelled');
      const resolved = await call(f.client, 'resolve_task', { task_id: id, resolution: 'superseded' });
      assert.equal(resolved.resolution, 'superseded');
    });

    test('a permission of an asked kind is put to the person: elicitation answered allow_once', async () => {
      f.elicited.length = 0;
      f.answer = { action: 'accept', content: { decision: 'allow_once' } };
      const prompt = script([{ permission: {
        tool_call_id: 't1', title: 'Edit main.go', kind: 'edit', raw_input: { path: 'main.go' }, report: true,
      } }]);
      const spawned = await call(f.client, 'spawn_task', {
        agent: 'codex', prompt, workspace: f.workspace, ask: ['edit'], ask_timeout_s: 60,
      });
      const done = await waitTerminal(f.client, spawned.task_id);
      assert.equal(done.status, 'succeeded');
      assert.equal(f.elicited.length, 1, 'asked once');
      const q = f.elicited[0];
      assert.match(q.message, /Agent codex \(task [0-9a-f-]+\) asks permission for a edit tool call: Edit main\.go/);
      assert.match(q.message, /"path":"main\.go"/);
      assert.deepEqual(q.requestedSchema.properties.decision.enum, ['allow_once', 'reject_once']);
      assert.deepEqual(q.requestedSchema.required, ['decision']);
      const page = await call(f.client, 'get_events', { task_id: spawned.task_id, event_types: ['permission', 'agent_message'] });
      const perm = page.events.find((e) => e.type === 'permission');
      assert.equal(perm.decision, 'allow_once');
      assert.equal(perm.option_id, 'allow');
      assert.equal(perm.decided_by, 'human');
      const said = page.events.filter((e) => e.type === 'agent_message').map((e) => e.text).join('');
      assert.equal(said, 'permission t1: selected allow');
    });

    test('every error code a caller can meet', async (t) => {
      const cases = [
        ['unknown_agent', 'spawn_task', { agent: 'nope', prompt: 'p' }],
        ['unknown_agent', 'describe_agent', { agent: 'nope' }],
        ['invalid_request', 'spawn_task', { agent: 'codex', prompt: '   ', workspace: f.workspace }],
        ['invalid_request', 'spawn_task', { agent: 'codex', prompt: 'p', workspace: 'relative/dir' }],
        ['invalid_request', 'spawn_task', { agent: 'codex', prompt: 'p', workspace: join(f.dir, 'missing') }],
        ['invalid_request', 'spawn_task', { agent: 'codex', prompt: 'p', workspace: f.file }],
        ['invalid_request', 'spawn_task', { agent: 'cursor', prompt: 'p', effort: 'high' }],
        ['invalid_request', 'describe_agent', { agent: 'codex', workspace: 'relative/dir' }],
        ['invalid_request', 'spawn_task', { agent: 'codex', prompt: 'p', ask: ['edit'], ask_timeout_s: 0 }],
        ['task_not_found', 'get_task', { task_id: 'no-such-task' }],
        ['task_not_found', 'get_events', { task_id: 'no-such-task' }],
        ['task_not_found', 'wait_tasks', { task_ids: ['no-such-task'] }],
        ['task_not_found', 'resolve_task', { task_id: 'no-such-task', resolution: 'accepted' }],
        ['task_not_found', 'cancel_task', { task_id: 'no-such-task' }],
      ];
      for (const [code, tool, args] of cases) {
        await t.test(`${code} from ${tool} ${JSON.stringify(args)}`, async () => {
          const text = await callErr(f.client, tool, args);
          assert.match(text, new RegExp(`^${code}: \\S`));
        });
      }
      // invalid_transition: see the cancel test above.

      // Arguments outside the input schema are refused by the server's
      // SDK, with its text and no symm-mcp code.
      const schemaCases = [
        ['get_task', { task_id: 'x', extra: 1 }],
        ['resolve_task', { task_id: 'x', resolution: 'maybe' }],
        ['spawn_task', { agent: 'codex' }],
        ['get_events', { task_id: 'x', after_seq: -1 }],
        ['wait_tasks', { task_ids: [] }],
      ];
      for (const [tool, args] of schemaCases) {
        await t.test(`schema refusal from ${tool} ${JSON.stringify(args)}`, async () => {
          const text = await callErr(f.client, tool, args);
          assert.match(text, /validating/);
          assert.doesNotMatch(text, /^(unknown_agent|invalid_request|task_not_found|invalid_transition):/);
        });
      }
    });

    test('undeclared capabilities are method-not-found', async () => {
      await assert.rejects(f.client.request({ method: 'prompts/list' }, ListPromptsResultSchema), (err) => {
        assert.ok(err instanceof McpError);
        assert.equal(err.code, ErrorCode.MethodNotFound);
        return true;
      });
    });

    test('a wait with a progress token gets progress every 5 s, saying what the task does', async () => {
      const spawned = await call(f.client, 'spawn_task', {
        agent: 'codex', prompt: script([{ message: 'working' }, { wait_for_cancel: true }]), workspace: f.workspace,
      });
      const id = spawned.task_id;
      const progress = [];
      const started = Date.now();
      // 6 s: one notification at 5 s, and the wait ends before a second.
      const res = await f.client.callTool({ name: 'wait_tasks', arguments: { task_ids: [id], timeout_seconds: 6 } }, undefined, {
        onprogress: (p) => progress.push({ ...p, at: Date.now() - started }),
        resetTimeoutOnProgress: true,
      });
      assert.equal(res.structuredContent.reason, 'timeout');
      assert.equal(progress.length, 1, JSON.stringify(progress));
      assert.equal(progress[0].progress, 5);
      assert.equal(progress[0].total, 6);
      assert.match(progress[0].message, /^0 of 1 finished; codex: (writing|working|starting)$/);
      assert.ok(progress[0].at >= 4900, `the first after 5 s (at ${progress[0].at} ms)`);
      await call(f.client, 'cancel_task', { task_id: id });
    });

    test('task resources: listed, read as the tools return them, subscribed to', async () => {
      const spawned = await call(f.client, 'spawn_task', {
        agent: 'codex', prompt: script([{ message: 'working' }, { wait_for_cancel: true }]), workspace: f.workspace,
      });
      const id = spawned.task_id;
      const uri = `symm://tasks/${id}`;
      await untilSaid(f.client, id);

      const listed = await f.client.listResources();
      assert.equal(listed.resources[0].uri, uri, 'live tasks come first');
      assert.equal(listed.resources[0].mimeType, 'application/json');
      const raw = await f.client.request({ method: 'resources/list' }, ListResourcesResultSchema);
      assert.ok(raw.resources.some((r) => r.uri === uri));
      const templates = await f.client.listResourceTemplates();
      assert.deepEqual(templates.resourceTemplates.map((t) => t.uriTemplate),
        ['symm://tasks/{task_id}', 'symm://tasks/{task_id}/events{?after_seq,limit}']);

      const record = await f.client.readResource({ uri });
      assert.equal(record.contents[0].mimeType, 'application/json');
      assert.deepEqual(JSON.parse(record.contents[0].text), await call(f.client, 'get_task', { task_id: id }));
      const page = await f.client.readResource({ uri: `${uri}/events?after_seq=1&limit=2` });
      assert.deepEqual(JSON.parse(page.contents[0].text),
        await call(f.client, 'get_events', { task_id: id, after_seq: 1, limit: 2 }));
      await assert.rejects(f.client.readResource({ uri: 'symm://tasks/no-such-task' }), (err) => {
        assert.ok(err instanceof McpError);
        assert.equal(err.code, ErrorCode.InvalidParams);
        return true;
      });
      await assert.rejects(f.client.readResource({ uri: `${uri}/events?limit=zero` }), (err) => {
        assert.ok(err instanceof McpError);
        assert.equal(err.code, ErrorCode.InvalidParams);
        assert.match(err.message, /limit must be a whole number/);
        return true;
      });

      const updates = [];
      let told;
      const updated = new Promise((resolve) => { told = resolve; });
      f.client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
        updates.push(n.params.uri);
        told();
      });
      try {
        await f.client.subscribeResource({ uri });
        await call(f.client, 'cancel_task', { task_id: id });
        await updated;
        assert.equal(updates[0], uri);
        const after = JSON.parse((await f.client.readResource({ uri })).contents[0].text);
        assert.equal(after.status, 'cancelled');
        await f.client.unsubscribeResource({ uri });
      } finally {
        f.client.removeNotificationHandler('notifications/resources/updated');
      }
    });
  });
}
