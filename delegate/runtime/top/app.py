"""`delegate top` (and `ps --watch`): the jobs, live, full screen in the terminal (textual).

This is the one module that imports textual (an import-linter contract says so). The rows come
from `runtime.dashboard.live.LiveTable`, the dashboard's own follower: one all-jobs bus
subscription wakes it as an event lands, the registry's mtimes tell it of new and ended jobs,
and tmux is asked again on the monitor's rhythm. It calls us back on its thread; we post a
message to the screen's loop, so nothing here polls for events.

Keys: Enter a job's pane tail and events, `c` cancel (y/n), `a` approve or `d` deny (with an
optional reason) the job's waiting permission request, `s` send a line, `l` logs, `/` filter,
`q` quit. `a`/`d` answer as `delegate approve` does (the same service, the person at this
terminal as the decision's maker, the job's agent host when it runs on one).
"""

from __future__ import annotations

from functools import partial
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Input, Log, Static

from delegate.adapters.bus import Bus, open_bus
from delegate.core.errors import DelegateError
from delegate.core.timefmt import human_duration
from delegate.runtime.dashboard.live import LiveTable
from delegate.runtime.dashboard.snapshot import TERMINAL_STATES, waiting_of
from delegate.runtime.top import rows as view
from delegate.services.jobs.approvals import WaitingRequest
from delegate.services.jobs.host_approvals import approve
from delegate.services.jobs.submit import cancel
from delegate.services.session import send
from delegate.services.state import State

CLOCK_S = 1.0  # the TIME column of running jobs counts on between updates
STATE_STYLES = {
    "running": "green",
    "queued": "yellow",
    "pending": "cyan",
    "error": "red",
    "failed": "red",
    "cancelled": "magenta",
    "completed": "dim",
}
PERMISSION_STYLE = "bold black on yellow"
DENIED_STYLE = "yellow"  # completed, but its agent CLI denied tool calls: not a plain success


class RowsChanged(Message):
    """The live table changed: `delta` as `LiveTable` hands it (rows, removed, note, full)."""

    def __init__(self, delta: dict[str, Any]) -> None:
        super().__init__()
        self.delta = delta


class Confirm(ModalScreen[bool]):
    """A yes/no question, wrapped to the box: `y` answers yes, anything bound else no."""

    DEFAULT_CSS = """
    Confirm { align: center middle; }
    Confirm > VerticalScroll {
        width: auto; max-width: 76; height: auto; max-height: 90%; border: round $warning;
    }
    Confirm Static { width: auto; padding: 1 2; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
        Binding("escape", "answer(False)", "No", show=False),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with VerticalScroll():  # a long call scrolls, never cut
            yield Static(f"{self.question}  [y/n]", markup=False)

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class TextPage(Screen[None]):
    """A job's pane tail and events, or its logs: scroll with the arrows, `q` or Esc back."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("q", "app.pop_screen", "Back"),
    ]

    def __init__(self, title: str, lines: list[str]) -> None:
        super().__init__()
        self.title_text = title
        self.lines = lines

    def compose(self) -> ComposeResult:
        yield Static(self.title_text, id="page-title", markup=False)
        yield Log(id="page", highlight=False)
        yield Footer()

    def on_mount(self) -> None:
        page = self.query_one(Log)
        page.write_lines(self.lines or ["(nothing yet)"])
        page.scroll_end(animate=False)


