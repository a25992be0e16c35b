"""RemoteCaseLoader: the cases of an environment service (``POST /v1/cases/query``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx

from expgit.core.domain import Case
from expgit.errors import ExpgitError, UsageError
from expgit.remote.http import DEFAULT_REQUEST_TIMEOUT, call_json, make_client
from expgit.remote.protocol import CasePage, CaseQuery
from expgit.train.context import PipelineContext

MAX_PAGES = 100_000


class RemoteCaseLoader:
    """Loads the cases of ``dataset`` / ``domain`` / ``split`` (and ``filters``) from an
    environment service, page by page (``limit`` cases per page), following
    ``next_cursor`` until it is null; stops early after ``max_cases`` cases if given.

    Every page is fetched before the first batch is yielded, so a broken service raises
    (RemoteServiceError / ExpgitError naming the page) before any case runs, as the
    CaseLoader contract asks. Refused: a cursor that repeats (a service bug that would
    loop forever), a case name seen twice, no cases at all. Batches hold ``batch_size``
    cases (default: ``limit``), in the service's order; no batch is empty.
    """

    def __init__(self, url: str, *, dataset: str | None = None, domain: str | None = None,
                 split: str | None = None, limit: int = 100,
                 filters: dict[str, Any] | None = None, batch_size: int | None = None,
                 max_cases: int | None = None, token: str | None = None,
                 transport: httpx.AsyncBaseTransport | None = None,
                 timeout: float = DEFAULT_REQUEST_TIMEOUT) -> None:
        if not 1 <= limit <= 1000:
            raise UsageError(f"page limit must be between 1 and 1000, not {limit}")
        if batch_size is not None and batch_size < 1:
            raise UsageError(f"batch size must be at least 1, not {batch_size}")
        if max_cases is not None and max_cases < 1:
            raise UsageError(f"max cases must be at least 1, not {max_cases}")
        self.url = url
        self.query = CaseQuery(dataset=dataset, domain=domain, split=split, limit=limit,
                               filters=dict(filters or {}))
        self.batch_size = batch_size or limit
        self.max_cases = max_cases
        self.token = token
        self.transport = transport
        self.timeout = timeout

    def _describe(self) -> str:
        q = self.query
        parts = [f"{k}={v}" for k, v in (("dataset", q.dataset), ("domain", q.domain),
                                          ("split", q.split)) if v is not None]
        return f"{self.url} ({', '.join(parts) or 'all cases'})"

    async def load(self) -> list[Case]:
        """Every case, all pages followed; raises ExpgitError as described above."""
        cases: list[Case] = []
        seen_names: dict[str, int] = {}
        seen_cursors: set[str] = set()
        cursor: str | None = None
        async with make_client(self.url, token=self.token, transport=self.transport,
                               timeout=self.timeout) as client:
            for page_number in range(MAX_PAGES):
                query = self.query.model_copy(update={"cursor": cursor})
                page = await call_json(client, "POST", "/v1/cases/query", CasePage,
                                       body=query)
                for case in page.cases:
                    if case.name in seen_names:
                        raise ExpgitError(
                            f"{self._describe()}: case {case.name!r} returned twice (pages "
                            f"{seen_names[case.name]} and {page_number}); the service's "
                            "paging is broken")
                    seen_names[case.name] = page_number
                    cases.append(case)
                if self.max_cases is not None and len(cases) >= self.max_cases:
                    return cases[:self.max_cases]
                if page.next_cursor is None:
                    break
                if page.next_cursor in seen_cursors or page.next_cursor == cursor:
                    raise ExpgitError(
                        f"{self._describe()}: next_cursor {page.next_cursor!r} repeats "
                        f"on page {page_number}; the service's paging would loop forever")
                seen_cursors.add(page.next_cursor)
                cursor = page.next_cursor
            else:
                raise ExpgitError(f"{self._describe()}: more than {MAX_PAGES} pages")
        if not cases:
            raise ExpgitError(f"{self._describe()}: the service has no such cases",
                              hint="check the dataset, domain, split and filters")
        return cases

    async def batches(self, context: PipelineContext) -> AsyncIterator[list[Case]]:
        cases = await self.load()
        for start in range(0, len(cases), self.batch_size):
            yield cases[start:start + self.batch_size]
