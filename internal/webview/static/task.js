// A task's page: its record, its worktree diff, and its events as a
// timeline that follows the task live. The task is the URL's: /tasks/<id>.
import { el, clippedText, preview, age, duration, usageText, costText, badge, healthBadge, sandboxBadge, getSession, act, wireLogout, showVersion, openStream, TERMINAL } from './common.js';

const id = decodeURIComponent(location.pathname.slice('/tasks/'.length));
const timeline = document.getElementById('timeline');
const follow = document.getElementById('follow');
const evCount = document.getElementById('ev-count');
const hiddenNote = document.getElementById('hidden-note');
// The timeline keeps at most this many entries in the page; the oldest go.
const MAX_ENTRIES = 3000;
let lastSeq = 0;
let events = 0;
let dropped = 0;
let record = null;
let last = null; // the last entry, to extend with more text or stderr
const tools = new Map(); // tool_call_id -> card

function when(ev) {
  return el('time', { class: 'when', text: (ev.time || '').slice(11, 19), title: ev.time });
}

// entry appends a timeline entry: its time, its kind, and a body of kids.
function entry(ev, cls, label, ...kids) {
  const li = el('li', { class: `ev ${cls}`, data: { seq: String(ev.seq), type: ev.type } }, when(ev),
    el('span', { class: 'kind', text: label }), el('div', { class: 'body' }, ...kids));
  timeline.append(li);
  while (timeline.childElementCount > MAX_ENTRIES) {
    timeline.firstElementChild.remove();
    dropped++;
  }
  return li;
}

function textEntry(ev, kind) {
  if (last && last.kind === kind && last.node.isConnected && last.size < 4 * 1024 * 1024) {
    last.size += (ev.text ?? '').length;
    last.parts.push(ev.text ?? '');
    const full = last.parts.join('');
    last.body.replaceWith(last.body = clippedText('div', 'text', full));
    return;
  }
  const label = kind === 'agent_thought' ? 'thought' : 'message';
  const body = clippedText('div', 'text', ev.text ?? '');
  const li = entry(ev, kind === 'agent_thought' ? 'thought' : 'message', label, body);
  last = { kind, node: li, body, parts: [ev.text ?? ''], size: (ev.text ?? '').length };
}

function stderrEntry(ev) {
  if (last && last.kind === 'stderr' && last.node.isConnected) {
    last.lines.append(clippedText('div', 'line', ev.text ?? ''));
    last.n++;
    last.summary.textContent = `stderr (${last.n} lines)`;
    return;
  }
  const summary = el('summary', { text: 'stderr (1 line)' });
  const lines = el('div', { class: 'lines' }, clippedText('div', 'line', ev.text ?? ''));
  const li = entry(ev, 'stderr', 'stderr', el('details', {}, summary, lines));
  last = { kind: 'stderr', node: li, summary, lines, n: 1 };
}

function toolCard(ev) {
  const card = { title: el('span', { class: 'tool-title' }), kind: el('span', { class: 'tool-kind' }), status: el('span', { class: 'tool-status' }), input: el('div', { class: 'io' }), output: el('div', { class: 'io' }) };
  card.node = entry(ev, 'tool', 'tool',
    el('div', { class: 'tool-head' }, card.kind, card.title, card.status), card.input, card.output);
  tools.set(ev.tool_call_id, card);
  return card;
}

function toolEvent(ev) {
  let card = tools.get(ev.tool_call_id);
  if (!card || !card.node.isConnected) card = toolCard(ev);
  if (ev.title != null) card.title.textContent = ev.title;
  if (ev.kind != null) card.kind.textContent = ev.kind;
  if (ev.status != null) {
    card.status.textContent = ev.status;
    card.status.className = `tool-status t-${String(ev.status).replace(/[^a-z_]/g, '')}`;
  }
  if (ev.raw_input !== undefined) card.input.replaceChildren(el('span', { class: 'sub', text: 'input' }), preview(ev.raw_input));
  if (ev.raw_output !== undefined) card.output.replaceChildren(el('span', { class: 'sub', text: 'output' }), preview(ev.raw_output));
}

function planEntry(ev) {
  const ol = el('ol', { class: 'plan' });
  for (const p of Array.isArray(ev.entries) ? ev.entries : []) {
    ol.append(el('li', { class: `p-${String(p.status ?? '').replace(/[^a-z_]/g, '')}` },
      el('span', { class: 'sub', text: `${p.status ?? ''} ` }), el('span', { text: p.content ?? '' })));
  }
  entry(ev, 'plan-ev', 'plan', ol);
}

