"""Shared HTTP service infrastructure of expgit's services (environment SDK, training
service): request guards (auth, body limit, error bodies) and a uvicorn runner."""
