"""The HTTP request policy: who a request is, which rules apply, what it is told. Internal."""
