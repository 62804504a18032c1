// The list page: every task the stream sends, newest first, grouped by
// initiator, filtered by status and agent (the filters live in the URL).
import { el, taskLink, age, usageText, costText, badge, healthBadge, sandboxBadge, wireLogout, showVersion, openStream, TERMINAL, getJSON, getSession, act } from './common.js';

const rows = new Map(); // task id -> row
let waiting = {}; // task id -> permission questions open on it
const groupsEl = document.getElementById('groups');
const emptyEl = document.getElementById('empty');
const countEl = document.getElementById('count');
const fStatus = document.getElementById('f-status');
const fAgent = document.getElementById('f-agent');
const params = new URLSearchParams(location.search);

function syncOptions(select, values) {
  const want = params.get(select.name) || '';
  const have = new Set([...select.options].map((o) => o.value));
  for (const v of [...values, want].filter(Boolean).sort()) {
    if (have.has(v)) continue;
    have.add(v);
    const o = el('option', { text: v });
    o.value = v;
    select.append(o);
  }
  select.value = want;
}

function rowEl(r, now) {
  const tr = el('tr', { data: { task: r.task_id, status: r.status } });
  const name = r.title || r.task_id;
  tr.append(
    el('td', { class: 'name' }, taskLink(r.task_id, name), r.title ? el('div', { class: 'sub', text: r.task_id }) : null),
    el('td', {}, r.agent, sandboxBadge(r.sandbox_mode)),
    el('td', {}, badge(r.status), r.health === 'stalled' ? healthBadge(r) : null, waiting[r.task_id] ? el('span', { class: 'badge waiting', text: 'decision', title: 'waits for a permission decision: open the task' }) : null),
    el('td', { class: 'res', text: r.resolution === 'unresolved' ? '' : r.resolution }),
    el('td', { class: 'age', text: age(r.created_at, now), title: r.created_at }),
    el('td', { class: 'usage', text: usageText(r.usage) }),
    el('td', { class: 'cost', text: costText(r.usage) }),
  );
  const last = el('td', { class: 'last' });
  if (r.last_message) {
    last.append(el('span', { text: r.last_message.text }));
    if (r.last_message.truncated) last.append(el('span', { class: 'sub', text: ` (${Number(r.last_message.length).toLocaleString()} chars)` }));
  } else if (r.error) {
    last.append(el('span', { class: 'error', text: r.error }));
  }
  tr.append(last);
  return tr;
}

const CHUNK = 50;
const COLUMNS = [['task', 'c-task'], ['agent', 'c-agent'], ['status', 'c-status'], ['resolution', 'c-res'], ['age', 'c-age'], ['usage', 'c-usage'], ['cost', 'c-cost'], ['last message', 'c-last']];

function render() {
  pending = false;
  const t0 = performance.now();
  const now = Date.now();
  const status = params.get('status') || '';
  const agent = params.get('agent') || '';
  const all = [...rows.values()];
  syncOptions(fStatus, new Set(all.map((r) => r.status)));
  syncOptions(fAgent, new Set(all.map((r) => r.agent)));
  const shown = all.filter((r) => (!status || r.status === status) && (!agent || r.agent === agent));
  shown.sort((a, b) => (a.created_at < b.created_at ? 1 : a.created_at > b.created_at ? -1 : (a.task_id < b.task_id ? 1 : -1)));
  const groups = new Map();
  for (const r of shown) {
    const g = r.initiator_id ?? '';
    if (!groups.has(g)) groups.set(g, []);
    groups.get(g).push(r);
  }
  const frag = document.createDocumentFragment();
  for (const [initiator, list] of groups) {
    const live = list.filter((r) => !TERMINAL.has(r.status)).length;
    const asking = list.filter((r) => waiting[r.task_id]).length;
    const section = el('section', { class: 'group', data: { initiator } },
      el('h2', {}, el('span', { text: initiator || '(no initiator)' }), el('span', { class: 'count', text: ` ${list.length} task${list.length === 1 ? '' : 's'}${live ? `, ${live} live` : ''}${asking ? `, ${asking} waiting for a decision` : ''}` })));
    // Tables of CHUNK rows, each laid out only once scrolled near
    // (content-visibility), so that a thousand rows paint as fast as a few.
    for (let i = 0; i < list.length; i += CHUNK) {
      const tbody = el('tbody');
      for (const r of list.slice(i, i + CHUNK)) tbody.append(rowEl(r, now));
      const cols = el('colgroup', {}, ...COLUMNS.map(([, cls]) => el('col', { class: cls })));
      const head = i === 0 ? el('thead', {}, el('tr', {}, ...COLUMNS.map(([h]) => el('th', { text: h })))) : null;
      section.append(el('div', { class: 'chunk' }, el('table', { class: 'tasks' }, cols, head, tbody)));
    }
    frag.append(section);
  }
  groupsEl.replaceChildren(frag);
  emptyEl.hidden = shown.length > 0;
  emptyEl.textContent = all.length ? 'No task matches the filters.' : 'No tasks yet.';
  countEl.textContent = `${shown.length} of ${all.length}`;
  if (!document.body.dataset.ready) {
    performance.measure('symm:list-render', { start: t0 });
    // The first list is on screen at the next frame: a mark for make bench.
    requestAnimationFrame(() => performance.mark('symm:list-painted'));
  }
  document.body.dataset.ready = 'true';
}