class JobsTable(DataTable[Text]):
    """The jobs, one row each; Enter (DataTable's select) opens the job's detail."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "select_cursor", "Detail")]


class TopApp(App[int]):
    """The live view over one state directory."""

    TITLE = "delegate top"
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    #head { height: 1; background: $primary-background; }
    #jobs { height: 1fr; }
    #prompt { height: 1; border: none; padding: 0 1; display: none; }
    #prompt.shown { display: block; }
    #page-title { height: 1; background: $primary-background; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("c", "cancel_job", "Cancel"),
        Binding("s", "send_line", "Send"),
        Binding("l", "logs", "Logs"),
        Binding("slash", "filter", "Filter"),
        Binding("a", "permission('approve')", "Approve"),
        Binding("d", "permission('deny')", "Deny"),
        Binding("escape", "close_prompt", "Close", show=False),
        Binding("q", "quit_top", "Quit"),
    ]

    def __init__(
        self, state: State, *, recent: int = 10, group: str | None = None, bus: Bus | None = None
    ) -> None:
        super().__init__()
        self.state = state
        self.recent = recent
        self.group = group
        self._bus = bus
        self._live: LiveTable | None = None
        self._rows: dict[str, dict[str, Any]] = {}  # job id -> row, in the order first seen
        self._note: str | None = None
        self._filter = ""
        self._prompt_for: tuple[str, str] | None = None  # ("filter" | "send" | "deny", job id)
        self._deny_request: str | None = None  # the request a "deny" prompt answers
        self._shown = view.columns()

    # --- layout -----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static("delegate top", id="head", markup=False)
        yield JobsTable(id="jobs", cursor_type="row")
        yield Input(id="prompt")
        yield Footer()

    def on_mount(self) -> None:
        self._lay_out()
        if self._bus is None:
            self._bus = open_bus(self.state.default_bus_url(), env=self.state.env)
        self._live = LiveTable(self.state, self._bus, recent=self.recent)
        self._live.start()
        first = self._live.listen(self._heard)
        self._apply(first)
        self.set_interval(CLOCK_S, self._tick)
        self.query_one(JobsTable).focus()

    def on_unmount(self) -> None:
        if self._live is not None:
            self._live.unlisten(self._heard)
            self._live.stop()
        if self._bus is not None:
            self._bus.close()

    def _event_width(self) -> int:
        return view.event_width(self.size.width or 80, self._shown)

    def _lay_out(self) -> None:
        """The columns for the screen's width (the free one takes what is left), and the rows."""
        table = self.query_one(JobsTable)
        table.clear(columns=True)
        self._shown = view.columns(self.size.width or None)
        width = self._event_width()
        for column in self._shown:
            table.add_column(column.label, width=column.width or width, key=column.key)
        self._sync(set(self._rows))

    def on_resize(self) -> None:
        self._lay_out()

    # --- the live rows ----------------------------------------------------------------------

    def _heard(self, delta: dict[str, Any]) -> None:
        """LiveTable's callback, on its own thread: hand the change to the screen's loop."""
        delta = {**delta, "rows": view.with_attempts(self.state, delta["rows"])}
        self.post_message(RowsChanged(delta))

    def on_rows_changed(self, message: RowsChanged) -> None:
        self._apply(message.delta)

    def _apply(self, delta: dict[str, Any]) -> None:
        if delta.get("full"):
            self._rows = {}
            delta = {**delta, "rows": view.with_attempts(self.state, delta["rows"])}
        for key in delta.get("removed", ()):
            self._rows.pop(key, None)
        changed = set()
        for row in delta["rows"]:
            if self.group is None or row.get("group") == self.group:
                self._rows[row["job_id"]] = row
                changed.add(row["job_id"])
        self._note = delta.get("note")
        self._sync(changed)

    def _visible(self) -> list[str]:
        return [k for k, r in self._rows.items() if view.matches(r, self._filter)]

    def _sync(self, changed: set[str]) -> None:
        """Bring the DataTable to the rows: update changed cells and append new rows in place,
        or rebuild it (keeping the cursor on its job) when rows went or the order moved."""
        table = self.query_one(JobsTable)
        want = self._visible()
        have = [key.value for key in table.rows]
        if want[: len(have)] == have:
            for key in have:
                if key in changed:
                    for column, value in zip(self._shown, self._cells(key), strict=True):
                        table.update_cell(key, column.key, value)
            for key in want[len(have) :]:
                table.add_row(*self._cells(key), key=key)
        else:
            current = self.selected_job()
            table.clear()
            for key in want:
                table.add_row(*self._cells(key), key=key)
            if current in want:
                table.move_cursor(row=want.index(current))
        self._show_head()

    def _cells(self, key: str) -> list[Text]:
        row = self._rows[key]
        width = self._event_width()
        texts = [Text(cell) for cell in view.cells(row, self._shown, event_width=width)]
        if view.needs_permission(row):
            for text in texts:
                text.stylize(PERMISSION_STYLE)
        else:
            state = str(row.get("state"))
            denied = state == "completed" and bool(row.get("denied_tools"))
            texts[1].stylize(DENIED_STYLE if denied else STATE_STYLES.get(state, ""))
            if row.get("state") in TERMINAL_STATES:
                texts[0].stylize("dim")
        return texts

    def _tick(self) -> None:
        """Count on the TIME of jobs still going, and the countdown of an agent CLI's API retry
        (a clock, not a look for events)."""
        table = self.query_one(JobsTable)
        keys = [c.key for c in self._shown]
        for key in (k.value for k in table.rows):
            row = self._rows.get(key or "")
            if row is not None and row.get("state") not in TERMINAL_STATES:
                table.update_cell(key or "", "time", Text(human_duration(view.elapsed(row))))
                if row.get("agent_retry") and "event" in keys:
                    event = self._cells(key or "")[keys.index("event")]
                    table.update_cell(key or "", "event", event)

    def _show_head(self) -> None:
        text = f"delegate top · {view.counts(list(self._rows.values()))}"
        if self.group:
            text += f" · group {self.group}"
        if self._filter:
            text += f" · filter: {self._filter}"
        if self._note:
            text += f" · {self._note}"
        self.query_one("#head", Static).update(view.cut(text, max(20, self.size.width or 80)))

    # --- keys -------------------------------------------------------------------------------

    def selected_job(self) -> str | None:
        table = self.query_one(JobsTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        return key.value

    def on_data_table_row_selected(self, _event: JobsTable.RowSelected) -> None:
        self.action_detail()

    def action_detail(self) -> None:
        job_id = self.selected_job()
        if job_id is None:
            return
        try:
            lines = view.detail_lines(self.state, job_id, width=self.size.width or 80)
        except DelegateError as exc:
            self.notify(str(exc), severity="error")
            return
        self.push_screen(TextPage(f"job {job_id}: pane and events (q back)", lines))

    def action_logs(self) -> None:
        job_id = self.selected_job()
        if job_id is None:
            return
        try:
            lines = view.log_lines(self.state, job_id, width=self.size.width or 80)
        except DelegateError as exc:
            self.notify(str(exc), severity="error")
            return
        self.push_screen(TextPage(f"job {job_id}: logs (q back)", lines))

    def action_cancel_job(self) -> None:
        job_id = self.selected_job()
        if job_id is None:
            return
        row = self._rows.get(job_id, {})
        if row.get("state") in TERMINAL_STATES:
            self.notify(f"job {job_id} has ended ({row.get('state')})")
            return
        question = f"Cancel job {job_id} ({row.get('state')}, {row.get('agent') or '-'})?"
        self.push_screen(Confirm(question), partial(self._cancel_if, job_id))

    def _cancel_if(self, job_id: str, yes: bool | None) -> None:
        if yes:
            self._cancel(job_id)

    @work(thread=True, exclusive=False)
    def _cancel(self, job_id: str) -> None:
        """Off the screen's loop: killing the pane's processes may take a moment."""
        try:
            result = cancel(self.state, job_id)
        except DelegateError as exc:
            self.notify(f"job {job_id} not cancelled: {exc}", severity="error")
            return
        note = f" ({result.session_note})" if result.session_note else ""
        self.notify(f"job {job_id} cancelled{note}")

    def action_send_line(self) -> None:
        job_id = self.selected_job()
        if job_id is None:
            return
        session = self._rows.get(job_id, {}).get("session")
        if not session or session == "-":
            self.notify(f"job {job_id} has no session to type into", severity="warning")
            return
        self._open_prompt("send", job_id, f"line to type into {session} (Enter sends, Esc not)")

    def action_filter(self) -> None:
        self._open_prompt("filter", "", "filter: words in id, state, agent, group, event")

    def _open_prompt(self, mode: str, job_id: str, placeholder: str) -> None:
        prompt = self.query_one("#prompt", Input)
        prompt.placeholder = placeholder
        prompt.value = self._filter if mode == "filter" else ""
        prompt.add_class("shown")
        self._prompt_for = (mode, job_id)
        prompt.focus()

    def action_close_prompt(self) -> None:
        if self._prompt_for is None:
            return
        if self._prompt_for[0] == "filter":
            self._set_filter("")
        self._hide_prompt()

    def _hide_prompt(self) -> None:
        self._prompt_for = None
        prompt = self.query_one("#prompt", Input)
        prompt.remove_class("shown")
        self.query_one(JobsTable).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if self._prompt_for is not None and self._prompt_for[0] == "filter":
            self._set_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if self._prompt_for is None:
            return
        mode, job_id = self._prompt_for
        self._hide_prompt()
        if mode == "send":
            self._send(job_id, event.value)
        elif mode == "deny":
            request_id, self._deny_request = self._deny_request, None
            self._answer(job_id, request_id, deny=True, reason=event.value.strip() or None)

    def _send(self, job_id: str, text: str) -> None:
        session = str(self._rows.get(job_id, {}).get("session") or "")
        try:
            send(self.state, session, text)
        except DelegateError as exc:
            self.notify(str(exc), severity="error")
            return
        self.notify(f"sent to {session}")

    def _set_filter(self, text: str) -> None:
        self._filter = text
        self._sync(set())

    def action_permission(self, what: str) -> None:
        """`a` allows, `d` denies (asking a reason) the selected job's oldest waiting request,
        once the person said yes to its whole call, shown wrapped, never cut."""
        job_id = self.selected_job()
        if job_id is None:
            return
        try:
            waiting = waiting_of(self.state, self.state.registry.get(job_id))
        except DelegateError as exc:
            self.notify(f"job {job_id}: {exc}", severity="error")
            return
        if not waiting:  # say so now, not after a question was answered
            self.notify(f"job {job_id}: nothing is waiting for a decision", severity="warning")
            return
        request = waiting[0]
        verb = "Deny" if what == "deny" else "Allow"
        question = (
            f"{verb} job {job_id}'s {request.tool} call?\n\n{request.call or request.summary}"
        )
        self.push_screen(
            Confirm(question), partial(self._permission_if, job_id, request, what == "deny")
        )

    def _permission_if(
        self, job_id: str, request: WaitingRequest, deny: bool, yes: bool | None
    ) -> None:
        if not yes:
            return
        if not deny:
            self._answer(job_id, request.request_id, deny=False, reason=None)
            return
        self._deny_request = request.request_id
        asks = f"deny {request.tool} {request.summary}: why? (Enter denies, Esc not)"
        self._open_prompt("deny", job_id, view.cut(asks, 70))

    @work(thread=True, exclusive=False)
    def _answer(
        self, job_id: str, request_id: str | None, *, deny: bool, reason: str | None
    ) -> None:
        """Off the screen's loop: the wrapper (or the agent host) takes a moment to confirm."""
        try:
            answered = approve(self.state, job_id, deny=deny, reason=reason, request_id=request_id)
        except DelegateError as exc:
            self.notify(f"job {job_id}: {exc}", severity="error")
            return
        verdict = "denied" if deny else "allowed"
        where = f", confirmed by host {answered.host}" if answered.host else ""
        self.notify(f"{verdict}: {answered.tool} {answered.summary} (job {job_id}{where})")

    def action_quit_top(self) -> None:
        self.exit(0)


def run_top(state: State, *, recent: int, group: str | None = None) -> int:
    """Run the view until `q`; the terminal is left as it was (textual's alternate screen)."""
    app = TopApp(state, recent=recent, group=group)
    app.run()
    return app.return_code or 0
