"""``expgit serve --remote``: the training service pushes each update's trajectories,
gradients and proposal to the shared remote, and the rest at shutdown."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from conftest import assert_only_fast_forwards, fsck, git, shared_server
from training_service_support import JSON, auth, handles, topic_rollout, training_script

from expgit.asgi.server import start_server
from expgit.service.training_app import ServiceLimits, create_training_app


@pytest.mark.slow
def test_the_service_pushes_what_it_trains_to_the_remote(tmp_path: Path) -> None:
    server, (path,) = shared_server(tmp_path, 1)
    topics = ("zebra", "yak")
    chat = training_script(topics)
    app = create_training_app(path, handles(chat), token=None, remote="origin",
                              limits=ServiceLimits(shutdown_grace_seconds=30))
    with start_server(app) as running:
        for topic in topics:
            answer = httpx.post(f"{running.url}/v1/train/rollouts",
                                content=topic_rollout(topic).model_dump_json(), headers=JSON)
            assert answer.status_code == 202, answer.text
        health = httpx.get(f"{running.url}/health", headers=auth()).json()
        assert health["metadata"]["remote"]["remote"] == "origin"
    # the shutdown flushed the batch: one update, pushed, then the side branches
    chat.assert_done()
    trajectories = git(server, "ls-tree", "-r", "--name-only",
                       "expgit/trajectories:trajectories")
    assert len([n for n in trajectories.split() if n.endswith(".md")]) == 2
    gradients = git(path, "for-each-ref", "refs/heads/expgit/gradients/")
    proposals = git(path, "for-each-ref", "refs/heads/expgit/proposals/")
    assert len(gradients.splitlines()) == 2 and len(proposals.splitlines()) == 1
    assert git(server, "for-each-ref", "refs/heads/expgit/gradients/") == gradients
    assert git(server, "for-each-ref", "refs/heads/expgit/proposals/") == proposals
    fsck(server)
    assert_only_fast_forwards(server)
