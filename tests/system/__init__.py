"""Whole-system tests: child processes, Redis Cluster, fuzzing over sockets, the browser."""
