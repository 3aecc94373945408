"""Where judge prompts are sent: any object with ``complete(prompts) -> completions``.

Two backends ship here. ``OpenAICompatibleBackend`` talks to a chat-completions server (OpenAI,
vLLM, SGLang, llama.cpp all speak this dialect) with nothing but the standard library, so judging
adds no dependency. ``CallableBackend`` wraps a plain function, which is how the project's own
sampler serves as a local judge.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, runtime_checkable

# Statuses worth another try: the server is busy, rate-limiting or briefly broken. Any other 4xx
# means the request itself is wrong (bad model name, bad key) and retrying cannot help.
_RETRYABLE_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
_BODY_SNIPPET_CHARS = 300


class JudgeBackendError(RuntimeError):
    """A judge backend could not produce completions."""


JUDGE_KINDS = ("none", "openai", "local")


def backend_from_config(
    judge, local: Callable[[list[str]], list[str]] | None = None
) -> JudgeBackend | None:
    """The judge backend of a config's `judge` section (None for kind "none").

    "openai" builds the chat-completions client from `judge.base_url`, `judge.model` and the key
    in the variable `judge.api_key_env` (refused by name when one is missing, before any request
    or model load); "local" wraps `local`, the caller's `prompts -> replies` function over the
    project's sampler (evaluation's backbone, or the trainer's frozen copy of the start weights).
    """
    kind = judge.kind
    if kind not in JUDGE_KINDS:
        raise ValueError(f"config judge.kind={kind!r} is not one of {list(JUDGE_KINDS)}")
    if kind == "none":
        return None
    if kind == "openai":
        for field in ("base_url", "model"):
            if not judge[field]:
                raise ValueError(f"config judge.kind='openai' needs judge.{field}")
        # An empty key variable name is a server that needs no key (a local vLLM, llama.cpp).
        key_env = judge.api_key_env or None
        return OpenAICompatibleBackend(judge.base_url, judge.model, api_key_env=key_env)
    if local is None:
        raise ValueError("config judge.kind='local' needs a local model to judge with")
    return CallableBackend(local, name="local")


@runtime_checkable
class JudgeBackend(Protocol):
    """Turns a batch of prompts into one completion each, in the same order."""

    def complete(self, prompts: list[str]) -> list[str]: ...


def complete_checked(backend: JudgeBackend, prompts: list[str]) -> list[str]:
    """Calls ``backend.complete`` and checks it returned one string per prompt."""
    completions = backend.complete(list(prompts))
    _check_completions(completions, len(prompts), type(backend).__name__)
    return list(completions)


def complete_in_batches(
    backend: JudgeBackend, prompts: Sequence[str], batch_size: int
) -> list[str]:
    """Sends ``prompts`` to ``backend`` ``batch_size`` at a time; returns completions in order."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    out: list[str] = []
    for start in range(0, len(prompts), batch_size):
        out.extend(complete_checked(backend, list(prompts[start : start + batch_size])))
    return out


def _check_completions(completions: object, expected: int, source: str) -> None:
    if not isinstance(completions, list):
        raise JudgeBackendError(f"{source} returned {type(completions).__name__}, expected a list")
    if len(completions) != expected:
        raise JudgeBackendError(
            f"{source} returned {len(completions)} completions for {expected} prompts"
        )
    for i, text in enumerate(completions):
        if not isinstance(text, str):
            raise JudgeBackendError(
                f"{source} completion item {i} is {type(text).__name__}, expected str"
            )


class CallableBackend:
    """Adapts any ``Callable[[list[str]], list[str]]`` (e.g. a local sampler) to a backend."""

    def __init__(self, fn: Callable[[list[str]], list[str]], name: str | None = None):
        self._fn = fn
        self._name = name or getattr(fn, "__name__", "callable")

    def complete(self, prompts: list[str]) -> list[str]:
        completions = self._fn(list(prompts))
        _check_completions(completions, len(prompts), f"CallableBackend({self._name})")
        return completions

    def __repr__(self) -> str:
        return f"CallableBackend({self._name})"