function permissionEntry(ev) {
  const who = ev.decided_by ? ` by ${ev.decided_by}${ev.via ? ` via ${ev.via}` : ''}` : '';
  entry(ev, `permission d-${String(ev.decision ?? '').replace(/[^a-z_]/g, '')}`, 'permission',
    el('div', {}, el('span', { class: 'tool-kind', text: ev.kind ?? '' }), el('span', { text: ` ${ev.title ?? ev.tool_call_id ?? ''} → ` }),
      el('strong', { text: ev.decision ?? '' }), el('span', { class: 'sub', text: `${ev.option_id ? ` (${ev.option_id})` : ''}${who}` })));
}

function generic(ev, label, text, cls = 'meta-ev') {
  entry(ev, cls, label, clippedText('div', 'text', text));
}

function addEvent(ev) {
  if (typeof ev.seq !== 'number' || ev.seq <= lastSeq) return;
  lastSeq = ev.seq;
  events++;
  const keep = ev.type === 'agent_message' || ev.type === 'agent_thought' || ev.type === 'stderr';
  if (!keep) last = null;
  switch (ev.type) {
    case 'agent_message':
    case 'agent_thought':
      textEntry(ev, ev.type); break;
    case 'stderr':
      stderrEntry(ev); break;
    case 'tool_call':
    case 'tool_call_update':
      toolEvent(ev); break;
    case 'plan':
      planEntry(ev); break;
    case 'permission':
      permissionEntry(ev); break;
    case 'status_changed':
      entry(ev, 'status', 'status', badge(ev.from ?? ''), ' → ', badge(ev.to ?? '')); break;
    case 'agent_update':
      generic(ev, 'update', `${ev.update_type ?? ''}: ${JSON.stringify(ev.data ?? null)}`); break;
    case 'session_started':
      generic(ev, 'session', `${ev.resumed ? `resumed (${ev.resumed_by ?? ''})` : 'new'}: ${ev.session_id ?? ''}`); break;
    case 'error':
      generic(ev, 'error', ev.message ?? '', 'error-ev'); break;
    case 'process_started':
      generic(ev, 'process', `started pid ${ev.pid}: ${(ev.argv || []).join(' ')}`); break;
    case 'process_exited':
      generic(ev, 'process', `exited${ev.exit_code != null ? ` with code ${ev.exit_code}` : ''}${ev.signal ? ` on ${ev.signal}` : ''}${ev.stop_reason ? `, stop reason ${ev.stop_reason}` : ''}`); break;
    case 'stalled':
      generic(ev, 'health', `stalled: no ACP update since ${ev.last_update_at ?? '-'}, no CPU time since ${ev.last_cpu_at ?? '-'} (threshold ${ev.stall_after_s ?? '-'} s); nothing was stopped`, 'meta-ev stalled-ev'); break;
    case 'task_cancelled':
      generic(ev, 'cancel', `cancel requested (${ev.source ?? ''})`); break;
    case 'task_resolved':
      generic(ev, 'resolved', `${ev.resolution ?? ''}${ev.note ? `: ${ev.note}` : ''}`); break;
    case 'usage':
      generic(ev, 'usage', usageText(ev) || JSON.stringify(ev)); break;
    default: {
      const { seq, type, time, ...rest } = ev;
      generic(ev, type, Object.keys(rest).length ? JSON.stringify(rest) : '');
    }
  }
}

function meta(k, v) {
  if (v === null || v === undefined || v === '') return [];
  const dd = el('dd');
  if (v instanceof Node) dd.append(v); else dd.append(clippedText('span', 'val', v));
  return [el('dt', { text: k }), dd];
}

// sandboxMeta is what confined the task (the record's sandbox): its mode
// and badge, the Landlock ABI, the TCP ports and the writable directories;
// "unconfined" when the agent ran without one.
function sandboxMeta(sb) {
  const span = el('span', {}, sandboxBadge(sb?.mode));
  if (sb) {
    span.append(` Landlock ABI ${sb.abi}; TCP ${(sb.tcp_ports || []).join(', ') || 'none'}; writes ${(sb.writable || []).join(', ') || 'nothing'}`);
  }
  return span;
}

