#!/usr/bin/env bash
# The main job on example_repo: create an experience repository from it, propose three
# edits (gradients), merge them into one reviewable proposal, review it, apply it to main,
# and show the audit trail. Usage: scripts/run_example.sh [WORK_DIR]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${1:-$(mktemp -d "${TMPDIR:-/tmp}/expgit-example.XXXXXX")}
repo="$work/experiences"
demo="$here/example_repo/demo"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "expgit init $repo --from example_repo"
expgit init "$repo" --from "$here/example_repo"
cd "$repo"
expgit list

step "expgit propose: three gradients, each a commit on its own branch"
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

step "expgit merge --all: one proposal commit plus its PR description"
proposal=$(expgit merge --all --pr-body "$work/pr-body.md")
echo "proposal: $proposal (PR description written to $work/pr-body.md)"

step "expgit review $proposal"
expgit review "$proposal"

step "expgit apply $proposal"
expgit apply "$proposal"

step "expgit log -n 1"
expgit log -n 1
expgit validate
echo
echo "Done. The experience repository is $repo (try: git -C $repo log --stat)"
