// The microphone's AudioWorklet: mono, resampled to 24 kHz, sent to the page as PCM16
// frames of 20 ms with their level. Runs on the audio thread: no allocation per sample
// beyond the frame being filled, no waiting.
const RATE = 24000;
const FRAME = 480; // 20 ms at 24 kHz

class Capture extends AudioWorkletProcessor {
  constructor() {
    super();
    this.step = sampleRate / RATE; // input samples per output sample
    this.pos = 0; // where the next output sample falls, in input samples from the block start
    this.last = 0; // the previous block's last sample, for interpolation across blocks
    this.frame = new Int16Array(FRAME);
    this.filled = 0;
    this.energy = 0;
  }

  process(inputs) {
    const input = inputs[0];
    if (!input || input.length === 0) return true;
    const ch = input[0];
    const n = ch.length;
    // Linear interpolation between input samples; position -1 is the previous block's last.
    while (this.pos < n - 1 + 1e-9) {
      const i = Math.floor(this.pos);
      const frac = this.pos - i;
      const a = i < 0 ? this.last : ch[i];
      const b = ch[Math.min(i + 1, n - 1)];
      let v = a + (b - a) * frac;
      v = v > 1 ? 1 : v < -1 ? -1 : v;
      this.energy += v * v;
      this.frame[this.filled++] = Math.round(v * 32767);
      if (this.filled === FRAME) {
        const level = Math.sqrt(this.energy / FRAME);
        this.port.postMessage({ pcm: this.frame.buffer, level }, [this.frame.buffer]);
        this.frame = new Int16Array(FRAME);
        this.filled = 0;
        this.energy = 0;
      }
      this.pos += this.step;
    }
    this.pos -= n;
    this.last = ch[n - 1];
    return true;
  }
}

registerProcessor("parley-capture", Capture);