function renderRecord(t) {
  record = t;
  document.title = `symm-mcp · ${t.title || t.task_id}`;
  document.getElementById('title').textContent = t.title || t.task_id;
  const now = Date.now();
  document.getElementById('meta').replaceChildren(
    ...meta('status', badge(t.status)),
    ...meta('health', t.health ? el('span', {}, healthBadge(t), el('span', { class: 'sub', text: ` last update ${t.last_update_at ?? '-'}, last CPU ${t.last_cpu_at ?? '-'}` })) : ''),
    ...meta('task', t.task_id),
    ...meta('agent', t.agent),
    ...meta('initiator', t.initiator_id),
    ...meta('executor', t.executor_id),
    ...meta('workspace', t.workspace),
    ...meta('sandbox', sandboxMeta(t.sandbox)),
    ...meta('created', `${t.created_at} (${age(t.created_at, now)} ago)`),
    ...meta('ran', t.started_at ? duration(t.started_at, t.ended_at || new Date(now).toISOString()) : ''),
    ...meta('usage', usageText(t.usage)),
    ...meta('cost', costText(t.usage)),
    ...meta('resolution', t.resolution === 'unresolved' ? '' : t.resolution),
    ...meta('note', t.resolution_note),
    ...meta('error', t.error),
    ...meta('last message', t.digest?.last_message?.text),
  );
  const prompt = document.getElementById('prompt');
  prompt.replaceWith(Object.assign(clippedText('pre', 'text', t.prompt ?? ''), { id: 'prompt' }));
  renderDiff(t);
  renderActions(t);
}

function renderDiff(t) {
  const box = document.getElementById('diff');
  const d = t.diff;
  box.hidden = !d;
  if (!d) return;
  const tbody = el('tbody');
  for (const f of d.files || []) {
    tbody.append(el('tr', {}, el('td', { text: f.status }), el('td', { class: 'path', text: f.old_path ? `${f.old_path} → ${f.path}` : f.path }),
      el('td', { class: 'ins', text: f.binary ? 'binary' : `+${f.insertions}` }), el('td', { class: 'del', text: f.binary ? '' : `-${f.deletions}` })));
  }
  const kids = [el('p', {}, `base ${String(d.base_commit).slice(0, 12)}: ${(d.files || []).length} files, `, el('span', { class: 'ins', text: `+${d.insertions}` }), ' ', el('span', { class: 'del', text: `-${d.deletions}` }), d.truncated ? ' (truncated)' : ''),
    el('table', { class: 'files' }, tbody)];
  for (const o of t.overlaps || []) {
    kids.push(el('p', { class: 'sub' }, 'overlaps ', el('a', { text: o.task_id }), `: ${(o.files || []).join(', ')}`));
    kids[kids.length - 1].querySelector('a').href = '/tasks/' + encodeURIComponent(o.task_id);
  }
  document.getElementById('diff-body').replaceChildren(...kids);
}

const dialog = document.getElementById('confirm');
function confirmStep(text) {
  document.getElementById('confirm-text').textContent = text;
  dialog.returnValue = '';
  dialog.showModal();
  return new Promise((resolve) => dialog.addEventListener('close', () => resolve(dialog.returnValue === 'yes'), { once: true }));
}

let actionsOn = false;
let actionsMode = '';
// renderActions offers cancel while the task runs, a resolution once it
// ended; a record that changes within one of those leaves the form as the
// person filled it.
function renderActions(t) {
  const box = document.getElementById('actions');
  box.hidden = !actionsOn;
  if (!actionsOn) return;
  const mode = TERMINAL.has(t.status) ? 'resolve' : 'cancel';
  if (mode === actionsMode) return;
  actionsMode = mode;
  const msg = el('span', { class: 'sub', id: 'action-msg' });
  if (!TERMINAL.has(t.status)) {
    const b = el('button', { text: 'Cancel task', class: 'danger' });
    b.id = 'cancel';
    b.type = 'button';
    b.addEventListener('click', async () => {
      if (!(await confirmStep(`Cancel task ${t.task_id}? Its agent is stopped.`))) return;
      b.disabled = true;
      msg.textContent = 'cancelling…';
      try { await act(`/api/tasks/${encodeURIComponent(t.task_id)}/cancel`); msg.textContent = 'cancelled'; } catch (e) { msg.textContent = e.message; b.disabled = false; }
    });
    box.replaceChildren(b, msg);
    return;
  }
  const sel = el('select');
  sel.id = 'resolution';
  for (const r of ['accepted', 'rejected', 'needs_followup', 'superseded']) {
    const o = el('option', { text: r });
    o.value = r;
    sel.append(o);
  }
  const note = el('input');
  note.id = 'note';
  note.placeholder = 'note (optional)';
  note.maxLength = 65536;
  const b = el('button', { text: 'Resolve' });
  b.id = 'resolve';
  b.type = 'button';
  b.addEventListener('click', async () => {
    if (!(await confirmStep(`Record ${sel.value} for task ${t.task_id}?`))) return;
    b.disabled = true;
    try { await act(`/api/tasks/${encodeURIComponent(t.task_id)}/resolve`, { resolution: sel.value, note: note.value }); msg.textContent = 'recorded'; } catch (e) { msg.textContent = e.message; }
    b.disabled = false;
  });
  box.replaceChildren(sel, note, b, msg);
}

