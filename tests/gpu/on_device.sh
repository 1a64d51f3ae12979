#!/bin/sh
# on_device.sh PROBE COMMAND...: runs COMMAND when PROBE (hla_cuda_probe) sees a
# CUDA device; exit 77 (ctest SKIP_RETURN_CODE: reported as skipped, not
# passed) when it sees none.
probe=$1
shift
"$probe"
rc=$?
if [ "$rc" -eq 77 ]; then
  echo "SKIPPED: no CUDA device"
  exit 77
fi
if [ "$rc" -ne 0 ]; then
  echo "hla_cuda_probe failed (exit $rc)"
  exit 1
fi
exec "$@"
