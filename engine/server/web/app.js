// Parley's web page: the controller. Wires the microphone, the connection, the player
// and the view; `window.parley` exposes what it counted (for tests and the curious).
import { Connection } from "./connection.js";
import { devices, fromBase64, openMicrophone, Player, toBase64 } from "./audio.js";
import { showMessage, showPlayback, showState, showTurn, Transcript } from "./view.js";

const $ = (id) => document.getElementById(id);
const SEND_FRAMES = 2; // 40 ms of audio per input_audio_buffer.append

const stats = { played: 0, queued: 0, underruns: 0, flushes: 0, flushed: 0, responses: 0,
                cancelled: 0, transcripts: [], languages: [], replies: [], problem: null, connected: false,
                jitterNeededMs: null, errors: [] };
window.parley = { stats };

const transcript = new Transcript();
let mic = null;
let player = null;
let pending = [];
let talking = false; // push-to-talk held
let connected = false;
let reply = null; // the response being played: {id, itemId, base, arrivals}
let state = "off";

const mode = () => document.querySelector("input[name=mode]:checked").value;
const jitterMs = () => Math.max(0, Math.min(1000, Number($("jitter").value) || 0));

function setState(next) {
  state = next;
  showState(next);
}

// Problems that end the session: the page waits for the user to press Connect again.
const STOPS = new Set(["wrong_key", "origin", "bad_key", "host", "throttled", "ended"]);

const connection = new Connection({
  onEvent: handle,
  onOpen: () => {
    // A new session (after a loss too): nothing of an old reply may still play.
    player?.flush();
    reply = null;
    connected = stats.connected = true;
    setState("listening");
    sendSettings();
    $("apply").disabled = false;
  },
  onProblem: (code, text) => {
    stats.problem = code;
    showMessage(text);
    if (code) {
      connected = stats.connected = false;
      setState(STOPS.has(code) ? "off" : "connecting");
    }
  },
  onClosed: () => stop(false),
});

function sendSettings() {
  const session = { type: "realtime", audio: { input: {}, output: {} } };
  const instructions = $("instructions").value.trim();
  if (instructions) session.instructions = instructions;
  const voice = $("voice").value.trim();
  if (voice) session.audio.output.voice = voice;
  // Push-to-talk: the page commits each turn (turn detection off).
  session.audio.input.turn_detection = mode() === "push-to-talk" ? null : { type: "server_vad" };
  connection.send({ type: "session.update", session });
}

function onFrame(pcm, level) {
  $("level").value = Math.min(1, level * 4);
  if (!connected || (mode() === "push-to-talk" && !talking)) return;
  pending.push(new Int16Array(pcm));
  if (pending.length < SEND_FRAMES) return;
  const all = new Int16Array(pending.reduce((n, f) => n + f.length, 0));
  let at = 0;
  for (const f of pending) { all.set(f, at); at += f.length; }
  pending = [];
  connection.send({ type: "input_audio_buffer.append", audio: toBase64(all.buffer) });
}

// Barge-in: what is queued is dropped, and the server learns how much was heard.
function flush() {
  if (!reply) return;
  const heard = Math.max(0, stats.played - reply.base);
  const wasPlaying = stats.queued > 0 || stats.playing;
  player.flush();
  if (wasPlaying && reply.itemId && reply.audio) {
    connection.send({ type: "conversation.item.truncate", item_id: reply.itemId, content_index: 0,
                      audio_end_ms: Math.floor((heard * 1000) / 24000) });
    // Cut off while it played, whether or not the server was still writing it.
    transcript.mark(reply.itemId, "interrupted");
  }
  reply = null;
}

// How late the reply's audio came against real time: the buffer it would have needed.
function measureArrival(r, samples) {
  const now = performance.now();
  if (r.first === undefined) { r.first = now; r.sent = 0; r.late = 0; }
  r.late = Math.max(r.late, now - r.first - (r.sent * 1000) / 24000);
  r.sent += samples;
}

