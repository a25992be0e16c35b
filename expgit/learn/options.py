"""The thresholds of the offline learning report (``expgit learn``): the ``[learn]``
section of ``expgit.toml`` (:class:`~expgit.store.settings.LearnSettings`, which says what
each means), each overridable for one run by a flag of the same name."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import ValidationError

from expgit.errors import UsageError
from expgit.store.settings import LearnSettings

LearnOptions = LearnSettings


def learn_options(settings: LearnSettings,
                  overrides: Mapping[str, float | int | None] | None = None) -> LearnOptions:
    """The ``[learn]`` section, with each override that is not None in its place
    (validated as the section is)."""
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    if not given:
        return settings  # validated when the settings were read
    unknown = set(given) - set(LearnSettings.model_fields)
    if unknown:
        raise UsageError(f"unknown learn threshold(s): {', '.join(sorted(unknown))}")
    try:
        return LearnSettings.model_validate(settings.model_dump() | given)
    except ValidationError as exc:
        raise UsageError(f"invalid learn threshold: {exc.errors()[0]['msg']}") from None
