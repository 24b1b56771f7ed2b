"""`python -m grappa.model_file convert OLD.pt --config RUN_DIR/report.json`: the documented
command that rebuilds an older model file's description. The format itself is
grappa.models.model_file; this module only keeps the command's name."""
import sys

from grappa.models.model_file import main
from grappa.runtime.exit_codes import run_reporting

if __name__ == "__main__":
    # the CLI's error path: an existing --out, an unwritable folder, an unreadable file are one
    # `grappa: error:` line with its exit code
    sys.exit(run_reporting(main))
