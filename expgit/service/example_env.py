"""ExampleEnvironment: the cases of cases files, rolled out by the configured LLM against
the experiences of the snapshot each request names (what ``expgit env serve`` serves).

Splits: each cases file is one split, named by ``--split NAME=FILE`` or else by the
file's stem (``cases/train.yaml`` -> ``train``). Every case served carries
``metadata.dataset``, ``domain`` and ``split`` (the service's, over the file's own).
A query names a split (None: every split, in the order given); a ``dataset`` or
``domain`` other than the service's, or an unknown split, is refused (404) rather than
answered with no cases. ``filters``: ``{key: value or [values]}``, each key matched
against the case's ``name``, ``task_signature`` or ``metadata[key]``.

A rollout reads only the ``repositories`` the service was started for (``--repo``,
compared after resolving symlinks): :meth:`ExampleEnvironment.admit` refuses any other
``policy_set.root_uri`` before anything is opened (the SDK answers 403), as a
repository's template overrides are rendered by the rollout. It opens the repository
at ``policy_set.root_uri`` (a local path; read-only), takes the snapshot of
``policy_set.metadata.commit`` (default: the tip of ``main``) and runs the case
through the in-process executor of ``expgit train``
(:func:`expgit.runs.wiring.rollout_executor`: one ``rollout`` call, the rubric's checks,
an ``judge`` call per ``llm_judge`` criterion; a case of a cases file that names a tool
environment, such as ``cases/airline_eval.yaml``, runs as a tool-calling conversation
in that environment). A request whose case names a tool environment or database this
service does not serve is refused: the service opens only its own fixtures. The
Rollout carries the request's ``policy_snapshot_id`` unchanged. The environment never
writes to any repository.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from expgit import __version__
from expgit.core.domain import Case, FreeMetadata, Rollout
from expgit.errors import InvalidInputError, NotFoundError, UsageError
from expgit.remote.protocol import CaseQuery, Health, RolloutRequest
from expgit.runs.wiring import LLMHandles, rollout_executor
from expgit.store.derived.snapshot import Snapshot
from expgit.store.repository import ExperienceRepository
from expgit.train.cases import load_cases
from expgit.train.context import ExecutionContext
from expgit.train.tools.binding import binding

SERVICE_NAME = "expgit-example-env"
DEFAULT_DATASET = "expgit-example"
DEFAULT_DOMAIN = "airline"
_OPEN_REPOSITORIES = 8


def load_splits(files: Sequence[Path], named: Mapping[str, Path] | None = None
                ) -> dict[str, list[Case]]:
    """Split name -> cases: each of ``files`` under its stem, each of ``named`` under its
    name. Refuses (InvalidInputError) a bad file or two files for one split name."""
    pairs = [(path.stem, path) for path in files] + list((named or {}).items())
    splits: dict[str, list[Case]] = {}
    for name, path in pairs:
        if not name.strip():
            raise InvalidInputError(f"{path}: a split needs a name (--split NAME=FILE)")
        if name in splits:
            raise InvalidInputError(f"split {name!r} is given twice ({path})",
                                    hint="name the splits with --split NAME=FILE")
        splits[name] = load_cases(path)
    if not splits:
        raise InvalidInputError("no cases to serve", hint="give --cases FILE")
    return splits


def _matches(case: Case, filters: Mapping[str, Any]) -> bool:
    for key, wanted in filters.items():
        value = (case.name if key == "name" else case.task_signature
                 if key == "task_signature" else case.metadata.get(key))
        allowed = wanted if isinstance(wanted, list) else [wanted]
        if value not in allowed:
            return False
    return True


class ExampleEnvironment:
    """Serves the cases of its splits and rolls a case out with ``llm`` against the
    experience snapshot a request names (see the module docstring). ``llm`` is read at
    each rollout, so it may be opened after construction (the service's start-up)."""

    def __init__(self, splits: Mapping[str, Sequence[Case]], llm: LLMHandles, *,
                 repositories: Sequence[Path],
                 dataset: str = DEFAULT_DATASET, domain: str = DEFAULT_DOMAIN) -> None:
        self.repositories = frozenset(os.path.realpath(path) for path in repositories)
        self.dataset = dataset
        self.domain = domain
        self.llm = llm
        self.splits = {
            split: [case.model_copy(update={"metadata": {
                **case.metadata, "dataset": dataset, "domain": domain, "split": split}})
                for case in cases]
            for split, cases in splits.items()}
        self._bindings = {bound for cases in splits.values() for case in cases
                          if (bound := binding(case)) is not None}
        self._repositories: OrderedDict[str, ExperienceRepository] = OrderedDict()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------ cases
    def query_cases(self, query: CaseQuery) -> Sequence[Case]:
        """Every case of the query's slice that passes its filters, in file order."""
        for field, asked, mine in (("dataset", query.dataset, self.dataset),
                                   ("domain", query.domain, self.domain)):
            if asked is not None and asked != mine:
                raise NotFoundError(f"unknown {field} {asked!r}; this service has {mine!r}")
        if query.split is not None and query.split not in self.splits:
            raise NotFoundError(f"unknown split {query.split!r}; this service has "
                                f"{', '.join(map(repr, self.splits))}")
        names = [query.split] if query.split is not None else list(self.splits)
        return [case for name in names for case in self.splits[name]
                if _matches(case, query.filters)]

    def describe(self) -> Health:
        """Name, version, dataset, domain, the splits with their sizes, the LLM and its
        calls so far (per stage, when the LLM has a usage meter)."""
        usage: FreeMetadata = {stage: u.calls
                               for stage, u in self.llm.structured.meter.by_stage().items()}
        return Health(service=SERVICE_NAME, version=__version__, metadata={
            "dataset": self.dataset, "domain": self.domain,
            "splits": {name: len(cases) for name, cases in self.splits.items()},
            "llm": self.llm.description, "llm_calls": usage})

    # --------------------------------------------------------------------- rollouts
    def admit(self, request: RolloutRequest) -> None:
        """Refuse (UsageError) a request for a repository this service does not serve."""
        self._served_path(request.policy_set.root_uri)

    def _served_path(self, root_uri: str) -> str:
        path = root_uri.removeprefix("file://")
        if not Path(path).is_absolute():
            raise InvalidInputError(f"policy_set.root_uri {root_uri[:200]!r}: an absolute "
                                    "path of a repository this service can read is needed")
        if os.path.realpath(path) not in self.repositories:
            raise UsageError(f"policy_set.root_uri {root_uri[:200]!r}: this service does not "
                             "serve that repository",
                             hint="start `expgit env serve` with --repo PATH for it")
        return path

    async def run_rollout(self, request: RolloutRequest) -> Rollout:
        """One rollout of ``request.case`` against the snapshot it names; ExpgitError
        (the execution fails with its message) if that snapshot cannot be read. A failed
        LLM call is a completed Rollout with ``error`` and a failed evaluation."""
        bound = binding(request.case)
        if bound is not None and bound not in self._bindings:
            raise InvalidInputError(f"case {request.case.name!r} names the environment "
                                    f"{bound[0]!r} with a database this service does not "
                                    "serve")
        repo, snapshot = await asyncio.to_thread(self._snapshot, request)
        executor = rollout_executor(repo, self.llm, concurrency=1)
        context = ExecutionContext(request.execution_context.policy_snapshot_id,
                                   metadata=dict(request.execution_context.metadata))
        [rollout] = await executor.execute([request.case], snapshot, context)
        return rollout

    def _snapshot(self, request: RolloutRequest) -> tuple[ExperienceRepository, Snapshot]:
        ref = request.policy_set
        repo = self._repository(ref.root_uri, ref.metadata.get("experiences_root"))
        commit = ref.metadata.get("commit")
        if commit is not None and not isinstance(commit, str):
            raise InvalidInputError("policy_set.metadata.commit must be a commit id (text)")
        try:
            return repo, repo.snapshot(commit)
        except NotFoundError:
            raise NotFoundError(f"{ref.root_uri}: no commit {commit!r} in this repository",
                                hint="the environment must see the trainer's repository") \
                from None

    def _repository(self, root_uri: str, experiences_root: object) -> ExperienceRepository:
        """The repository at ``root_uri``, opened once (again if its experiences root
        is not the one the request names, i.e. its expgit.toml changed)."""
        path = self._served_path(root_uri)
        with self._lock:
            repo = self._repositories.get(path)
            if repo is not None and experiences_root in (None, repo.root):
                self._repositories.move_to_end(path)
                return repo
        if not Path(path).exists():
            raise NotFoundError(f"policy_set.root_uri {root_uri!r}: no such repository here")
        repo = ExperienceRepository.open(path)
        with self._lock:
            self._repositories[path] = repo
            while len(self._repositories) > _OPEN_REPOSITORIES:
                self._repositories.popitem(last=False)
        return repo
