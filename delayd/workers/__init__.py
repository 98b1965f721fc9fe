"""The child processes: what every child shares, the bucket loop, the queue loop and its threads."""