let pending = false;
let synced = false;
function schedule() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(render);
}

for (const s of [fStatus, fAgent]) {
  s.addEventListener('change', () => {
    if (s.value) params.set(s.name, s.value); else params.delete(s.name);
    const q = params.toString();
    history.replaceState(null, '', q ? `/?${q}` : '/');
    schedule();
  });
}

openStream('/api/stream/tasks', {
  reset: () => { rows.clear(); },
  task: (data) => {
    const r = JSON.parse(data);
    rows.set(r.task_id, r);
  },
  waiting: (data) => { waiting = JSON.parse(data); },
  sync: () => {
    if (!synced) performance.mark('symm:list-synced');
    synced = true;
    schedule();
  },
}, document.getElementById('conn'));
setInterval(schedule, 30000); // ages move on

// The daemon's routines (intent 0054): each with its schedule, next run
// and last run; with actions on, run now, pause and resume. Read on load,
// after an action and with the ages; a routine's runs show in the list as
// tasks of initiator routine:<name>.
const routinesEl = document.getElementById('routines');
const routineRows = document.getElementById('routine-rows');
const routineError = document.getElementById('routine-error');

function routineRow(r, actionsOn) {
  const last = r.runs && r.runs[0];
  let lastCell = el('span', { class: 'sub', text: 'none yet' });
  if (last && last.task_id) lastCell = el('span', {}, badge(last.status), ' ', taskLink(last.task_id, last.task_id));
  else if (last) lastCell = el('span', { text: last.status, title: last.error || '' });
  const tr = el('tr', { data: { routine: r.name } });
  tr.append(
    el('td', { class: 'name', text: r.name }),
    el('td', { text: r.paused ? `${r.schedule} (paused)` : r.schedule }),
    el('td', { text: r.next_run ? new Date(r.next_run).toLocaleString() : '—', title: r.next_run || '' }),
    el('td', {}, lastCell),
  );
  const cell = el('td', { class: 'actions' });
  if (actionsOn) {
    const button = (label, verb) => {
      const b = el('button', { text: label, data: { verb } });
      b.type = 'button';
      b.addEventListener('click', async () => {
        b.disabled = true;
        routineError.hidden = true;
        try {
          await act(`/api/routines/${encodeURIComponent(r.name)}/${verb}`);
        } catch (e) {
          routineError.textContent = `${r.name}: ${e.message}`;
          routineError.hidden = false;
        }
        await loadRoutines();
      });
      return b;
    };
    cell.append(button('Run now', 'run'), r.paused ? button('Resume', 'resume') : button('Pause', 'pause'));
  }
  tr.append(cell);
  return tr;
}

async function loadRoutines() {
  let data;
  let actionsOn = false;
  try {
    data = await getJSON('/api/routines');
    actionsOn = (await getSession()).actions;
  } catch { return; }
  const list = data.routines || [];
  routinesEl.hidden = list.length === 0;
  routineRows.replaceChildren(...list.map((r) => routineRow(r, actionsOn)));
}
loadRoutines();
setInterval(loadRoutines, 30000);
wireLogout();
showVersion();
