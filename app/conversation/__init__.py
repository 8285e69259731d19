"""The conversation: the view, push-to-talk, the Stop talking button, the thinking cue."""
