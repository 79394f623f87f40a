"""Pure tests: no Redis, no network (the runtime, the approval domain, Block Kit)."""
