"""URL targets: webhook-grade delivery on each queue process's event loop.

- `request`  what is sent for a task's run (method, URL, headers, body);
- `signing`  Standard Webhooks signatures (url_signing_secret, url_signing_keys);
- `hosts`    per-host isolation: a cap on requests in flight and a circuit breaker;
- `health`   per-host delivery tallies, reported by the queue to Redis (`delayd hosts`);
- `answer`   what an answer means (outcome, Retry-After);
- `guard`    the SSRF guard (url_deny_private), checked on the resolved addresses
             (a proxied request's target resolved and checked before it is sent);
- `engine`   the event loop thread, the pooled aiohttp session, and one delivery.
"""
