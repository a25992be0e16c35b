#!/usr/bin/env bash
# The shell logic of expgit's example CI jobs (examples/github/*.yml,
# examples/gitlab/.gitlab-ci.yml). Copy it into your experience repository as
# ci/expgit-ci.sh, next to the workflow that calls it.
#
#   bash ci/expgit-ci.sh require NAME...   fail, in one line naming it, on the first NAME
#                                          that is not set; EXPGIT_INSTALL must also be
#                                          pinned (see below)
#   bash ci/expgit-ci.sh gate github|gitlab
#                                          re-measure the pull request's head against its
#                                          base branch (expgit eval --compare --gate), post
#                                          or update its one comment, exit as the gate:
#                                          0 passed, 6 failed or undecided, else the error
#
# EXPGIT_INSTALL is what `pip install` gets, pinned by you: a git URL at a commit
#   expgit @ git+https://github.com/OWNER/expgit@<40-hex commit>
# or your own index and an exact version
#   --index-url https://pypi.example.com/simple expgit==0.1.0
# never a bare name, which whoever registers it first would serve to the job.
#
# gate reads: EXPGIT_EVAL_CASES (default cases/eval.yaml); on GitHub GH_TOKEN, GH_REPO
# (owner/name), PR_NUMBER, BASE_REF; on GitLab GITLAB_TOKEN, CI_PROJECT_ID,
# CI_MERGE_REQUEST_IID, CI_MERGE_REQUEST_TARGET_BRANCH_NAME. It writes gate.md (the
# comment) and gate.json (the run report).
set -eo pipefail

MARKER="<!-- expgit-gate -->"

die() {
    echo "expgit-ci: $*" >&2
    exit 1
}

pinned() {
    local spec=$1
    [[ $spec =~ ^(expgit[[:space:]]*@[[:space:]]*)?git\+[^[:space:]@]+(@[^[:space:]@/]+)?@[0-9a-f]{40}([#][^[:space:]]*)?$ ]] && return 0
    [[ $spec =~ --index-url[[:space:]=][^[:space:]]+ && $spec =~ (^|[[:space:]])expgit==[0-9A-Za-z.+!-]+($|[[:space:]]) ]]
}

require() {
    local name
    for name in "$@"; do
        [ -n "${!name}" ] || die "$name is not set: add it to the CI settings (a secret or a variable; a fork's pull request gets none)"
    done
    for name in "$@"; do
        if [ "$name" = EXPGIT_INSTALL ] && ! pinned "$EXPGIT_INSTALL"; then
            die "EXPGIT_INSTALL is not pinned: give 'expgit @ git+URL@<40-hex commit>' or '--index-url URL expgit==VERSION'"
        fi
    done
}

# The id of the first comment whose body holds the marker, from the forge's JSON list
# (pages of it, back to back); nothing if there is none.
find_comment() {
    python -c '
import json, sys
text, marker, found = sys.stdin.read(), sys.argv[1], []
decoder, at = json.JSONDecoder(), 0
while at < len(text):
    if text[at].isspace():
        at += 1
        continue
    page, at = decoder.raw_decode(text, at)
    found += [c["id"] for c in page if marker in (c.get("body") or "")]
print(found[0] if found else "")
' "$MARKER"
}

comment() {
    local forge=$1 file=$2 cli thread one method id
    if [ "$forge" = github ]; then
        cli=gh thread="repos/$GH_REPO/issues/$PR_NUMBER/comments"
        one="repos/$GH_REPO/issues/comments" method=PATCH
    else
        cli=glab thread="projects/$CI_PROJECT_ID/merge_requests/$CI_MERGE_REQUEST_IID/notes"
        one=$thread method=PUT
    fi
    id=$("$cli" api --paginate "$thread" | find_comment)
    if [ -n "$id" ]; then
        "$cli" api --method "$method" "$one/$id" --field "body=@$file" >/dev/null
        echo "expgit-ci: updated the gate comment $id" >&2
    else
        "$cli" api --method POST "$thread" --field "body=@$file" >/dev/null
        echo "expgit-ci: posted the gate comment" >&2
    fi
}

gate() {
    local forge=$1 base status=0
    case $forge in
        github) require GH_TOKEN GH_REPO PR_NUMBER BASE_REF; base=$BASE_REF ;;
        gitlab) require GITLAB_TOKEN CI_PROJECT_ID CI_MERGE_REQUEST_IID CI_MERGE_REQUEST_TARGET_BRANCH_NAME
                base=$CI_MERGE_REQUEST_TARGET_BRANCH_NAME ;;
        *) die "gate: give the forge, github or gitlab" ;;
    esac
    # the base branch as the forge has it now (a reviewer's push moved only the head)
    git fetch --quiet --update-head-ok origin "+refs/heads/$base:refs/heads/$base"
    rm -f gate.md gate.json
    expgit eval --cases "${EXPGIT_EVAL_CASES:-cases/eval.yaml}" --compare "$base" HEAD \
        --gate --comment gate.md --report gate.json || status=$?
    if [ -s gate.md ]; then  # measured (an eval that could not run leaves none)
        comment "$forge" gate.md
    fi
    return "$status"
}

command=${1:-}
shift || true
case $command in
    require) require "$@" ;;
    gate) gate "$@" ;;
    *) die "usage: expgit-ci.sh require NAME... | gate github|gitlab" ;;
esac