function handle(e) {
  switch (e.type) {
    case "input_audio_buffer.speech_started":
      flush();
      setState("hearing");
      break;
    case "input_audio_buffer.speech_stopped":
      setState("thinking");
      break;
    case "conversation.item.input_audio_transcription.delta":
      transcript.append(e.item_id, "you", e.delta);
      transcript.bubble(e.item_id, "you").classList.add("partial");
      break;
    case "conversation.item.input_audio_transcription.completed":
      transcript.set(e.item_id, "you", e.transcript);
      stats.transcripts.push(e.transcript);
      heardIn(e.item_id, e.language ?? null, e.language_probability ?? null);
      break;
    case "response.created":
      reply = { id: e.response.id, itemId: null, base: stats.played + stats.queued, audio: false };
      break;
    case "response.output_item.added":
      if (reply && e.response_id === reply.id && e.item.type === "message") reply.itemId = e.item.id;
      break;
    case "response.output_audio_transcript.delta":
    case "response.output_text.delta":
      transcript.append(e.item_id, "bot", e.delta);
      break;
    case "response.output_audio.delta": {
      if (!reply || e.response_id !== reply.id) break;
      const pcm = fromBase64(e.delta);
      if (!reply.audio) { reply.audio = true; reply.base = stats.played + stats.queued; }
      measureArrival(reply, pcm.byteLength / 2);
      player.push(pcm);
      break;
    }
    case "response.output_audio.done":
      player.end();
      break;
    case "response.done":
      finished(e.response);
      break;
    case "error":
      stats.errors.push(e.error);
      if (e.error.code !== "input_audio_buffer_commit_empty") showMessage(`The server said: ${e.error.message}`);
      break;
    default:
  }
}

// The language a turn was heard in (Parley's `language` field of the transcription event):
// marked on the user's bubble when it differs from the last turn's, as the desktop does.
function heardIn(itemId, language, probability) {
  const previous = stats.languages.findLast((l) => l !== null);
  stats.languages.push(language);
  if (language && language !== previous) transcript.markLanguage(itemId, language, probability);
}

function finished(response) {
  stats.responses++;
  const text = (response.output || []).flatMap((i) => i.content || [])
    .map((c) => c.transcript ?? c.text ?? "").join("");
  if (response.status === "cancelled") {
    stats.cancelled++;
    const item = (response.output || [])[0];
    if (item) transcript.mark(item.id, "interrupted");
    if (reply && reply.id === response.id) flush();
  } else {
    stats.replies.push(text);
    const item = (response.output || []).find((i) => i.type === "message");
    const v2v = response.parley?.voice_to_voice_s;
    if (item && typeof v2v === "number") transcript.mark(item.id, `${Math.round(v2v * 1000)} ms voice-to-voice`);
  }
  if (response.parley) showTurn(response.parley);
  if (reply && reply.id === response.id && reply.first !== undefined) {
    stats.jitterNeededMs = reply.late;
    player.end();
  }
  if (state === "thinking") setState("listening");
}

function onPlayback(s) {
  Object.assign(stats, { played: s.played, queued: s.queued, playing: s.playing,
                         underruns: s.underruns, flushes: s.flushes, flushed: s.flushed });
  if (connected) {
    if (s.playing && state !== "hearing") setState("speaking");
    else if (!s.playing && state === "speaking") setState("listening");
  }
  showPlayback(s, stats.jitterNeededMs, jitterMs());
}

async function fillDevices() {
  const { mics, speakers } = await devices();
  const fill = (select, list, fallback) => {
    const chosen = select.value;
    select.replaceChildren(new Option(fallback, ""));
    list.forEach((d, i) => select.append(new Option(d.label || `${fallback} ${i + 1}`, d.deviceId)));
    select.value = [...select.options].some((o) => o.value === chosen) ? chosen : "";
  };
  fill($("mic"), mics, "Default microphone");
  fill($("speaker"), speakers, "Default speaker");
  if (typeof AudioContext.prototype.setSinkId !== "function") {
    $("speaker").disabled = true;
    $("speaker").title = "This browser cannot choose the speaker of a page";
  }
}

