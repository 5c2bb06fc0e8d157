"""What the Compare and Tune screens share: a campaign that runs detached on the host.

A campaign is started from the screen or found still running there on opening
(:meth:`CampaignScreen._reattach`); a worker follows its events (:meth:`CampaignScreen._follow`:
each one a :class:`CampaignEvent`, its end a :class:`CampaignEnded`); a lost link is said on the
status line until the host answers again (:class:`tunedeck.hostops.liveness.LinkWatch`); a cancel
asks first, Cancel the default. Leaving the screen or the dashboard detaches: the campaign goes on.

Below :attr:`CampaignScreen.NARROW` columns a result takes the whole width: the side panel
(the widget with the class ``campaign-side``) is hidden while one is shown, and ``p``
(:meth:`CampaignScreen.action_toggle_side`) brings it back, as does a key that needs it.

A subclass names what it runs (:attr:`~CampaignScreen.NOUN`), the key that reopens it, the
cancel's question and the status line's widget, and fills in the hooks: how a running job is
followed (:meth:`~CampaignScreen._run_class`, :meth:`~CampaignScreen._reattached`), an event
(:meth:`~CampaignScreen._show_event`), a report (:meth:`~CampaignScreen._finished`) and the
end of a campaign that left none (:meth:`~CampaignScreen._no_report`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable, ClassVar

from rich.text import Text
from textual import events, on, work
from textual.message import Message
from textual.screen import Screen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from tunedeck.ab.events import ABEvent
from tunedeck.hostops.liveness import LinkWatch
from tunedeck.ui.screens.modals import ConfirmModal

if TYPE_CHECKING:
    from tunedeck.services.jobrun import JobRun

log = logging.getLogger(__name__)


class CampaignEvent(Message):
    """One event of the followed campaign."""

    def __init__(self, event: ABEvent) -> None:
        super().__init__()
        self.event = event
        """The campaign's event."""


class CampaignLink(Message):
    """The link to the campaign's host was lost (``error``) or answers again (``error`` None)."""

    def __init__(self, error: str | None) -> None:
        super().__init__()
        self.error = error
        """The failure, or None: the host answers again."""


class CampaignEnded(Message):
    """The follow ended: ``report`` (the campaign's result) or ``error`` (why there is none)."""

    def __init__(self, report: Any, error: Text | None = None) -> None:
        super().__init__()
        self.report = report
        """The campaign's result, or None."""
        self.error = error
        """Why there is no result (the status line's words)."""


