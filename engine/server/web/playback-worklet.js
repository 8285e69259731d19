// The speaker's AudioWorklet, in a 24 kHz context: a jitter buffer of reply audio.
// Playing starts once `target` samples wait (or the reply has ended), and starts again
// that way after an underrun; "flush" drops everything (barge-in). Counts what it played
// and reports it to the page about every 50 ms.
class Playback extends AudioWorkletProcessor {
  constructor() {
    super();
    this.chunks = []; // Float32Array queue
    this.offset = 0; // read position in chunks[0]
    this.queued = 0; // samples waiting
    this.target = 1920; // 80 ms
    this.playing = false;
    this.ended = false; // the reply's last audio arrived: play what is left
    this.played = 0;
    this.underruns = 0;
    this.flushes = 0;
    this.flushed = 0; // samples dropped by flushes
    this.maxQueued = 0;
    this.sinceReport = 0;
    this.port.onmessage = (e) => this.command(e.data);
  }

  command(m) {
    if (m.type === "audio") {
      const pcm = new Int16Array(m.pcm);
      const f = new Float32Array(pcm.length);
      for (let i = 0; i < pcm.length; i++) f[i] = pcm[i] / 32768;
      this.chunks.push(f);
      this.queued += f.length;
      this.ended = false;
      if (this.queued > this.maxQueued) this.maxQueued = this.queued;
    } else if (m.type === "end") {
      this.ended = true;
    } else if (m.type === "flush") {
      if (this.queued > 0) {
        this.flushes++;
        this.flushed += this.queued;
      }
      this.chunks = [];
      this.offset = 0;
      this.queued = 0;
      this.playing = false;
      this.ended = false;
      this.report();
    } else if (m.type === "target") {
      this.target = Math.max(0, Math.round(m.samples));
    }
  }

  report() {
    this.port.postMessage({
      played: this.played, queued: this.queued, playing: this.playing, underruns: this.underruns,
      flushes: this.flushes, flushed: this.flushed, maxQueued: this.maxQueued,
    });
    this.sinceReport = 0;
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    const n = out.length;
    if (!this.playing && this.queued > 0 && (this.queued >= this.target || this.ended)) {
      this.playing = true;
    }
    let written = 0;
    if (this.playing) {
      while (written < n && this.chunks.length) {
        const c = this.chunks[0];
        const take = Math.min(n - written, c.length - this.offset);
        out.set(c.subarray(this.offset, this.offset + take), written);
        written += take;
        this.offset += take;
        if (this.offset === c.length) {
          this.chunks.shift();
          this.offset = 0;
        }
      }
      this.queued -= written;
      this.played += written;
      if (this.queued === 0) {
        if (!this.ended) this.underruns++; // ran dry before the reply's end: wait for the target again
        this.playing = false;
        this.report();
      }
    }
    out.fill(0, written);
    for (let c = 1; c < outputs[0].length; c++) outputs[0][c].set(out);
    this.sinceReport += n;
    if (this.sinceReport >= 1200) this.report();
    return true;
  }
}

registerProcessor("parley-playback", Playback);
