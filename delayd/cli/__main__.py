"""`python -m delayd.cli`: the `delayd` command without its console script."""
import sys

from . import main

sys.exit(main())
