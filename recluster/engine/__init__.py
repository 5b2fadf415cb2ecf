"""Rounds, optimizing processes, publishing, the public API: what the CLI and the job call."""
