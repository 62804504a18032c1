// Shared helpers of the live view's pages. Every string that comes from a
// task (the agents write arbitrary text) reaches the page only as text:
// el() sets textContent and never parses markup, and no link is ever made
// from an agent's string.

// el builds an element: props are a class, text, title or dataset; kids
// are nodes or strings (as text).
export function el(tag, props = {}, ...kids) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null) continue;
    if (k === 'class') n.className = v;
    else if (k === 'text') n.textContent = String(v);
    else if (k === 'title') n.title = String(v);
    else if (k === 'id') n.id = String(v);
    else if (k === 'data') Object.assign(n.dataset, v);
    else if (k === 'hidden') n.hidden = Boolean(v);
    else throw new Error(`el: unknown prop ${k}`);
  }
  for (const kid of kids) {
    if (kid === undefined || kid === null || kid === false) continue;
    n.append(typeof kid === 'string' ? document.createTextNode(kid) : kid);
  }
  return n;
}

// taskLink links to a task's page; the id is percent-encoded into a path
// of our own, so no id can make it anything but a link to /tasks/.
export function taskLink(id, text) {
  const a = el('a', { text });
  a.href = '/tasks/' + encodeURIComponent(id);
  return a;
}

// Long text is shown clipped, with a button that shows the rest.
export const CLIP = 4000;

export function clippedText(tag, cls, text) {
  const s = String(text ?? '');
  const n = el(tag, { class: cls });
  if (s.length <= CLIP) {
    n.textContent = s;
    return n;
  }
  n.textContent = s.slice(0, CLIP);
  const more = el('button', { class: 'more', text: `show all ${s.length.toLocaleString()} characters` });
  more.type = 'button';
  more.addEventListener('click', () => {
    n.textContent = hardWrap(s);
    more.remove();
  });
  return el('div', { class: 'clipped' }, n, more);
}

// hardWrap cuts lines longer than LONG characters into pieces of PIECE
// for display: a browser lays out a line of a million characters that may
// break anywhere for tens of seconds, and pieces that fit the width at
// once.
const LONG = 1000;
const PIECE = 100;
export function hardWrap(s) {
  return s.replace(new RegExp(`[^\\n]{${LONG + 1},}`, 'g'), (line) => line.replace(new RegExp(`.{${PIECE}}(?=.)`, 'gs'), '$&\n'));
}

// preview shows a JSON value (a raw input or output): compact, clipped.
export function preview(v) {
  if (v === undefined || v === null) return null;
  let s;
  if (typeof v === 'object' && v.truncated === true && typeof v.preview === 'string') {
    s = `${v.preview}… (${Number(v.length).toLocaleString()} bytes in all)`;
  } else {
    s = typeof v === 'string' ? v : JSON.stringify(v, null, 1);
  }
  return clippedText('pre', 'raw', s);
}

export function age(iso, now = Date.now()) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '';
  let s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 60) return `${s}s`;
  let m = Math.floor(s / 60);
  if (m < 60) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d`;
}

export function duration(fromIso, toIso) {
  const a = Date.parse(fromIso), b = Date.parse(toIso);
  if (Number.isNaN(a) || Number.isNaN(b)) return '';
  return age(new Date(a).toISOString(), b);
}

export function usageText(u) {
  if (!u) return '';
  const parts = [];
  if (u.total_tokens != null) parts.push(`${Number(u.total_tokens).toLocaleString()} tok`);
  else if (u.input_tokens != null || u.output_tokens != null) {
    parts.push(`${Number(u.input_tokens ?? 0).toLocaleString()} in / ${Number(u.output_tokens ?? 0).toLocaleString()} out`);
  }
  if (u.context && u.context.size) parts.push(`ctx ${Math.round(100 * u.context.used / u.context.size)}%`);
  return parts.join(' · ');
}

export function costText(u) {
  if (!u || !u.cost) return '';
  const amount = Number(u.cost.amount);
  return `${amount.toFixed(amount < 1 ? 4 : 2)} ${String(u.cost.currency ?? '')}`.trim();
}

export const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);

export function badge(status) {
  return el('span', { class: `badge s-${String(status).replace(/[^a-z_]/g, '')}`, text: status });
}

// healthBadge shows a live task's health (active, waiting or stalled)
// with its evidence in the title; nothing for a task without one.
export function healthBadge(t) {
  if (!t.health) return null;
  return el('span', {
    class: `badge health h-${String(t.health).replace(/[^a-z_]/g, '')}`, text: t.health,
    title: `last ACP update ${t.last_update_at ?? '-'}; CPU time of its process group last advanced ${t.last_cpu_at ?? '-'}`,
  });
}

// sandboxBadge is a task's sandbox mode as the record names it
// (sandbox_mode: read-only or workspace); a task whose agent ran
// unconfined has none and shows "unconfined".
export function sandboxBadge(mode) {
  const m = mode || 'off';
  return el('span', {
    class: `badge sandbox sb-${m.replace(/[^a-z-]/g, '')}`, data: { sandbox: m },
    text: mode ? `sandbox ${mode}` : 'unconfined',
    title: mode ? `the kernel confines this task's processes (sandbox ${mode})` : 'the agent ran without a sandbox',
  });
}

