"""Redaction of secrets and personal data: the text redactor (text, with its entropy
and name patterns) and the bounds of messages, rollouts and cases (messages).

May import: expgit.errors and the root modules of expgit.core.
"""