class CampaignScreen(Screen[None]):
    """A screen that starts, follows and cancels a campaign running detached on the host."""

    DEFAULT_CSS = """
    /* below NARROW columns a result takes the whole width: the side panel comes back with p */
    CampaignScreen.-narrow.-result .campaign-side { display: none; }
    CampaignScreen.-narrow.-result.-side .campaign-side { display: block; }
    """

    #: what the screen runs, in its words (``A/B``, ``campaign``)
    NOUN: ClassVar[str] = "campaign"
    #: the dashboard's key that opens the screen again
    REOPEN_KEY: ClassVar[str] = ""
    #: what the cancel asks
    CANCEL_QUESTION: ClassVar[str] = ""
    #: the status line (a Static)
    STATUS_ID: ClassVar[str] = ""
    #: below this many columns a result hides the side panel (``p`` shows it)
    NARROW: ClassVar[int] = 110

    def __init__(
        self,
        *,
        start_campaign: Callable[..., Awaitable[Any]] | None,
        profiles: list[str] | None,
        status: str,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.start_campaign = start_campaign
        """Starts a campaign (default: the screen's own start on the app's host)."""
        self._profiles = profiles
        self.campaign: Any = None
        """The campaign being followed (True while it starts; None when idle)."""
        self.link = LinkWatch()
        """The link to the followed campaign's host: while lost, the status line says so."""
        self._status_text = Text(status)

    # ------------------------------------------------------------------ layout
    def on_resize(self, event: events.Resize) -> None:
        self._set_narrow(event.size.width < self.NARROW)

    def _set_narrow(self, narrow: bool) -> None:
        if narrow != self.has_class("-narrow"):
            self.set_class(narrow, "-narrow")
            self._narrow_changed(narrow)

    def _narrow_changed(self, narrow: bool) -> None:
        """The terminal crossed :attr:`NARROW` columns (``narrow``: now below)."""

    def _result_shown(self) -> None:
        """A result is on screen: on a narrow terminal it takes the width (``p`` shows the side)."""
        self.add_class("-result")
        self.remove_class("-side")

    def _side_hidden(self) -> bool:
        """Show the side panel where a result hides it; True when it was hidden (the key that
        needed it does nothing more: it acts on the next press)."""
        if self.has_class("-narrow", "-result") and not self.has_class("-side"):
            self.add_class("-side")
            return True
        return False

    def action_toggle_side(self) -> None:
        self.toggle_class("-side")

    def _profile_names(self) -> list[str]:
        """The profiles the screen was given, else the store's (an unreadable store: none, and the
        status line says why)."""
        if self._profiles is not None:
            return self._profiles
        from tunedeck.profiles.model import ProfileError
        from tunedeck.profiles.store import ProfileStore

        try:
            return list(ProfileStore().names())
        except (ProfileError, OSError) as e:
            log.warning("profiles unavailable: %s", e)
            self.call_after_refresh(self._status, f"profiles unavailable: {e}")
            return []

    def _fill_profiles(self, list_id: str, names: list[str], prompt: Callable[[str], str | Text] = str) -> None:
        """The profile list ``#list_id``: one option per name (shown as ``prompt(name)``, its id the
        name), the first highlighted."""
        ol = self.query_one(f"#{list_id}", OptionList)
        for n in names:
            ol.add_option(Option(prompt(n), id=n))
        if names:
            ol.highlighted = 0

    # ------------------------------------------------------------------ status
    def _status(self, text: str | Text) -> None:
        # runner lines and errors quote profile names, paths and messages: never markup
        self._status_text = Text(text) if isinstance(text, str) else text
        self._show_status()

    def _show_status(self) -> None:
        shown = self._status_text
        if self.link.is_lost:
            shown = shown.copy()
            shown.append(f"\nlink lost — reconnecting (the {self.NOUN} goes on on the host)", style="bold yellow")
        self.query_one(f"#{self.STATUS_ID}", Static).update(shown)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel_campaign":
            return True if self.campaign is not None and self.campaign is not True else None
        return True

    # ------------------------------------------------------------------ start
    def _app_host(self) -> Any:
        host = getattr(self.app, "host", None)
        if host is None:
            raise RuntimeError("the dashboard has no host to run on")
        return host

    async def _started(self, starting: Awaitable[Any]) -> Any:
        """The campaign ``starting`` gives, or None: why not is on the status line (the log has the rest)."""
        try:
            return await starting
        except Exception as e:  # one line on the screen; the log has the rest
            log.warning("%s not started: %s", self.NOUN, e, exc_info=not isinstance(e, (ValueError, OSError)))
            self._not_started(f"cannot start the {self.NOUN}: {e}")
            return None

    def _not_started(self, why: str) -> None:
        self.campaign = None
        self.refresh_bindings()
        self._status(Text(why, style="bold"))

    async def _confirm(self, question: str) -> bool:
        modal = ConfirmModal(question, title="Stop a running server?", action="Stop it", cancel="Keep it", danger=True)
        answer: bool | None = await self.app.push_screen_wait(modal)  # App[object] is invariant
        return bool(answer)

    # ------------------------------------------------------------------ follow
    def _run_class(self) -> type[JobRun]:
        """What follows this screen's campaigns (:class:`~tunedeck.services.abrun.ABRun`, …)."""
        raise NotImplementedError

    async def _reattached(self, run: JobRun) -> None:
        """What the screen shows of a campaign found running, before its events follow."""

    @work(group="campaign-reattach", exit_on_error=False)
    async def _reattach(self) -> None:
        """Follow a campaign still running on the app's host (started earlier, maybe elsewhere)."""
        from tunedeck.hostops.hosts import HostError

        host = getattr(self.app, "host", None)
        if host is None or self.campaign is not None:
            return
        run_class = self._run_class()
        try:
            job = await run_class.running_job(host)
        except HostError as e:
            log.info("no %s to reattach: %s", self.NOUN, e)
            return
        if job is None or self.campaign is not None:
            return
        run = run_class(host, job)
        self.campaign = run
        self.refresh_bindings()
        await self._reattached(run)
        await self._follow(run)

    async def _follow(self, campaign: Any) -> None:
        campaign.on_link_error = lambda e, attempt: self.post_message(CampaignLink(str(e)))
        campaign.on_link_ok = lambda: self.post_message(CampaignLink(None))
        try:
            async for ev in campaign.events():
                self.post_message(CampaignEvent(ev))
        except Exception as e:  # the link died for good, or the job folder went away
            log.warning("%s follow ended: %s", self.NOUN, e, exc_info=True)
            lost = f"lost the {self.NOUN}: {e}; it goes on on the host ({self.REOPEN_KEY} reopens this screen)"
            self.post_message(CampaignEnded(None, Text(lost, style="bold")))
            return
        rep = campaign.report
        if rep is None:
            self.post_message(CampaignEnded(None, Text(self._no_report(campaign), style="bold")))
            return
        self.post_message(CampaignEnded(rep))

    def _no_report(self, campaign: Any) -> str:
        """Why ``campaign`` ended without a report, for the status line."""
        raise NotImplementedError

    @on(CampaignEvent)
    def _campaign_event(self, msg: CampaignEvent) -> None:
        self._show_event(msg.event)

    def _show_event(self, ev: ABEvent) -> None:
        """One event of the followed campaign on screen."""
        raise NotImplementedError

    @on(CampaignLink)
    def _link_changed(self, msg: CampaignLink) -> None:
        # after the follow its end says the rest; while lost, the line is up already
        if self.campaign is not None and self.link.tell(msg.error):
            self._show_status()

    @on(CampaignEnded)
    def _campaign_ended(self, msg: CampaignEnded) -> None:
        self.link.ok()
        self.campaign = None
        self.refresh_bindings()
        if msg.report is None:
            self._status(msg.error or Text(f"the {self.NOUN} ended", style="bold"))
            return
        self._finished(msg.report)

    def _finished(self, report: Any) -> None:
        """The campaign's report on screen."""
        raise NotImplementedError

    # ------------------------------------------------------------------ cancel
    def action_cancel_campaign(self) -> None:
        """Ask first (Cancel has the focus); only a yes cancels the running campaign."""
        campaign = self.campaign
        if campaign is None or campaign is True:
            return

        def done(ok: bool | None) -> None:
            if ok and self.campaign is campaign:
                self._status(f"cancelling: stopping the server the {self.NOUN} started…")
                self._cancel_worker(campaign)

        self.app.push_screen(
            ConfirmModal(
                self.CANCEL_QUESTION,
                title=f"Cancel the {self.NOUN}",
                action=f"Cancel the {self.NOUN}",
                cancel="Keep running",
                danger=True,
            ),
            done,
        )

    @work(group="campaign-cancel", exit_on_error=False)
    async def _cancel_worker(self, campaign: Any) -> None:
        try:
            msg = await campaign.cancel()
        except Exception as e:  # noqa: BLE001 - shown, the campaign is still followed
            log.warning("%s cancel failed: %s", self.NOUN, e)
            self.notify(f"cancel failed: {e}", severity="error", markup=False)
            return
        self.notify(str(msg), markup=False)


__all__ = ["CampaignEnded", "CampaignEvent", "CampaignLink", "CampaignScreen"]
