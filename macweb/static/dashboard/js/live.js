// The dashboard's live feed: one WebSocket, reconnected with exponential backoff and
// jitter, a visible indicator, and a resync callback every time the socket opens so
// that whatever happened while it was down shows up.

const MAX_DELAY_MS = 30000;
const FIRST_DELAY_MS = 500;
const PING_MS = 25000;

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
export function connectLive({ path, onChanges, onOpen, authUrl }) {
  let attempt = 0;
  let pinger = null;

  async function loggedOut() {
    try {
      const response = await fetch(authUrl, { credentials: "same-origin", redirect: "manual" });
      return response.status === 401;
    } catch (e) {
      return false;  // the server is down: that is what the retry loop is for
    }
  }

  function open() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(`${scheme}//${location.host}${path}`);
    let opened = false;
    socket.addEventListener("open", () => {
      opened = true;
      attempt = 0;
      setIndicator("live", "live");
      pinger = setInterval(() => socket.send(JSON.stringify({ type: "ping" })), PING_MS);
      onOpen();
    });
    socket.addEventListener("message", (event) => {
      let msg;
      try { msg = JSON.parse(event.data); } catch (e) { return; }
      if (msg && msg.type === "nodes.changed" && Array.isArray(msg.changes)) {
        onChanges(msg.changes, Array.isArray(msg.removed) ? msg.removed : []);
      }
    });
    socket.addEventListener("close", async () => {
      clearInterval(pinger);
      if (!opened && authUrl && (await loggedOut())) {
        setIndicator("down", "logged out: reload to log in");
        return;
      }
      attempt += 1;
      const ceiling = Math.min(MAX_DELAY_MS, FIRST_DELAY_MS * 2 ** (attempt - 1));
      const delay = ceiling / 2 + Math.random() * (ceiling / 2);  // jitter: no thundering herd
      setIndicator("down", `reconnecting in ${Math.max(1, Math.round(delay / 1000))} s`);
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
