"""The one exception type of distopt's calls."""

import re
from typing import List, Optional

# "host:port", or "[v6 address]:port".
_WORKER = re.compile(r"worker (\[[^\]\s]+\]:\d+|[^\s:\[\]]+:\d+):")
_APPLIED = re.compile(r"Applied on: (.*?)\.?$")


class Error(RuntimeError):
    """A call to a distopt worker failed.

    Attributes:
      code: the gRPC status code's name ("NOT_FOUND", "UNAVAILABLE", ...).
      code_value: its number.
      worker: the first worker the message names ("host:port"), or None.
      workers: every worker the message names, in order.
      applied: for a DistributedOptimizer step that failed on some workers,
        the workers that did apply it (an empty list when none did); None for
        other calls.
      message: the message, which names the worker and the call.
    """

    def __init__(self, code_value: int, code: str, message: str):
        self.code_value = code_value
        self.code = code
        self.message = message
        self.workers: List[str] = _WORKER.findall(message)
        self.worker: Optional[str] = self.workers[0] if self.workers else None
        self.applied: Optional[List[str]] = None
        applied = _APPLIED.search(message)
        if applied is not None:
            named = applied.group(1)
            self.applied = [] if named == "none" else named.split(", ")
        super().__init__(f"{self.code}: {message}")

    def __reduce__(self):
        return (Error, (self.code_value, self.code, self.message))
