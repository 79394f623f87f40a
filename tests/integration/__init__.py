"""In-process tests against a real Redis: the durable layer, the HTTP API, the bot with the
Slack stand-in."""
