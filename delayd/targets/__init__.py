"""What a run calls: call and push targets, async call targets, URL deliveries (url/)."""
