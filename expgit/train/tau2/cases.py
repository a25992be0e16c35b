"""The case source ``tau2:DOMAIN:SPLIT[#ID,ID,...]``: tau2-bench's tasks as cases.

``tau2:airline:test`` is the 20 tasks of the test split (``split_tasks.json``),
``tau2:airline:train`` the 30 others, ``tau2:airline:base`` all 50; ``#2,6,8`` keeps the
tasks of those ids (tau2's task ids, which must be in the split). Each task becomes a
case bound to the ``tau2-airline`` environment, whose user is simulated from the task's
``user_scenario``, and whose rubric is tau2's reward (a ``tau2_reward`` check) and, only
where ``reward_basis`` names ``NL_ASSERTION``, an LLM judge of the ``nl_assertions``.
An unknown domain, split or id is an InvalidInputError (exit 5) naming the valid ones.
"""

from __future__ import annotations

from expgit.core.checks import LLMJudgeCheck, Tau2RewardCheck
from expgit.core.domain import Case, Rubric, RubricCriterion
from expgit.errors import InvalidInputError
from expgit.train.tau2 import data
from expgit.train.tau2.environment import KIND

SCHEME = "tau2:"
_SUPPORTED_BASIS = frozenset({"DB", "COMMUNICATE", "NL_ASSERTION"})


def is_tau2_source(spec: str) -> bool:
    return spec.startswith(SCHEME)


def parse_source(spec: str) -> tuple[str, str, list[str] | None]:
    """(domain, split, the chosen ids or None) of ``spec``; InvalidInputError if it is
    not of the form ``tau2:DOMAIN:SPLIT[#ID,...]``."""
    body, _, chosen = spec.removeprefix(SCHEME).partition("#")
    domain, _, split = body.partition(":")
    if not domain or not split or ":" in split:
        raise InvalidInputError(f"{spec!r}: a tau2 case source is tau2:DOMAIN:SPLIT or "
                                "tau2:DOMAIN:SPLIT#ID,ID,...", hint="e.g. tau2:airline:test")
    if domain not in data.DOMAINS:
        raise InvalidInputError(f"{spec!r}: unknown tau2 domain {domain!r}; known: "
                                f"{', '.join(data.DOMAINS)}")
    ids = None
    if "#" in spec:
        ids = [part.strip() for part in chosen.split(",")]
        if not ids or any(not part for part in ids):
            raise InvalidInputError(f"{spec!r}: after '#' come task ids separated by "
                                    "commas, such as #2,6,8")
    return domain, split, ids


def case_name(domain: str, task_id: str) -> str:
    return f"tau2-{domain}-{task_id}"


def task_case(domain: str, split: str, task: data.Task) -> Case:
    """The case of one task (module docstring)."""
    criteria = task.evaluation_criteria
    basis = list(criteria.reward_basis) if criteria is not None else []
    unknown = sorted(set(basis) - _SUPPORTED_BASIS)
    if unknown:
        raise InvalidInputError(f"tau2 {domain} task {task.id}: reward_basis "
                                f"{', '.join(unknown)} is not supported here")
    rubric = [RubricCriterion(
        name="tau2-reward", description=f"tau2's reward over {', '.join(basis) or 'nothing'}",
        check=Tau2RewardCheck(task_id=task.id))]
    nl = (criteria.nl_assertions or []) if criteria is not None else []
    if "NL_ASSERTION" in basis and nl:
        rubric.append(RubricCriterion(
            name="tau2-nl-assertions", description="tau2's nl_assertions (LLM judge)",
            check=LLMJudgeCheck(target="transcript", instructions=(
                "Pass only if the agent satisfies every one of these expected outcomes:\n"
                + "\n".join(f"- {line}" for line in nl)))))
    scenario = task.user_scenario.get("instructions")
    reason = scenario.get("reason_for_call") if isinstance(scenario, dict) else None
    name = case_name(domain, task.id)
    return Case(
        name=name, task_signature=f"tau2-{domain}",
        input={"user_scenario": task.instructions(),
               **({"reason_for_call": reason} if isinstance(reason, str) else {})},
        rubric=Rubric(name=name, description=task.purpose, criteria=rubric),
        metadata={"environment": {"name": KIND, "database": str(data.db_path(domain))},
                  "tau2": {"domain": domain, "split": split, "task_id": task.id,
                           "reward_basis": [*basis], "nl_assertions": [*nl]}})


def load_tau2_cases(spec: str) -> list[Case]:
    """The cases of ``spec`` (module docstring), in the split's order or the ids' order."""
    domain, split, chosen = parse_source(spec)
    data.server()  # the extra first: without it, exit 2 with the install command
    splits = data.splits(domain)
    if split not in splits:
        raise InvalidInputError(f"{spec!r}: unknown split {split!r} of tau2 {domain}; "
                                f"known: {', '.join(sorted(splits))}")
    in_split = splits[split]
    tasks = data.tasks(domain)
    if chosen is not None:
        missing = [i for i in chosen if i not in in_split]
        if missing:
            raise InvalidInputError(
                f"{spec!r}: no task {', '.join(missing)} in the {split} split of tau2 "
                f"{domain}; its {len(in_split)} task ids are {', '.join(in_split)}")
        doubled = sorted({i for i in chosen if chosen.count(i) > 1})
        if doubled:
            raise InvalidInputError(f"{spec!r}: task {', '.join(doubled)} named twice")
    return [task_case(domain, split, tasks[i]) for i in (chosen or in_split)]
