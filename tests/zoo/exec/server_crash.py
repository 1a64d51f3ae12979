"""Zoo member `exec_server_crash`: the correct server (correct.py --serve),
except that the process kills itself (SIGSEGV) on a problem with n > 40, as a
kernel with a fixed 40-token scratch buffer would. hla fuzz --exec-server must
report a crash and go on with a fresh server."""
import os
import signal
import sys

import correct
from safetensors import safe_open


def crash_on_long(in_path):
    with safe_open(in_path, framework="np") as f:
        if f.get_slice("q").get_shape()[2] > 40:
            os.kill(os.getpid(), signal.SIGSEGV)


if __name__ == "__main__":
    sys.exit(correct.serve(before=crash_on_long))
