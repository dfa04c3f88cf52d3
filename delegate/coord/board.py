"""Board deliberation for any number of voters: assess, discuss for N rounds, vote, resolve.

A phase advances only when it is complete: every voter assessed; in each discussion round every
voter posted; every voter voted. Verdicts come from shares of all voters (not of votes cast),
compared as exact fractions: `approved` at an approve share >= `approve`, else
`approved_with_review` at >= `review`, else `rejected` at a reject share >= `reject`, else
`escalate`. With five voters and the defaults that is the reference's 4/3/3 table.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from delegate.coord.store import CoordError, CoordStore
from delegate.core.errors import UsageError

VERDICTS = ("approve", "reject")
ASSESS, DISCUSS, VOTE, RESOLVE, RESOLVED = "assess", "discuss", "vote", "resolve", "resolved"
PHASE_WORDS = {
    ASSESS: "assessment",
    DISCUSS: "discussion",
    VOTE: "voting",
    RESOLVE: "ready to resolve",
    RESOLVED: "resolved",
}


class OutOfPhase(CoordError):
    exit_code = 65


class NoBoard(CoordError):
    exit_code = 66


@dataclass(frozen=True)
class Thresholds:
    approve: float = 0.8
    review: float = 0.6
    reject: float = 0.6


def verdict_of(approves: int, rejects: int, voters: int, t: Thresholds) -> str:
    """The pure rule: shares of all `voters`, exact."""
    if voters <= 0:
        raise UsageError("a board needs at least one voter")
    approve_share = Fraction(approves, voters)
    reject_share = Fraction(rejects, voters)
    if approve_share >= Fraction(str(t.approve)):
        return "approved"
    if approve_share >= Fraction(str(t.review)):
        return "approved_with_review"
    if reject_share >= Fraction(str(t.reject)):
        return "rejected"
    return "escalate"


def resolution_of(
    votes: dict[str, dict[str, Any]], voters: list[str], t: Thresholds
) -> dict[str, Any]:
    approves = [v for v in voters if votes.get(v, {}).get("verdict") == "approve"]
    rejects = [v for v in voters if votes.get(v, {}).get("verdict") == "reject"]
    verdict = verdict_of(len(approves), len(rejects), len(voters), t)
    if verdict.startswith("approved"):
        dissent = rejects
    elif verdict == "rejected":
        dissent = approves
    else:  # no side carried it: the smaller side dissents from the larger
        dissent = approves if len(approves) < len(rejects) else rejects
    return {
        "verdict": verdict,
        "tally": {"approve": len(approves), "reject": len(rejects), "voters": len(voters)},
        "votes": {v: votes[v]["verdict"] for v in voters if v in votes},
        "conditions": [
            {"condition": c, "author": v}
            for v in voters
            for c in votes.get(v, {}).get("conditions", [])
        ],
        "dissent": [
            {"voter": v, "verdict": votes[v]["verdict"], "confidence": votes[v].get("confidence")}
            for v in dissent
        ],
        "thresholds": {"approve": t.approve, "review": t.review, "reject": t.reject},
    }


def _check_voters(voters: list[str]) -> list[str]:
    cleaned = [v.strip() for v in voters if v.strip()]
    if not cleaned:
        raise UsageError("--voters names at least one voter (A,B,C)")
    if len(set(cleaned)) != len(cleaned):
        raise UsageError("--voters names each voter once")
    if any(len(v) > 128 or not v.isprintable() for v in cleaned):
        raise UsageError("a voter name is 1 to 128 printable characters")
    return cleaned


def open_board(
    store: CoordStore,
    voters: list[str],
    *,
    rounds: int = 1,
    thresholds: Thresholds = Thresholds(),
    proposal: str | None = None,
    opened_by: str = "",
) -> tuple[str, list[dict[str, Any]]]:
    voters = _check_voters(voters)
    if rounds < 0:
        raise UsageError("--rounds is 0 or more")
    for name in ("approve", "review", "reject"):
        if not 0 < getattr(thresholds, name) <= 1:
            raise UsageError(f"--{name} is a share above 0 and at most 1")
    if thresholds.review > thresholds.approve:
        raise UsageError("--review cannot be above --approve")
    board_id = "b-" + uuid.uuid4().hex[:8]
    with store.write() as conn:
        conn.execute(
            "INSERT INTO board (id, opened_ms, voters, rounds, approve, review, reject, proposal,"
            " phase) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                board_id,
                store.now(),
                json.dumps(voters),
                rounds,
                thresholds.approve,
                thresholds.review,
                thresholds.reject,
                proposal,
                ASSESS,
            ),
        )
        event = store.record(
            conn, "board_phase", opened_by or "board", board_id, phase=ASSESS, voters=voters
        )
    return board_id, [event]


@dataclass(frozen=True)
class Board:
    id: str
    voters: list[str]
    rounds: int
    thresholds: Thresholds
    proposal: str | None
    phase: str
    resolution: dict[str, Any] | None
    posts: list[tuple[str, str, int, dict[str, Any]]]  # voter, step, round, body

    def posted(self, step: str, round_: int = 0) -> set[str]:
        return {v for v, s, r, _ in self.posts if s == step and r == round_}

    def current_round(self) -> int:
        """The discussion round under way (1-based); rounds + 1 once discussion is over."""
        for n in range(1, self.rounds + 1):
            if self.posted(DISCUSS, n) != set(self.voters):
                return n
        return self.rounds + 1

    def computed_phase(self) -> str:
        if self.resolution is not None:
            return RESOLVED
        if self.posted(ASSESS) != set(self.voters):
            return ASSESS
        if self.current_round() <= self.rounds:
            return DISCUSS
        if self.posted(VOTE) != set(self.voters):
            return VOTE
        return RESOLVE

    def missing(self) -> list[str]:
        phase = self.computed_phase()
        step, round_ = {
            ASSESS: (ASSESS, 0),
            DISCUSS: (DISCUSS, self.current_round()),
            VOTE: (VOTE, 0),
        }.get(phase, ("", 0))
        if not step:
            return []
        done = self.posted(step, round_)
        return [v for v in self.voters if v not in done]

    def describe_phase(self) -> str:
        phase = self.computed_phase()
        if phase == DISCUSS:
            return f"discussion round {self.current_round()} of {self.rounds}"
        return PHASE_WORDS[phase]

    def status(self) -> dict[str, Any]:
        return {
            "board": self.id,
            "phase": self.computed_phase(),
            "round": self.current_round() if self.computed_phase() == DISCUSS else None,
            "rounds": self.rounds,
            "voters": self.voters,
            "missing": self.missing(),
            "proposal": self.proposal,
            "assessments": {v: b for v, s, _, b in self.posts if s == ASSESS},
            "discussion": [
                {"voter": v, "round": r, **b} for v, s, r, b in self.posts if s == DISCUSS
            ],
            "votes": {v: b for v, s, _, b in self.posts if s == VOTE},
            "resolution": self.resolution,
        }


def load(store: CoordStore, board_id: str | None = None, conn: Any = None) -> Board:
    """The board `board_id`, or the most recently opened board not yet resolved."""
    run = conn.execute if conn is not None else store.conn.execute
    if board_id is None:
        row = run(
            "SELECT id FROM board WHERE resolution IS NULL ORDER BY opened_ms DESC, rowid DESC"
            " LIMIT 1"
        ).fetchone()
        if row is None:
            raise NoBoard("no open board; open one with `delegate board open --voters A,B,C`")
        board_id = row[0]
    row = run(
        "SELECT id, voters, rounds, approve, review, reject, proposal, phase, resolution"
        " FROM board WHERE id = ?",
        (board_id,),
    ).fetchone()
    if row is None:
        raise NoBoard(f"no board {board_id!r}")
    posts = run(
        "SELECT voter, step, round, body FROM board_posts WHERE board = ? ORDER BY seq",
        (board_id,),
    ).fetchall()
    return Board(
        id=row[0],
        voters=json.loads(row[1]),
        rounds=row[2],
        thresholds=Thresholds(row[3], row[4], row[5]),
        proposal=row[6],
        phase=row[7],
        resolution=json.loads(row[8]) if row[8] else None,
        posts=[(v, s, r, json.loads(b)) for v, s, r, b in posts],
    )


def _refuse(board: Board, step: str) -> None:
    missing = board.missing()
    waiting = f": waiting for {', '.join(missing)}" if missing else ""
    raise OutOfPhase(
        f"board {board.id} is in {board.describe_phase()}, not {PHASE_WORDS[step]}{waiting}"
    )


def post(
    store: CoordStore, step: str, voter: str, body: dict[str, Any], board_id: str | None = None
) -> tuple[Board, list[dict[str, Any]]]:
    """An assessment, a discussion message or a vote, refused unless its phase is under way."""
    if step == VOTE and body.get("verdict") not in VERDICTS:
        raise UsageError(f"--verdict must be one of {', '.join(VERDICTS)}")
    with store.write() as conn:
        board = load(store, board_id, conn)
        if voter not in board.voters:
            raise UsageError(
                f"{voter!r} is not a voter of board {board.id} ({', '.join(board.voters)})"
            )
        phase = board.computed_phase()
        if phase != step:
            _refuse(board, step)
        round_ = board.current_round() if step == DISCUSS else 0
        if step != DISCUSS and voter in board.posted(step):
            raise OutOfPhase(f"{voter} already posted its {PHASE_WORDS[step]} on board {board.id}")
        conn.execute(
            "INSERT INTO board_posts (board, voter, step, round, body, ts_ms)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (board.id, voter, step, round_, json.dumps(body), store.now()),
        )
        after = load(store, board.id, conn)
        events = []
        new_phase = after.computed_phase()
        if new_phase != phase or (step == DISCUSS and after.current_round() != round_):
            conn.execute("UPDATE board SET phase = ? WHERE id = ?", (new_phase, board.id))
            events.append(
                store.record(
                    conn,
                    "board_phase",
                    voter,
                    board.id,
                    phase=new_phase,
                    round=after.current_round() if new_phase == DISCUSS else None,
                )
            )
        return after, events


def resolve(
    store: CoordStore, board_id: str | None = None, *, actor: str = ""
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The resolution, once every voter voted; asking again gives the same resolution."""
    with store.write() as conn:
        if board_id is None:  # the most recent board: resolved or not, so a repeat finds it
            row = conn.execute(
                "SELECT id FROM board ORDER BY opened_ms DESC, rowid DESC LIMIT 1"
            ).fetchone()
            board_id = row[0] if row else None
        board = load(store, board_id, conn)
        if board.resolution is not None:
            return board.resolution, []
        if board.computed_phase() != RESOLVE:
            _refuse(board, RESOLVE)
        votes = {v: b for v, s, _, b in board.posts if s == VOTE}
        resolution = {"board": board.id, **resolution_of(votes, board.voters, board.thresholds)}
        conn.execute(
            "UPDATE board SET resolution = ?, resolved_ms = ?, phase = ? WHERE id = ?",
            (json.dumps(resolution), store.now(), RESOLVED, board.id),
        )
        event = store.record(
            conn,
            "board_phase",
            actor or "board",
            board.id,
            phase=RESOLVED,
            verdict=resolution["verdict"],
            tally=resolution["tally"],
        )
        return resolution, [event]
