"""The console script `hla` of an installed hla_oracle: replaces itself with
the `hla` tool installed inside the package (hla_oracle/bin/hla, from the same
build as the extension), so exit codes, signals and output are the tool's own.
Found next to this file, whatever the install scheme; a repaired wheel's tool
finds the bundled GMP, MPFR and libquadmath through its RPATH."""
import os
import sys
from pathlib import Path


def tool_path():
    """The `hla` executable installed with this package."""
    return Path(__file__).resolve().parent / "bin" / "hla"


def main():
    tool = tool_path()
    if not os.access(tool, os.X_OK):
        sys.stderr.write(f"hla: the hla tool is not installed with this hla_oracle ({tool} is missing); "
                         "in a build tree run <build>/tools/hla\n")
        sys.exit(2)
    os.execv(tool, ["hla", *sys.argv[1:]])
