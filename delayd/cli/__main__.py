"""`python -m delayd.cli`: the `delayd` command without its console script."""
import sys

from delayd.cli import main

sys.exit(main())
