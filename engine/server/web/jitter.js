// The reply's jitter buffer, apart from the worklet so that it can be tested on its own.
// Playing starts once `target` samples wait (or the reply has ended), and starts again
// that way after an underrun; `flush` drops everything (barge-in).
export class JitterBuffer {
  constructor(target = 1920) {
    this.chunks = []; // Float32Array queue
    this.offset = 0; // read position in chunks[0]
    this.queued = 0; // samples waiting
    this.target = target;
    this.playing = false;
    this.ended = false; // the reply's last audio arrived: play what is left
    this.played = 0;
    this.underruns = 0;
    this.flushes = 0;
    this.flushed = 0; // samples dropped by flushes
    this.maxQueued = 0;
  }

  push(samples) {
    this.chunks.push(samples);
    this.queued += samples.length;
    this.ended = false;
    if (this.queued > this.maxQueued) this.maxQueued = this.queued;
  }

  end() {
    this.ended = true;
  }

  setTarget(samples) {
    this.target = Math.max(0, Math.round(samples));
  }

  flush() {
    if (this.queued > 0) {
      this.flushes++;
      this.flushed += this.queued;
    }
    this.chunks = [];
    this.offset = 0;
    this.queued = 0;
    this.playing = false;
    this.ended = false;
  }

  /** Fills `out` (silence where nothing plays); returns the samples of audio written. */
  read(out) {
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
        if (!this.ended) this.underruns++; // ran dry before the reply's end
        this.playing = false;
      }
    }
    out.fill(0, written);
    return written;
  }

  stats() {
    return { played: this.played, queued: this.queued, playing: this.playing,
             underruns: this.underruns, flushes: this.flushes, flushed: this.flushed,
             maxQueued: this.maxQueued };
  }
}
