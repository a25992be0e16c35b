"""expgit's HTTP services: the training service (``expgit serve``) and the example
environment service (``expgit env serve``), built on :mod:`expgit.asgi`."""