async function start() {
  $("connect").textContent = "Disconnect";
  setState("connecting");
  showMessage(null);
  try {
    mic = await openMicrophone($("mic").value, onFrame);
  } catch (e) {
    stats.problem = e.code === "NotAllowedError" ? "mic_denied" : "mic";
    showMessage(e.message);
    stop(false);
    return;
  }
  player = new Player(onPlayback);
  try {
    await player.start(jitterMs(), $("speaker").value);
  } catch (e) {
    stats.problem = "speaker";
    showMessage(`The speaker cannot be opened (${e.message}). Pick another in Settings.`);
    stop(false);
    return;
  }
  await fillDevices();
  $("talk").disabled = mode() !== "push-to-talk";
  connection.connect($("key").value.trim());
}

async function stop(clearMessage = true) {
  connection.close();
  connected = stats.connected = false;
  $("connect").textContent = "Connect";
  $("apply").disabled = true;
  $("talk").disabled = true;
  if (clearMessage) showMessage(null);
  setState("off");
  const [m, p] = [mic, player];
  mic = player = reply = null;
  await m?.close();
  await p?.close();
}

function press(down) {
  if (mode() !== "push-to-talk" || !connected || talking === down) return;
  talking = down;
  $("talk").setAttribute("aria-pressed", String(down));
  if (down) {
    if (reply) { flush(); connection.send({ type: "response.cancel" }); }
    setState("hearing");
  } else {
    pending = [];
    connection.send({ type: "input_audio_buffer.commit" });
    connection.send({ type: "response.create" });
    setState("thinking");
  }
}

$("connect-form").addEventListener("submit", (e) => {
  e.preventDefault();
  if (mic || player) stop(); else start();
});
$("apply").addEventListener("click", sendSettings);
$("jitter").addEventListener("change", () => player?.setTarget(jitterMs()));
$("speaker").addEventListener("change", () => player?.setSink($("speaker").value));
$("mic").addEventListener("change", async () => {
  if (!mic) return;
  await mic.close();
  try {
    mic = await openMicrophone($("mic").value, onFrame);
  } catch (e) {
    showMessage(e.message);
  }
});
for (const radio of document.querySelectorAll("input[name=mode]")) {
  radio.addEventListener("change", () => {
    $("talk").disabled = !connected || mode() !== "push-to-talk";
    if (connected) sendSettings();
  });
}
const talk = $("talk");
talk.addEventListener("pointerdown", (e) => { talk.setPointerCapture(e.pointerId); press(true); });
talk.addEventListener("pointerup", () => press(false));
talk.addEventListener("pointercancel", () => press(false));
// The space bar holds to talk anywhere but in a text field; Enter on the button too.
const typing = (t) => t instanceof HTMLInputElement || t instanceof HTMLTextAreaElement || t instanceof HTMLSelectElement;
document.addEventListener("keydown", (e) => {
  if (e.repeat || typing(e.target)) return;
  if (e.code === "Space" || (e.key === "Enter" && e.target === talk)) {
    if (mode() === "push-to-talk" && connected) { e.preventDefault(); press(true); }
  }
});
document.addEventListener("keyup", (e) => {
  if (e.code === "Space" || (e.key === "Enter" && e.target === talk)) press(false);
});
navigator.mediaDevices?.addEventListener?.("devicechange", fillDevices);
// A key in the address's fragment (never sent to the server, never logged) fills the field.
const fragment = new URLSearchParams(location.hash.slice(1));
if (fragment.get("key")) { $("key").value = fragment.get("key"); history.replaceState(null, "", location.pathname); }
window.parley.connect = () => { if (!mic) start(); };
window.parley.disconnect = stop;
showState("off");
fillDevices();
