"""What the tests (and bench/) share, each concept once:

- `waiting`: `eventually`, the one bounded wait.
- `redis_fixtures`: the pytest plugin with real Redis servers and a Redis Cluster per module.
- `redis_cluster`: `LocalRedisCluster`, the test-only cluster launcher.
- `keyspace`: reading shard-spread keys across every shard; moving deadlines by Redis's clock.
- `routers`: router stubs (one route, a quorum, by agent, by severity).
- `signing`: the webhook HMAC, Slack's request signature, the API's bearer token.
- `agents`: counting tools, scripted and spying models, registries (pure tests too).
- `host_env`: the durable core (store, runner, workers) driven by hand, and a `Host`.
- `stack`: the whole in-process stack (Slack stand-in, Bolt, HTTP API, background work).
- `processes`: `countersign` child processes and `until`, the wait that watches them.
- `paths`: the project's root and the frozen fixtures.
"""
