"""The analyzer's version, kept apart so that reading it imports nothing."""

#: Bump whenever a change to the analysis can change its output for the same frames: stored
#: findings of another version are recomputed on the next read.
ANALYZER_VERSION = "3"
