"""`python -m grappa.model_file convert OLD.pt --config RUN_DIR/report.json`: the documented
command that rebuilds an older model file's description. The format itself is
grappa.models.model_file; this module only keeps the command's name."""
import sys

from grappa.models.model_file import main

if __name__ == "__main__":
    sys.exit(main())
