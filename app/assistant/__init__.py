"""The Assistant tab: voice, speed, who the assistant is, voice preview."""
