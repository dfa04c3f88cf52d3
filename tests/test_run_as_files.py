"""`run_as`: what the root wrapper makes for the agent's user cannot be turned against root
(issue 30, item 1). The agent's user, even from a process left over from an earlier job, may
plant nothing where the wrapper writes: the link it tries is refused, and the file a link
would have pointed at stays as it was. Needs root (the test creates, and removes, its user)."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

import pytest

from delegate.adapters import publish_socket
from delegate.adapters.publish_socket import PublishServer
from delegate.runtime.wrapper import AgentIdentity

from .test_run_as import agent_user  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="creating a user needs root")


def _as_user(name: str, action) -> int:
    """Run `action()` in a child process as user `name`; its exit status (0: it worked)."""
    entry = pwd.getpwnam(name)
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
            action()
            os._exit(0)
        except PermissionError:
            os._exit(13)
        except BaseException:
            os._exit(70)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_the_agent_cannot_plant_a_link_where_the_wrapper_writes_its_prompt(
    agent_user: str,  # noqa: F811 - the fixture
    tmp_path: Path,
):
    target = tmp_path / "root-owned.conf"
    target.write_text("root's own\n")
    os.chmod(target, 0o644)
    prompt = tmp_path / "prompt"
    prompt.write_text("the task\n")
    identity = AgentIdentity(pwd.getpwnam(agent_user), "0123abcd")
    try:
        planted = _as_user(agent_user, lambda: os.symlink(target, identity.folder / "prompt"))
        assert planted == 13  # refused: the folder is not the agent's to change
        argv = identity.hand_over_prompt(["agent", str(prompt)], prompt)
        copy = identity.folder / "prompt"
        assert argv == ["agent", str(copy)]
        info = copy.lstat()
        assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
        assert (info.st_uid, copy.read_text()) == (identity.uid, "the task\n")
        assert (target.read_text(), target.stat().st_uid, stat.S_IMODE(target.stat().st_mode)) == (
            "root's own\n",
            0,
            0o644,
        )
        # and what is in it is still the agent's to read, through the folder it cannot list
        assert _as_user(agent_user, lambda: copy.read_bytes()) == 0
        assert _as_user(agent_user, lambda: os.listdir(identity.folder)) == 13
    finally:
        identity.clean_up()


def test_a_link_swapped_in_for_the_socket_changes_no_file_of_roots(
    agent_user: str,  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
):
    """The moment between binding the socket and giving it to the agent: a link swapped in
    there (what an agent owning the folder could do) must not pass root's chown on."""
    identity = AgentIdentity(pwd.getpwnam(agent_user), "0123abcd")
    target = tmp_path / "root-owned.conf"
    target.write_text("x\n")
    path = identity.folder / "publish.sock"
    bind = publish_socket.listen_private

    def bind_then_swap(where: str, backlog: int = 16):
        listener = bind(where, backlog)
        os.rename(where, f"{where}.moved")
        os.symlink(target, where)  # the swap, at the worst moment
        return listener

    monkeypatch.setattr(publish_socket, "listen_private", bind_then_swap)
    try:
        server = PublishServer(path, lambda r: {"ok": True}, owner=identity.owner)
        server.close()
        assert (target.stat().st_uid, target.stat().st_gid) == (0, 0)
    finally:
        identity.clean_up()
