#!/usr/bin/env bash
# Give PortAudio a sound device on a machine without a sound card (CI).
#
#   .ci/start_audio.sh [auto|jack|alsa]      (default: auto)
#
# jack: start a JACK dummy server in the background (paced like a real card at 16 kHz,
#       512-frame periods) and wait until clients can connect. Needs apt jackd2.
# alsa: install .ci/asoundrc as ~/.asoundrc: ALSA null devices (real callbacks, unpaced).
# auto: jack if jackd is installed and starts, otherwise alsa.
# Run it in the same user account as the tests, before Python imports sounddevice
# (PortAudio scans devices once, at initialisation). Packages: apt-get install -y
# --no-install-recommends libportaudio2 jackd2 (DEBIAN_FRONTEND=noninteractive).
set -euo pipefail

mode="${1:-auto}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log="${PARLEY_JACK_LOG:-${TMPDIR:-/tmp}/parley-jackd.log}"
# Never let a client (jack_lsp, PortAudio) auto-start a second, default server.
export JACK_NO_START_SERVER=1
export JACK_NO_AUDIO_RESERVATION=1

jack_up() { jack_lsp >/dev/null 2>&1; }

# An ~/.asoundrc this script installed in an earlier alsa run makes ALSA's "default" (the
# null devices) PortAudio's default device, shadowing JACK's "system": remove it (only
# if it is ours, byte for byte, current or the earlier version without /dev/zero).
drop_parley_asoundrc() {
    local target="$HOME/.asoundrc"
    if [[ -e "$target" ]] && { cmp -s "$here/asoundrc" "$target" || grep -q "^# ALSA null devices for a machine without a sound card (CI)." "$target"; }; then
        rm -f "$target"
        echo "start_audio: removed $target (ALSA null devices from an earlier alsa run)"
        if [[ -e "$target.parley-backup" ]]; then
            mv "$target.parley-backup" "$target"
            echo "start_audio: restored $target from $target.parley-backup"
        fi
    fi
}

start_jack() {
    if ! command -v jackd >/dev/null 2>&1; then
        echo "start_audio: jackd is not installed (apt-get install jackd2)" >&2
        return 1
    fi
    drop_parley_asoundrc
    if jack_up; then
        echo "start_audio: a JACK server is already running"
        return 0
    fi
    # setsid + nohup: the server outlives this script (and a CI step's shell).
    setsid nohup jackd --no-realtime -d dummy -r 16000 -p 512 >"$log" 2>&1 < /dev/null &
    local pid=$!
    for _ in $(seq 1 100); do
        if jack_up; then
            echo "start_audio: JACK dummy server running (pid $pid, 16000 Hz, 512 frames; log $log)"
            jack_lsp | sed 's/^/start_audio:   /'
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            break
        fi
        sleep 0.1
    done
    echo "start_audio: jackd did not come up; its log:" >&2
    sed 's/^/  /' "$log" >&2 || true
    kill "$pid" 2>/dev/null || true
    return 1
}

start_alsa() {
    local target="$HOME/.asoundrc"
    if [[ -e "$target" ]] && ! cmp -s "$here/asoundrc" "$target"; then
        cp "$target" "$target.parley-backup"
        echo "start_audio: saved the existing $target as $target.parley-backup"
    fi
    cp "$here/asoundrc" "$target"
    echo "start_audio: ALSA null devices configured in $target (callbacks are not paced)"
}

case "$mode" in
    jack) start_jack ;;
    alsa) start_alsa ;;
    auto) start_jack || start_alsa ;;
    *) echo "usage: $0 [auto|jack|alsa]" >&2; exit 2 ;;
esac
