#!/bin/sh
# Zoo exec candidate `exec_garbled` (buggy): exits 0 but writes junk bytes
# instead of a safetensors file (as a tool that writes its own format, or a
# truncated / interleaved write). The first 8 bytes read as an absurd header length.
#   sh garbled.sh IN OUT
[ $# -eq 2 ] || { echo "usage: sh garbled.sh IN OUT" >&2; exit 2; }
printf 'GARBLED!this is not a safetensors file\n\377\376\001\000{"out":' > "$2"
