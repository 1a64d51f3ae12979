#!/bin/sh
# Zoo exec candidate `exec_fails` (buggy): fails every problem with exit status 3
# and a message on stderr; writes nothing.
#   sh fails.sh IN OUT
echo "fails.sh: deliberate failure (zoo member exec_fails): cannot run $1" >&2
exit 3
