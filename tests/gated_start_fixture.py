"""Preloaded by queue processes in tests: importing it blocks until the test opens the
FIFO named by $GATE_FIFO for writing, so the master stays in its start-up wait for as
long as the test needs (a window in which to send it signals)."""
import os

os.close(os.open(os.environ["GATE_FIFO"], os.O_RDONLY))
