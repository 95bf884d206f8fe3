"""DeepInfer: an inference engine for DeepSeek V4 / V4.1, with vLLM's offline API.

    from deepinfer import LLM, SamplingParams
    llm = LLM(model="deepseek-ai/DeepSeek-V4.1-Flash-1017")
    out = llm.generate("Hello", SamplingParams(max_tokens=32))
    print(out[0].outputs[0].text)
"""
try:
    from . import _core  # noqa: F401
except ImportError as e:  # pragma: no cover - only without a build
    raise ImportError(f"deepinfer's C++ extension (python/deepinfer/_core*.so) is missing or broken: "
                      f"run ./build.sh, or pip install . ({e})") from e

from .sampling_params import SamplingParams
from .outputs import CompletionOutput, Logprob, RequestOutput
from .engine import LLMEngine
from .llm import LLM, env_vars, resolve_model

__all__ = ["LLM", "LLMEngine", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob", "env_vars", "resolve_model"]
