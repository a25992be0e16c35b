"""The row formats of agent session files (Claude Code, Codex, OpenAI, Anthropic,
Responses) parsed into normalised messages, with the feedback and skill loads they
show.

May import: the layers below expgit.sessions and expgit.sessions' root modules; no
other sub-package of expgit.sessions.
"""
