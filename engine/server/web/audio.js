// The page's audio: the microphone through the capture worklet (PCM16 at 24 kHz out),
// and the reply through the playback worklet's jitter buffer, in a 24 kHz context whose
// output device can be chosen where the browser has AudioContext.setSinkId.

export const RATE = 24000;

export const MIC_MESSAGES = {
  NotAllowedError: "The browser may not use the microphone. Allow it for this page (the icon " +
    "left of the address) and press Connect again.",
  NotFoundError: "No microphone was found. Connect one and press Connect again.",
  NotReadableError: "The microphone is in use by another program or cannot be opened.",
  OverconstrainedError: "The chosen microphone is gone. Pick another in Settings.",
  insecure: "The microphone needs a secure page: open it over https:// (serve with " +
    "--tls-self-signed) or from localhost.",
};

/** Opens the microphone; `onFrame(pcmBuffer, level)` gets each 20 ms frame. Throws an
 * Error whose `code` is a key of MIC_MESSAGES. */
export async function openMicrophone(deviceId, onFrame) {
  if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
    throw Object.assign(new Error(MIC_MESSAGES.insecure), { code: "insecure" });
  }
  const audio = { echoCancellation: true, noiseSuppression: true, autoGainControl: true,
                  channelCount: 1 };
  if (deviceId) audio.deviceId = { exact: deviceId };
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio });
  } catch (e) {
    const code = e.name in MIC_MESSAGES ? e.name : "NotReadableError";
    throw Object.assign(new Error(MIC_MESSAGES[code]), { code });
  }
  const context = new AudioContext();
  await context.audioWorklet.addModule("/web/capture-worklet.js");
  const source = context.createMediaStreamSource(stream);
  const node = new AudioWorkletNode(context, "parley-capture", { numberOfInputs: 1,
    numberOfOutputs: 0, channelCount: 1, channelCountMode: "explicit" });
  node.port.onmessage = (e) => onFrame(e.data.pcm, e.data.level);
  source.connect(node);
  if (context.state === "suspended") await context.resume();
  return {
    stream,
    label: stream.getAudioTracks()[0]?.label ?? "",
    async close() {
      stream.getTracks().forEach((t) => t.stop());
      node.port.onmessage = null;
      source.disconnect();
      await context.close();
    },
  };
}

/** The reply's player: `push(pcmBuffer)`, `end()`, `flush()`, `setTarget(ms)`; `stats`
 * follows the worklet (played samples, queued, underruns, flushes). */
export class Player {
  constructor(onStats) {
    this.onStats = onStats;
    this.stats = { played: 0, queued: 0, playing: false, underruns: 0, flushes: 0, flushed: 0,
                   maxQueued: 0 };
  }

  async start(targetMs, sinkId) {
    this.context = new AudioContext({ sampleRate: RATE, latencyHint: "interactive" });
    await this.context.audioWorklet.addModule("/web/playback-worklet.js");
    this.node = new AudioWorkletNode(this.context, "parley-playback", { numberOfInputs: 0,
      outputChannelCount: [1] });
    this.node.port.onmessage = (e) => {
      Object.assign(this.stats, e.data);
      this.onStats(this.stats);
    };
    this.node.connect(this.context.destination);
    this.setTarget(targetMs);
    if (sinkId) await this.setSink(sinkId);
    if (this.context.state === "suspended") await this.context.resume();
  }

  get canChooseSpeaker() {
    return typeof AudioContext.prototype.setSinkId === "function";
  }

  async setSink(sinkId) {
    if (this.context && this.canChooseSpeaker) await this.context.setSinkId(sinkId);
  }

  setTarget(ms) {
    this.node?.port.postMessage({ type: "target", samples: (ms * RATE) / 1000 });
  }

  push(pcm) {
    this.node?.port.postMessage({ type: "audio", pcm }, [pcm]);
  }

  end() {
    this.node?.port.postMessage({ type: "end" });
  }

  flush() {
    this.node?.port.postMessage({ type: "flush" });
  }

  async close() {
    await this.context?.close();
    this.context = null;
    this.node = null;
  }
}

/** The microphones and speakers the browser lists (names once the microphone is allowed). */
export async function devices() {
  if (!navigator.mediaDevices?.enumerateDevices) return { mics: [], speakers: [] };
  const all = await navigator.mediaDevices.enumerateDevices();
  return { mics: all.filter((d) => d.kind === "audioinput"),
           speakers: all.filter((d) => d.kind === "audiooutput") };
}

export function toBase64(buffer) {
  const bytes = new Uint8Array(buffer);
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(text);
}

export function fromBase64(b64) {
  const text = atob(b64);
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes.buffer;
}
