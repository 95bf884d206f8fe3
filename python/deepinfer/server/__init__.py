"""An OpenAI-compatible HTTP server over DeepInfer's engine (`deepinfer serve`); see docs/server.md."""
from .app import build_app

__all__ = ["build_app"]
