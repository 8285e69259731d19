// What the page shows: the state, the message, the conversation, the last turn's figures.

const $ = (id) => document.getElementById(id);

const STATES = { off: "Not connected", connecting: "Connecting…", listening: "Listening",
                 hearing: "Listening (you are speaking)", thinking: "Thinking", speaking: "Speaking" };

// The stage breakdown of response.done's parley field, in the order a turn runs.
const FIGURES = [["voice_to_voice_s", "voice-to-voice"], ["silence_wait_s", "end of speech wait"],
                 ["stt_compute_s", "speech to text"], ["llm_first_chunk_compute_s", "LLM to first clause"],
                 ["tts_first_compute_s", "first audio"], ["engine_overhead_s", "hand-offs"]];

export function showState(state) {
  const el = $("state");
  el.dataset.state = state;
  el.textContent = STATES[state];
}

export function showMessage(text) {
  const el = $("message");
  el.hidden = !text;
  el.textContent = text || "";
}

/** The conversation: one bubble per user item and per response, filled as deltas come. */
export class Transcript {
  constructor() {
    this.el = $("transcript");
    this.bubbles = new Map();
  }

  bubble(id, who) {
    let b = this.bubbles.get(id);
    if (!b) {
      b = document.createElement("p");
      b.className = `turn ${who}`;
      const name = document.createElement("span");
      name.className = "who";
      name.textContent = who === "you" ? "You" : "Parley";
      const text = document.createElement("span");
      text.className = "text";
      b.append(name, text);
      this.el.append(b);
      this.bubbles.set(id, b);
      if (this.bubbles.size > 200) {
        const [first] = this.bubbles.keys();
        this.bubbles.get(first).remove();
        this.bubbles.delete(first);
      }
    }
    return b;
  }

  set(id, who, text, partial = false) {
    const b = this.bubble(id, who);
    b.querySelector(".text").textContent = text;
    b.classList.toggle("partial", partial);
    this.el.scrollTop = this.el.scrollHeight;
  }

  append(id, who, delta) {
    const b = this.bubble(id, who);
    b.querySelector(".text").textContent += delta;
    this.el.scrollTop = this.el.scrollHeight;
  }

  /** The user's bubble says the language it was heard in ("You · French, 93 %"). */
  markLanguage(id, language, probability) {
    const b = this.bubbles.get(id);
    if (!b) return;
    const sure = typeof probability === "number" ? `, ${Math.round(probability * 100)} %` : "";
    b.querySelector(".who").textContent = `You · ${languageName(language)}${sure}`;
    b.dataset.language = language;
  }

  mark(id, note) {
    const b = this.bubbles.get(id);
    if (b) b.querySelector(".who").textContent = `Parley · ${note}`;
  }
}

/** "fr" -> "French" in the browser's language (the code itself where it has no name). */
export function languageName(code) {
  try {
    return new Intl.DisplayNames([navigator.language || "en"], { type: "language" }).of(code) || code;
  } catch {
    return code;
  }
}

export function showTurn(parley) {
  const dl = $("turn");
  dl.replaceChildren();
  for (const [key, label] of FIGURES) {
    const value = parley?.[key];
    if (value === undefined) continue;
    const dt = document.createElement("dt");
    dt.textContent = label;
    const dd = document.createElement("dd");
    dd.textContent = typeof value === "number" ? `${Math.round(value * 1000)} ms` : "–";
    dl.append(dt, dd);
  }
}

export function showPlayback(stats, needMs, targetMs) {
  const s = (stats.played / 24000).toFixed(1);
  const need = needMs === null ? "" : `; the last reply needed ${Math.round(needMs)} ms of buffer`;
  $("playback-stats").textContent =
    `Played ${s} s of reply audio; jitter buffer ${targetMs} ms, ${stats.underruns} underruns${need}.`;
}
