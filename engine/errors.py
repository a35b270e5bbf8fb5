"""User-facing engine errors. Every message says what went wrong and what to do about it."""

from __future__ import annotations


class EngineError(Exception):
    """Base class for errors the app shows to the user (the worker forwards them as typed events)."""


class ModelLoadError(EngineError):
    """The model could not be loaded (unknown checkpoint, missing or corrupt file, wrong shapes)."""


class PromptError(EngineError):
    """The request cannot be served as given (empty prompt, over the context limit, images on a text-only model)."""


class BackendUnavailableError(EngineError):
    """The requested backend cannot run here (e.g. native without a usable GPU)."""


class NativeBackendError(RuntimeError):
    """The native engine cannot serve this request (shape, capacity, lane misuse, or tensors it cannot hold as
    stored). Engine turns it into a ModelLoadError or PromptError for the user."""
