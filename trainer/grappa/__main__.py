"""`python -m grappa`: the command line (app/cli.py)."""
import sys
import warnings

# PyG touches torch.jit.script at import time; the deprecation notice is noise for our users.
warnings.filterwarnings("ignore", message=".*torch.jit.script.*is deprecated", category=FutureWarning)

from grappa.app.cli import main  # noqa: E402

sys.exit(main())