// The session's key: the login put it in this origin's sessionStorage,
// and every /api request and stream carries it in KEY_HEADER (a cookie
// alone opens nothing). A tab opened afresh has none: it asks the view's
// other tabs (a BroadcastChannel, of this origin only) and, when none
// answers, logs in again.
export const KEY_STORE = 'symm-key';
const KEY_HEADER = 'X-Symm-Key';
const keys = new BroadcastChannel('symm-key');
keys.addEventListener('message', (e) => {
  const k = sessionStorage.getItem(KEY_STORE);
  if (e.data === 'ask' && k) keys.postMessage({ key: k });
});

function toLogin() {
  sessionStorage.removeItem(KEY_STORE);
  location.assign('/login?next=' + encodeURIComponent(location.pathname));
}

let keyAsked = null;
function sessionKey() {
  const k = sessionStorage.getItem(KEY_STORE);
  if (k) return Promise.resolve(k);
  keyAsked ??= new Promise((resolve) => {
    const timer = setTimeout(() => { toLogin(); resolve(null); }, 500);
    keys.addEventListener('message', (e) => {
      if (!e.data?.key || sessionStorage.getItem(KEY_STORE)) return;
      clearTimeout(timer);
      sessionStorage.setItem(KEY_STORE, e.data.key);
      resolve(e.data.key);
    });
    keys.postMessage('ask');
  });
  return keyAsked;
}

// api fetches an /api path with the session's key; a refusal of the
// session (401) goes to the login.
async function api(path, init = {}) {
  const key = await sessionKey();
  if (!key) throw new Error('no session');
  const r = await fetch(path, { credentials: 'same-origin', cache: 'no-store', ...init, headers: { ...init.headers, [KEY_HEADER]: key } });
  if (r.status === 401) {
    toLogin();
    throw new Error('no session');
  }
  return r;
}

let session = null;

// getJSON reads an /api path's JSON; an answer not 2xx throws.
export async function getJSON(path) {
  const r = await api(path);
  if (!r.ok) throw Object.assign(new Error(`HTTP ${r.status}`), { status: r.status });
  return r.json();
}

// getSession reads the page's CSRF token and whether actions are on; a
// page whose session ended goes to the login.
export async function getSession() {
  if (session) return session;
  session = await (await api('/api/session')).json();
  return session;
}

// act posts an action with the session's CSRF token; a refusal throws an
// Error whose status is the answer's.
export async function act(path, body) {
  const s = await getSession();
  const r = await api(path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': s.csrf },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await r.json().catch(() => ({}));
  if (!r.ok) throw Object.assign(new Error(data.error || `HTTP ${r.status}`), { status: r.status });
  return data;
}

// showVersion puts the daemon's version (as `symm-mcp --version` prints
// it) into the header's #version.
export async function showVersion() {
  try {
    document.getElementById('version').textContent = (await getSession()).version || '';
  } catch { /* the session's end shows elsewhere */ }
}

export function wireLogout() {
  document.getElementById('logout').addEventListener('click', async () => {
    try { await act('/api/logout'); } catch { /* gone already */ }
    toLogin();
  });
}

// openStream follows a server-sent event stream through fetch, which,
// unlike EventSource, sends the session's key in a header. As EventSource
// does, it reconnects after a drop with the last id it saw in
// Last-Event-ID. on maps event types to handlers of their data; refused
// is called, and the stream given up, when what it follows is not there
// (404); a session refused goes to the login. conn shows the state.
export function openStream(path, on, conn, refused = () => {}) {
  let lastId = '';
  const state = (text, cls) => { conn.textContent = text; conn.className = `conn ${cls}`; };
  (async () => {
    for (let failures = 0; ; failures++) {
      let r = null;
      try {
        r = await api(path, { headers: lastId ? { 'Last-Event-ID': lastId, Accept: 'text/event-stream' } : { Accept: 'text/event-stream' } });
      } catch (e) {
        if (e.message === 'no session') return;
      }
      if (r && r.status === 404) {
        state('not found', 'down');
        refused(r.status);
        return;
      }
      if (r && r.ok) {
        state('live', 'live');
        failures = 0;
        await readEvents(r.body, (typ, id, data) => {
          if (id) lastId = id;
          on[typ]?.(data);
        });
      }
      state('reconnecting…', 'down');
      await new Promise((ok) => setTimeout(ok, Math.min(1000 * (failures + 1), 5000)));
    }
  })();
}

// readEvents parses a text/event-stream body until it ends.
async function readEvents(body, emit) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '', typ = '', id = '', data = [];
  for (;;) {
    let chunk;
    try { chunk = await reader.read(); } catch { return; }
    if (chunk.done) return;
    // A page of events is one long line: look for its end only in what
    // came since the last look.
    const from = buf.length;
    buf += chunk.value;
    let start = 0;
    for (let nl = buf.indexOf('\n', from); nl >= 0; nl = buf.indexOf('\n', start)) {
      const line = buf.slice(start, nl);
      start = nl + 1;
      if (line === '') {
        if (typ || data.length) emit(typ || 'message', id, data.join('\n'));
        typ = ''; id = ''; data = [];
        continue;
      }
      if (line.startsWith(':')) continue;
      const c = line.indexOf(':');
      const field = c < 0 ? line : line.slice(0, c);
      let v = c < 0 ? '' : line.slice(c + 1);
      if (v.startsWith(' ')) v = v.slice(1);
      if (field === 'event') typ = v;
      else if (field === 'data') data.push(v);
      else if (field === 'id') id = v;
    }
    buf = buf.slice(start);
  }
}
