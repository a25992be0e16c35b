"""What one ``expgit sessions run`` did: the report the run fills and the CLI prints."""

from __future__ import annotations

from pydantic import BaseModel, Field

from expgit.train.reports.run_report import UsageReport


class SessionsRunReport(BaseModel):
    branch: str
    llm: bool
    segmented: list[str] = Field(default_factory=list)  # session keys
    pending: dict[str, str] = Field(default_factory=dict)  # session key -> reason
    superseded: list[str] = Field(default_factory=list)  # fingerprints
    labelled: list[str] = Field(default_factory=list)  # fingerprints
    trained: list[str] = Field(default_factory=list)  # fingerprints
    gradients: list[str] = Field(default_factory=list)
    proposals: list[str] = Field(default_factory=list)
    invalidation_proposals: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    commits: list[str] = Field(default_factory=list)  # on the sessions branch
    main_before: str | None = None
    main_after: str | None = None
    notes: list[str] = Field(default_factory=list)
    llm_description: str | None = None
    usage: UsageReport = Field(default_factory=UsageReport)
