#!/bin/sh
# Zoo exec candidate `exec_slow` (buggy): sleeps 60 s and writes nothing, so any
# sane per-problem timeout fires. `exec` keeps it one process, so killing it
# leaves no orphan behind.
#   sh slow.sh IN OUT
exec sleep 60
