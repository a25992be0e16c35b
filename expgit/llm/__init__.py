"""The LLM port: chat models, structured output, usage accounting."""
