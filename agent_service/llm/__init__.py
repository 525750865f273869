"""The LLM proposer: prompts from versioned templates, litellm calls, parsing, repair, accounting."""
