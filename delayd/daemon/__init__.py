"""The master and what it keeps: children, pidfile, start/stop/status, embedded Redis, metrics."""