class OpenAICompatibleBackend:
    """A chat-completions client over urllib: one user message per prompt, greedy by default.

    Args:
      base_url: the API root including its version, e.g. "https://api.openai.com/v1" or
        "http://127.0.0.1:8000/v1"; "/chat/completions" is appended.
      model: the model name the server expects.
      api_key_env: name of the environment variable holding the key, read once here; None sends
        no Authorization header (local servers usually need none).
      temperature: sampling temperature; 0 makes the judge as repeatable as the server allows.
      max_tokens: completion cap; None leaves it to the server.
      timeout_s: per-request socket timeout.
      max_retries: extra attempts after a timeout, a refused connection or a retryable status.
      backoff_s: wait before the first retry; doubled after each further failure.
      max_workers: requests in flight at once (order of results is always that of the prompts).
      system_prompt: optional system message sent before each prompt.
      sleep: the waiting function, replaceable so tests need not wait.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = "OPENAI_API_KEY",
        *,
        temperature: float = 0.0,
        max_tokens: int | None = 512,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        max_workers: int = 4,
        system_prompt: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_workers = max_workers
        self.system_prompt = system_prompt
        self._sleep = sleep
        self._api_key: str | None = None
        if api_key_env is not None:
            key = os.environ.get(api_key_env, "")
            if not key:
                raise ValueError(
                    f"the judge API key variable {api_key_env} is not set; export it, or pass "
                    "api_key_env=None for a server that needs no key"
                )
            self._api_key = key

    def __repr__(self) -> str:
        # The key is deliberately left out so that logs and tracebacks never show it.
        return f"OpenAICompatibleBackend(url={self.url!r}, model={self.model!r})"

    def complete(self, prompts: list[str]) -> list[str]:
        """Returns one completion per prompt; raises JudgeBackendError once retries run out."""
        if self.max_workers == 1 or len(prompts) <= 1:
            return [self._complete_one(p) for p in prompts]
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(prompts))) as pool:
            return list(pool.map(self._complete_one, prompts))

    def _payload(self, prompt: str) -> bytes:
        messages = []
        if self.system_prompt is not None:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": prompt})
        body: dict[str, object] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
        }
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        return json.dumps(body).encode("utf-8")

    def _complete_one(self, prompt: str) -> str:
        headers = {"Content-Type": "application/json"}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key}"
        payload = self._payload(prompt)
        attempts = self.max_retries + 1
        last_error = ""
        for attempt in range(attempts):
            if attempt > 0:
                self._sleep(self.backoff_s * 2 ** (attempt - 1))
            request = urllib.request.Request(self.url, data=payload, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    raw = response.read()
            except urllib.error.HTTPError as err:
                snippet = err.read()[:_BODY_SNIPPET_CHARS].decode("utf-8", "replace")
                last_error = f"HTTP {err.code} from {self.url}: {snippet}"
                if err.code not in _RETRYABLE_STATUSES:
                    raise JudgeBackendError(f"judge request failed: {last_error}") from err
            except TimeoutError:
                # socket.timeout is TimeoutError since Python 3.10: a read that stalled.
                last_error = f"request to {self.url} timed out after {self.timeout_s:g} s"
            except urllib.error.URLError as err:
                if isinstance(err.reason, TimeoutError):  # the connect itself stalled
                    last_error = f"request to {self.url} timed out after {self.timeout_s:g} s"
                else:
                    last_error = f"could not reach {self.url}: {err.reason}"
            except OSError as err:  # connection reset or refused after the URL layer
                last_error = f"could not reach {self.url}: {err}"
            else:
                try:
                    return self._read_content(raw)
                except JudgeBackendError as err:
                    # A body that is not a chat completion (a proxy's error page, a cut-off
                    # reply) is a transient fault as often as a wrong endpoint: try again.
                    last_error = str(err)
        raise JudgeBackendError(f"judge request gave up after {attempts} attempts: {last_error}")

    def _read_content(self, raw: bytes) -> str:
        snippet = raw[:_BODY_SNIPPET_CHARS].decode("utf-8", "replace")
        try:
            body = json.loads(raw)
        except json.JSONDecodeError as err:
            raise JudgeBackendError(f"reply from {self.url} is not JSON: {snippet!r}") from err
        try:
            content = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as err:
            raise JudgeBackendError(
                f"reply from {self.url} has no choices[0].message.content: {snippet!r}"
            ) from err
        # Some servers send null content (e.g. when only reasoning was produced); the judge then
        # sees empty text and counts the verdict as unparseable instead of crashing.
        return "" if content is None else str(content)
