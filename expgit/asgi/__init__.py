"""What every expgit HTTP service shares: request guards (auth, body limit, one-line error
bodies) and a uvicorn runner on a real socket. Knows nothing of training.

May import: expgit.errors, expgit.resources, expgit.core, expgit.git, expgit.store,
expgit.hooks and expgit.llm (the layers below it).
"""
