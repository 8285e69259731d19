// The connection to /v1/realtime: a preflight GET of /v1/pool that says why a connect
// would fail (a browser's WebSocket cannot read the HTTP status of a refused upgrade),
// the WebSocket with the key as a subprotocol, and reconnecting with back-off. With a
// waiting room (serve --queue) a busy server admits the page, which shows its place in
// line (the server's parley.queue.waiting events, asked for on the URL) until its session
// is created.

const KEY_PROTOCOL = "openai-insecure-api-key.";
const BACKOFF_S = [1, 2, 4, 8, 15, 30];
const FULL_RETRY_S = 5;
// The server's own ends of a session (serve --idle-timeout-s, --max-session-s).
const SESSION_ENDS = new Set(["session_idle_timeout", "session_expired"]);

export const MESSAGES = {
  wrong_key: "The server refused the API key. Check it and press Connect again.",
  bad_key: "This key cannot be sent by a browser (use letters, digits, '-', '_' and '.').",
  origin: "The server does not accept this page's address: start it with --allow-origin.",
  host: "The server does not answer to the name this page was opened with: start it with " +
    "--allow-host and that name, or open the page by the server's address.",
  throttled: (s) => `Too many wrong API keys from this address: wait ${s} s, then press Connect.`,
  ended: (text) => `${text} Press Connect to start a new session.`,
  full: (s) => `The server is full: every pipeline is in use. Trying again in ${s} s.`,
  queued: (n) => `Every pipeline is in use: waiting for a free one (place ${n} in line).`,
  unreachable: (s) => `The server cannot be reached. Trying again in ${s} s.`,
  lost: (s) => `The connection was lost. Reconnecting in ${s} s.`,
  failed: (s) => `The connection failed. Trying again in ${s} s.`,
};

/** The error code of a refused answer's JSON body (OpenAI's error shape), or null. */
async function errorCode(answer) {
  try {
    return (await answer.json()).error.code;
  } catch {
    return null;
  }
}

/** What the server says about connecting now: "ok", "full", "wrong_key", "origin", "host",
 * "throttled" (with `retryAfter` seconds) or "unreachable". */
export async function preflight(key) {
  const headers = key ? { Authorization: `Bearer ${key}` } : {};
  let answer;
  try {
    answer = await fetch("/v1/pool", { headers, cache: "no-store" });
  } catch {
    return "unreachable";
  }
  if (answer.status === 401) return "wrong_key";
  if (answer.status === 429) {
    preflight.retryAfter = Number(answer.headers.get("Retry-After")) || 30;
    return "throttled";
  }
  if (answer.status === 403) return (await errorCode(answer)) === "host_not_allowed" ? "host" : "origin";
  if (!answer.ok) return "unreachable";
  const pool = await answer.json();
  if (pool.units.some((u) => u.state === "free")) return "ok";
  const line = pool.queue; // the waiting room: connect and wait when it has a place
  return line && line.length < line.capacity ? "ok" : "full";
}

/** One realtime session that reconnects after a loss until `close()`. Calls
 * `onEvent(event)` for each server event, `onOpen()`, and `onProblem(code, text)`
 * (text null: the problem is over). */
export class Connection {
  constructor({ onEvent, onOpen, onProblem, onClosed }) {
    this.onEvent = onEvent;
    this.onOpen = onOpen;
    this.onProblem = onProblem;
    this.onClosed = onClosed;
    this.ws = null;
    this.wanted = false;
    this.tries = 0;
    this.timer = null;
  }

  get open() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  connect(key) {
    this.key = key;
    this.wanted = true;
    this.tries = 0;
    this.attempt();
  }

  close() {
    this.wanted = false;
    clearTimeout(this.timer);
    if (this.ws) this.ws.close(1000, "the user disconnected");
    this.ws = null;
  }

  send(event) {
    if (this.open) this.ws.send(JSON.stringify(event));
  }

  retry(code, message) {
    const s = code === "full" ? FULL_RETRY_S * Math.min(4, this.tries + 1)
      : BACKOFF_S[Math.min(this.tries, BACKOFF_S.length - 1)];
    this.tries++;
    this.onProblem(code, message(s));
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.wanted && this.attempt(), s * 1000);
  }

  // A refusal that retrying cannot fix ends the session; the others are tried again.
  diagnosed(state, lost) {
    if (state === "wrong_key" || state === "origin" || state === "host" || state === "throttled") {
      this.wanted = false;
      const text = MESSAGES[state];
      this.onProblem(state, state === "throttled" ? text(preflight.retryAfter) : text);
      this.onClosed();
    } else if (state === "full") {
      this.retry("full", MESSAGES.full);
    } else if (state === "unreachable") {
      this.retry("unreachable", MESSAGES.unreachable);
    } else {
      this.retry(lost ? "lost" : "failed", lost ? MESSAGES.lost : MESSAGES.failed);
    }
  }

  async attempt() {
    const state = await preflight(this.key);
    if (!this.wanted) return;
    if (state !== "ok") return this.diagnosed(state, false);
    const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}` +
      "/v1/realtime?parley_queue_events=1";
    const protocols = this.key ? ["realtime", KEY_PROTOCOL + this.key] : ["realtime"];
    let ws;
    try {
      ws = new WebSocket(url, protocols);
    } catch {
      this.wanted = false;
      this.onProblem("bad_key", MESSAGES.bad_key);
      this.onClosed();
      return;
    }
    this.ws = ws;
    let opened = false;
    let ended = null; // the server ended the session on purpose (idle, too long): no reconnect
    ws.onopen = () => {
      opened = true;
      this.tries = 0;
    };
    // Open is not yet a session: a waiting page hears its place in line first.
    ws.onmessage = (m) => {
      const event = JSON.parse(m.data);
      if (event.type === "parley.queue.waiting") {
        this.onProblem("queued", MESSAGES.queued(event.position));
        return;
      }
      if (event.type === "error" && SESSION_ENDS.has(event.error?.code)) ended = event.error.message;
      if (event.type === "session.created") {
        this.onProblem(null, null);
        this.onOpen();
      }
      this.onEvent(event);
    };
    ws.onclose = async () => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (!this.wanted) return;
      if (ended !== null) {
        // Reconnecting would take a pipeline back for a page nobody is using.
        this.wanted = false;
        this.onProblem("ended", MESSAGES.ended(ended));
        this.onClosed();
        return;
      }
      // Refused before the upgrade (or dropped): ask the server why, then try again.
      this.diagnosed(await preflight(this.key), opened);
    };
  }
}