// renderDecisions shows the permission questions open on the task: what
// the agent asks to do, and, with actions on, allow once and reject once,
// each behind a confirmation. The first answer wins: one given at the MCP
// client first takes the question off this list (the stream says so), and
// an answer that comes too late is refused (409) and said so.
const decideMsg = document.getElementById('decide-msg');
function renderDecisions(ds) {
  const box = document.getElementById('decisions');
  box.hidden = ds.length === 0;
  document.body.dataset.decisions = String(ds.length);
  const items = ds.map((d) => {
    const li = el('li', { class: 'decision', data: { key: d.key } },
      el('div', { class: 'tool-head' }, el('span', { class: 'tool-kind', text: d.kind || 'other' }), el('span', { class: 'tool-title', text: d.title || d.tool_call_id })),
      d.raw_input ? clippedText('pre', 'raw', d.raw_input) : null);
    if (!actionsOn) {
      li.append(el('p', { class: 'sub', text: 'Answer it at the MCP client (the daemon serves no actions here without --dashboard-actions).' }));
      return li;
    }
    const row = el('div', { class: 'actions' });
    for (const [decision, label, cls] of [['allow_once', 'Allow once', ''], ['reject_once', 'Reject once', 'danger']]) {
      const b = el('button', { text: label, class: cls || undefined, data: { decision } });
      b.type = 'button';
      b.addEventListener('click', async () => {
        if (!(await confirmStep(`${label}: ${d.kind || 'other'} tool call "${d.title || d.tool_call_id}" of task ${id}?`))) return;
        for (const x of row.querySelectorAll('button')) x.disabled = true;
        decideMsg.textContent = 'sending…';
        try {
          await act(`/api/tasks/${encodeURIComponent(id)}/decide`, { key: d.key, decision });
          decideMsg.textContent = `${label.toLowerCase()}: recorded`;
        } catch (e) {
          decideMsg.textContent = e.status === 409 ? 'Already decided elsewhere: this question is no longer open.' : e.message;
          for (const x of row.querySelectorAll('button')) x.disabled = false;
        }
      });
      row.append(b);
    }
    li.append(row);
    return li;
  });
  document.getElementById('decision-list').replaceChildren(...items);
}

// Events are added to the page once per frame, at most PER_FRAME a frame,
// so that one layout (and one scroll) covers many and the page answers
// during a flood; of a backlog longer than the page keeps, only the newest
// MAX_ENTRIES are drawn (the others would be dropped at once).
const PER_FRAME = 300;
let backlog = [];
function drain() {
  const t0 = performance.now();
  if (backlog.length > MAX_ENTRIES) {
    const skip = backlog.length - MAX_ENTRIES;
    for (const ev of backlog.slice(0, skip)) {
      if (typeof ev.seq === 'number' && ev.seq > lastSeq) { lastSeq = ev.seq; events++; dropped++; }
    }
    backlog = backlog.slice(skip);
    last = null;
  }
  for (const ev of backlog.splice(0, PER_FRAME)) addEvent(ev);
  evCount.textContent = `${events} events`;
  hiddenNote.hidden = dropped === 0;
  hiddenNote.textContent = `${dropped} earlier events are not shown.`;
  document.body.dataset.lastSeq = String(lastSeq);
  scrollIfFollowing();
  performance.measure('symm:drain', { start: t0, detail: lastSeq });
  if (backlog.length) requestAnimationFrame(drain);
}

function scrollIfFollowing() {
  if (follow.checked) window.scrollTo(0, document.documentElement.scrollHeight);
}

async function main() {
  wireLogout();
  showVersion();
  try { actionsOn = (await getSession()).actions; } catch { return; }
  openStream('/api/stream/tasks/' + encodeURIComponent(id), {
    task: (data) => { renderRecord(JSON.parse(data)); document.body.dataset.status = record.status; },
    decisions: (data) => renderDecisions(JSON.parse(data)),
    events: (data) => {
      const idle = backlog.length === 0;
      const page = JSON.parse(data);
      for (const ev of page) backlog.push(ev);
      // What the stream has delivered, drawn or not, and when (make bench).
      if (page.length) {
        document.body.dataset.streamSeq = String(page[page.length - 1].seq);
        performance.mark('symm:events-page', { detail: page[page.length - 1].seq });
      }
      if (idle) requestAnimationFrame(drain);
    },
  }, document.getElementById('conn'), () => {
    // A stream refused before any record came: no such task here.
    if (!record) {
      document.getElementById('title').textContent = `No task ${id} in this daemon's ledger.`;
      document.body.dataset.status = 'missing';
    }
  });
}
main();
