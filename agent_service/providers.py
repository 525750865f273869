"""The proposers a client can name: the offline templates and litellm's providers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProviderInfo:
    name: str
    description: str
    needs_api_key: bool
    env_vars: tuple[str, ...] = ()


PROVIDERS: tuple[ProviderInfo, ...] = (
    ProviderInfo("offline", "built-in parameterised kernel templates; no key, no network", False),
    ProviderInfo("openai/<model>", "OpenAI models, or any OpenAI-compatible server given --api-base "
                 "(vLLM, llama.cpp, LM Studio)", True, ("OPENAI_API_KEY", "OPENAI_BASE_URL")),
    ProviderInfo("anthropic/<model>", "Anthropic Claude models", True, ("ANTHROPIC_API_KEY",)),
    ProviderInfo("gemini/<model>", "Google Gemini models (AI Studio)", True, ("GEMINI_API_KEY",)),
    ProviderInfo("vertex_ai/<model>", "Google Vertex AI models", True,
                 ("GOOGLE_APPLICATION_CREDENTIALS", "VERTEXAI_PROJECT", "VERTEXAI_LOCATION")),
    ProviderInfo("azure/<deployment>", "Azure OpenAI deployments", True,
                 ("AZURE_API_KEY", "AZURE_API_BASE", "AZURE_API_VERSION")),
    ProviderInfo("bedrock/<model>", "AWS Bedrock models", True,
                 ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION_NAME")),
    ProviderInfo("mistral/<model>", "Mistral models", True, ("MISTRAL_API_KEY",)),
    ProviderInfo("deepseek/<model>", "DeepSeek models", True, ("DEEPSEEK_API_KEY",)),
    ProviderInfo("openrouter/<model>", "models routed by OpenRouter", True, ("OPENROUTER_API_KEY",)),
    ProviderInfo("groq/<model>", "Groq-hosted models", True, ("GROQ_API_KEY",)),
    ProviderInfo("ollama/<model>", "a local Ollama server (default http://localhost:11434, or --api-base)", False,
                 ("OLLAMA_API_BASE",)),
    ProviderInfo("hosted_vllm/<model>", "a vLLM server given --api-base", False, ("HOSTED_VLLM_API_KEY",)),
)
