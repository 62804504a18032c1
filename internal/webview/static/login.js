// The login: the token goes to the daemon in the body of a request of
// this script's, and the answer's session key stays in this origin's
// sessionStorage (a page of another port cannot read it). The cookie the
// answer sets is not enough without the key, so a cookie that reached
// another loopback server opens nothing.
import { KEY_STORE } from './common.js';

const form = document.getElementById('login');
const error = document.getElementById('login-error');

form.addEventListener('submit', async (e) => {
  e.preventDefault();
  error.hidden = true;
  let r, data = {};
  try {
    r = await fetch('/login', {
      method: 'POST', credentials: 'same-origin', cache: 'no-store',
      headers: { Accept: 'application/json' },
      body: new URLSearchParams(new FormData(form)),
    });
    data = await r.json().catch(() => ({}));
  } catch {
    data = { error: 'The daemon did not answer.' };
  }
  if (!r || !r.ok || !data.key) {
    error.textContent = data.error || `HTTP ${r?.status}`;
    error.hidden = false;
    return;
  }
  sessionStorage.setItem(KEY_STORE, data.key);
  location.assign(data.next || '/');
});
