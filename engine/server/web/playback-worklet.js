// The speaker's AudioWorklet, in a 24 kHz context: the reply through a jitter buffer
// (jitter.js). Reports what it played to the page about every 50 ms, and at once when
// it runs dry or is flushed.
import { JitterBuffer } from "./jitter.js";

class Playback extends AudioWorkletProcessor {
  constructor() {
    super();
    this.buffer = new JitterBuffer();
    this.sinceReport = 0;
    this.port.onmessage = (e) => this.command(e.data);
  }

  command(m) {
    const b = this.buffer;
    if (m.type === "audio") {
      const pcm = new Int16Array(m.pcm);
      const f = new Float32Array(pcm.length);
      for (let i = 0; i < pcm.length; i++) f[i] = pcm[i] / 32768;
      b.push(f);
    } else if (m.type === "end") {
      b.end();
    } else if (m.type === "flush") {
      b.flush();
      this.report();
    } else if (m.type === "target") {
      b.setTarget(m.samples);
    }
  }

  report() {
    this.port.postMessage(this.buffer.stats());
    this.sinceReport = 0;
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    const wasPlaying = this.buffer.playing;
    this.buffer.read(out);
    for (let c = 1; c < outputs[0].length; c++) outputs[0][c].set(out);
    this.sinceReport += out.length;
    if (this.sinceReport >= 1200 || (wasPlaying && !this.buffer.playing)) this.report();
    return true;
  }
}

registerProcessor("parley-playback", Playback);
