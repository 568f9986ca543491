// The dashboard's live feed: one WebSocket, reconnected with exponential backoff and
// jitter, a visible indicator, and a resync callback every time the socket opens so
// that whatever happened while it was down shows up.
//
// A handshake that never completes (a proxy or server that accepts the connection and
// then says nothing) would otherwise leave the page "connecting" forever, stale and
// silent: after HANDSHAKE_TIMEOUT_MS the attempt is abandoned, the indicator says the
// server did not answer, and the usual backoff tries again.

const MAX_DELAY_MS = 30000;
const FIRST_DELAY_MS = 500;
const PING_MS = 25000;
export const HANDSHAKE_TIMEOUT_MS = 10000;

export function readJson(id) {
  const node = document.getElementById(id);
  return node ? JSON.parse(node.textContent) : null;
}

export function setIndicator(state, text) {
  const box = document.getElementById("live");
  if (!box) return;
  box.dataset.state = state;
  box.querySelector(".live-text").textContent = text;
}

// authUrl: a JSON endpoint that answers 401 to a logged-out browser. When the socket is
// refused at the handshake, it tells "logged out" (stop, ask for a login) from "server
// down" (keep retrying).
export function connectLive({ path, onChanges, onOpen, authUrl, handshakeTimeoutMs = HANDSHAKE_TIMEOUT_MS }) {
  let attempt = 0;
  let pinger = null;

  async function loggedOut() {
    try {
      // Bounded too: a server that hangs the handshake may hang this request as well.
      const response = await fetch(authUrl, {
        credentials: "same-origin",
        redirect: "manual",
        signal: AbortSignal.timeout(handshakeTimeoutMs),
      });
      return response.status === 401;
    } catch (e) {
      return false;  // the server is down or silent: that is what the retry loop is for
    }
  }

  function open() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(`${scheme}//${location.host}${path}`);
    let opened = false;
    let timedOut = false;
    const handshake = setTimeout(() => {
      timedOut = true;
      socket.close();  // a socket still CONNECTING fails at once and fires "close"
    }, handshakeTimeoutMs);
    socket.addEventListener("open", () => {
      clearTimeout(handshake);
      opened = true;
      attempt = 0;
      setIndicator("live", "live");
      pinger = setInterval(() => socket.send(JSON.stringify({ type: "ping" })), PING_MS);
      onOpen();
      document.dispatchEvent(new CustomEvent("mac:live-open"));
    });
    socket.addEventListener("message", (event) => {
      let msg;
      try { msg = JSON.parse(event.data); } catch (e) { return; }
      if (msg && msg.type === "nodes.changed" && Array.isArray(msg.changes)) {
        onChanges(msg.changes, Array.isArray(msg.removed) ? msg.removed : []);
      } else if (msg && msg.type) {
        // Other feeds on the same socket (alerts.js) listen for these.
        document.dispatchEvent(new CustomEvent("mac:live", { detail: msg }));
      }
    });
    socket.addEventListener("close", async (event) => {
      clearTimeout(handshake);
      clearInterval(pinger);
      // 4401: the server closed an open socket whose session ended (consumers.py).
      if (event.code === 4401 || (!opened && authUrl && (await loggedOut()))) {
        setIndicator("down", "logged out: reload to log in");
        return;
      }
      attempt += 1;
      const ceiling = Math.min(MAX_DELAY_MS, FIRST_DELAY_MS * 2 ** (attempt - 1));
      const delay = ceiling / 2 + Math.random() * (ceiling / 2);  // jitter: no thundering herd
      const seconds = Math.max(1, Math.round(delay / 1000));
      const why = timedOut ? "no answer from the server: " : "";
      setIndicator("down", `${why}reconnecting in ${seconds} s`);
      setTimeout(open, delay);
    });
  }
  open();
}

const UNITS = [[86400, "d"], [3600, "h"], [60, "min"], [1, "s"]];

export function relativeTime(iso) {
  if (!iso) return "never";
  const seconds = Math.round((Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 5) return "just now";
  for (const [size, unit] of UNITS) {
    if (seconds >= size) return `${Math.floor(seconds / size)} ${unit} ago`;
  }
  return "just now";
}

// Every <time> shows "3 min ago" with the exact time as its tooltip.
export function refreshTimes(scope = document) {
  for (const el of scope.querySelectorAll("time[datetime]")) {
    const iso = el.getAttribute("datetime");
    el.textContent = relativeTime(iso);
    el.title = new Date(iso).toLocaleString();
  }
}

export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

// A live redraw must not shut what the reader opened: before parts of a page are
// rebuilt, note which <details> are open (keyOf names one by what it shows, e.g. the
// node's id and the box's class; null for a box not worth keeping), and open the same
// ones in the rebuilt parts.
export function openDetails(scope, keyOf) {
  const keys = new Set();
  for (const box of scope.querySelectorAll("details[open]")) {
    const key = keyOf(box);
    if (key) keys.add(key);
  }
  return keys;
}

export function reopenDetails(scope, keys, keyOf) {
  if (!keys.size) return;
  for (const box of scope.querySelectorAll("details")) {
    if (keys.has(keyOf(box))) box.open = true;
  }
}
