"""Clients of hosted models: any OpenAI-compatible Chat Completions endpoint."""

from agent_host.llm.openai_compat import DEFAULT_BASE_URL, OpenAIChatModel, model_from_settings

__all__ = ["DEFAULT_BASE_URL", "OpenAIChatModel", "model_from_settings"]
