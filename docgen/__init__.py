"""The generators of the figures and generated text of README.md and docs/ (from bench/results/*.json and the
settings models): bench measures, docgen writes what the docs say about it."""
