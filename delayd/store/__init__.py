"""The one road to Redis: the key layout, the Lua scripts and how they are sent, the transitions."""
