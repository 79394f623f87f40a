"""Adapters that host agents of other frameworks with countersign's guarantees.

Each is an optional extra and imports its framework: `agent_host.adapters.openai_agents`
(`countersign[openai-agents]`) and `agent_host.adapters.pydantic_ai`
(`countersign[pydantic-ai]`). Nothing else in countersign imports them.
"""
