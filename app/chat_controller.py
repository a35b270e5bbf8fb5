"""Chat logic without widgets: conversations, sending, streaming into the store, worker lifecycle.

Order of writes is what makes history crash-proof: the user message and an empty assistant
message (status 'streaming') are committed before the request leaves for the worker; streamed
text is written at most every ``save_interval_s`` and once more at the end. If the worker dies,
the partial reply stays with status 'error' and the reason.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

from app.attachments import image_refusal, image_tokens
from app.i18n import tr
from app.keystore import get_api_key
from app.settings import Settings
from app.store import Attachment, Message, Store
from app.worker_client import WorkerClient, new_request_id
from engine import protocol as P

DEMO_MODEL = "demo"
# How long closing the app waits for the worker to unload, which includes writing the current conversation's state.
SHUTDOWN_TIMEOUT_S = 60.0


@dataclass
class ActiveReply:
    request_id: str
    message: Message
    last_saved: float = 0.0


def estimate_text_tokens(text: str) -> int:
    """A rough count for text not yet seen by the tokenizer (~4 characters per token)."""
    return (len(text) + 3) // 4


class ChatController(QObject):
    conversations_changed = Signal()
    conversation_opened = Signal(int)            # conversation id (messages must be re-shown)
    message_updated = Signal(object)             # Message
    busy_changed = Signal(bool)
    banner = Signal(str, str, str, str)          # kind, text, action, action label
    model_changed = Signal(object)               # protocol.ModelLoaded or None
    load_progress = Signal(float, str)
    context_changed = Signal(int, int)           # used, limit
    reply_started = Signal(str)                  # request id
    reply_finished = Signal(object, object)      # Message, protocol.Finished
    worker_event = Signal(object)                # every event, for the settings page and dashboard

    def __init__(self, store: Store, settings: Settings, client: WorkerClient, save_interval_s: float = 0.25) -> None:
        super().__init__()
        self.store = store
        self.settings = settings
        self.client = client
        self.save_interval_s = save_interval_s
        self.model: P.ModelLoaded | None = None
        self.conversation_id: int | None = None
        self.active: ActiveReply | None = None
        self.load_request: str | None = None
        self.loading = False
        self.draft_tokens = 0
        self.last_worker_error = ""
        client.ready.connect(self._on_ready)
        client.event.connect(self._on_event)
        client.crashed.connect(self._on_crash)
        self.interrupted = store.mark_interrupted()

    def announce_startup(self) -> None:
        """Called once the views are connected: report replies a previous crash interrupted."""
        if self.interrupted:
            self.banner.emit("warning", tr("{n} reply was interrupted when Monorail last stopped; its text was kept.")
                             .format(n=self.interrupted), "", "")

    # -- worker lifecycle ---------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self.active is not None

    def start(self) -> None:
        self.client.start()

    def restart_worker(self) -> None:
        self.banner.emit("info", tr("Restarting the engine…"), "", "")
        self.client.restart()

    def model_spec(self) -> tuple[str, dict]:
        s = self.settings
        options = s.engine_options()
        if s.backend == "remote":
            options["api_key"] = get_api_key(s.remote_url)
            return s.remote_model or "remote", options
        return (s.model or DEMO_MODEL), options

    def load_model(self) -> None:
        model, options = self.model_spec()
        self.model = None
        self.model_changed.emit(None)
        self.load_progress.emit(0.0, tr("Loading {model}…").format(model=model))
        self.loading = True
        try:
            self.load_request = self.client.load(model, options)
        except RuntimeError as exc:   # no worker: say so instead of pretending to load
            self.loading = False
            self.load_progress.emit(1.0, "")
            self.banner.emit("error", str(exc), "restart", tr("Restart engine"))

    def unload_model(self) -> None:
        if self.busy:
            self.stop()
        if self.client.alive:
            self.client.send(P.Unload(new_request_id("unload")))
        self.model = None
        self.model_changed.emit(None)
        self.banner.emit("info", tr("Model unloaded. Reload it from the File menu (Ctrl+R)."), "", "")

    def _on_ready(self, _pid: int) -> None:
        self.load_model()

    def _on_crash(self, cause: str) -> None:
        if self.last_worker_error:   # what the worker said before it went: more useful than an exit code
            cause = f"{cause}: {self.last_worker_error}"
            self.last_worker_error = ""
        if self.active is not None:
            self._finish_active("error", error=tr("the engine worker stopped ({cause})").format(cause=cause))
        self.model = None
        self.loading = False
        self.model_changed.emit(None)
        self.load_progress.emit(1.0, "")
        self.banner.emit("error", tr("The engine stopped unexpectedly ({cause}). Your conversation is saved.")
                         .format(cause=cause), "restart", tr("Restart engine"))

    # -- events -----------------------------------------------------------------------------
    def _on_event(self, ev) -> None:
        self.worker_event.emit(ev)
        if isinstance(ev, P.WorkerError) and ev.request_id is None:   # not tied to a request: start-up, protocol
            self.last_worker_error = ev.message
            self.banner.emit("error", tr("Engine: {msg}").format(msg=ev.message), "restart", tr("Restart engine"))
        elif isinstance(ev, P.Progress) and ev.request_id == self.load_request:
            self.load_progress.emit(ev.fraction, ev.message)
        elif isinstance(ev, P.ModelLoaded) and ev.request_id == self.load_request:
            self.loading = False
            self.model = ev
            self.load_progress.emit(1.0, "")
            self.model_changed.emit(ev)
            if getattr(ev, "api_error", ""):
                self.banner.emit("warning", tr("The local API server did not start ({why}); the app works "
                                               "without it.").format(why=ev.api_error), "settings", tr("Open settings"))
            elif getattr(ev, "api_url", ""):
                self.banner.emit("info", tr("Serving this model to other apps at {url}").format(url=ev.api_url),
                                 "", "")
            if ev.random_weights:   # last: the banner that matters most stays
                self.banner.emit("warning", tr("Demo model loaded: it has random weights, so its replies are "
                                               "meaningless. Pick a real model in Settings → Model."),
                                 "settings", tr("Open settings"))
            self.update_context()
        elif isinstance(ev, P.WorkerError) and ev.request_id == self.load_request:
            self.loading = False
            self.load_progress.emit(1.0, "")
            self.banner.emit("error", tr("Could not load the model: {msg}").format(msg=ev.message),
                             "settings", tr("Open settings"))
        elif self.active is not None and getattr(ev, "request_id", None) == self.active.request_id:
            self._on_reply_event(ev)

    def _on_reply_event(self, ev) -> None:
        m = self.active.message
        now = time.time()
        if isinstance(ev, P.Delta):
            if ev.channel == "reasoning":
                if m.reasoning_started_at is None:
                    m.reasoning_started_at = now
                m.reasoning += ev.text
            else:
                if m.reasoning_started_at is not None and m.reasoning_ended_at is None:
                    m.reasoning_ended_at = now
                m.content += ev.text
            if now - self.active.last_saved >= self.save_interval_s:
                self._save_active()
            self.message_updated.emit(m)
        elif isinstance(ev, P.WorkerError):
            m.error = ev.message
        elif isinstance(ev, P.Finished):
            status = {"stop": "done", "length": "done", "cancelled": "cancelled"}.get(ev.reason, "error")
            m.prompt_tokens = ev.prompt_tokens
            m.cached_tokens = ev.cached_tokens
            m.completion_tokens = ev.completion_tokens
            m.ttft_s, m.prefill_tok_s, m.decode_tok_s = ev.ttft_s, ev.prefill_tok_s, ev.decode_tok_s
            m.spec_accept_rate = ev.spec_accept_rate
            if ev.reason == "length" and not m.error:
                m.error = tr("stopped at the output token limit")
            self._finish_active(status, finished=ev)

    def _save_active(self) -> None:
        m = self.active.message
        self.store.update_message(m.id, content=m.content, reasoning=m.reasoning,
                                  reasoning_started_at=m.reasoning_started_at, reasoning_ended_at=m.reasoning_ended_at)
        self.active.last_saved = time.time()

    def _finish_active(self, status: str, error: str = "", finished: P.Finished | None = None) -> None:
        m = self.active.message
        m.status = status
        m.finished_at = time.time()
        if m.reasoning_started_at is not None and m.reasoning_ended_at is None:
            m.reasoning_ended_at = m.finished_at
        if error:
            m.error = error
        self.store.update_message(m.id, content=m.content, reasoning=m.reasoning, status=m.status, error=m.error,
                                  reasoning_started_at=m.reasoning_started_at, reasoning_ended_at=m.reasoning_ended_at,
                                  finished_at=m.finished_at, prompt_tokens=m.prompt_tokens, cached_tokens=m.cached_tokens,
                                  completion_tokens=m.completion_tokens, ttft_s=m.ttft_s,
                                  prefill_tok_s=m.prefill_tok_s, decode_tok_s=m.decode_tok_s,
                                  spec_accept_rate=m.spec_accept_rate)
        self.active = None
        self.message_updated.emit(m)
        self.busy_changed.emit(False)
        self.reply_finished.emit(m, finished)
        self.update_context()
        self.conversations_changed.emit()

    # -- conversations ------------------------------------------------------------------------
    def new_conversation(self) -> None:
        if self.busy:
            self.stop()
        self.conversation_id = None
        self.conversation_opened.emit(-1)
        self.update_context()

    def open_conversation(self, conversation_id: int) -> None:
        if conversation_id == self.conversation_id:
            return
        if self.busy:
            self.stop()
        self.conversation_id = conversation_id
        self.conversation_opened.emit(conversation_id)
        self.update_context()

    def messages(self) -> list[Message]:
        if self.conversation_id is None:
            return []
        msgs = self.store.messages(self.conversation_id)
        if self.active is not None:   # the in-memory reply is newer than its last save
            msgs = [self.active.message if m.id == self.active.message.id else m for m in msgs]
        return msgs

    def delete_conversation(self, conversation_id: int) -> None:
        if conversation_id == self.conversation_id:
            if self.busy:
                self.stop()
            self.conversation_id = None
            self.conversation_opened.emit(-1)
        self.store.delete_conversation(conversation_id)
        self.conversations_changed.emit()

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self.store.rename_conversation(conversation_id, title)
        self.conversations_changed.emit()

    # -- sending ---------------------------------------------------------------------------------
    def can_send(self) -> str:
        """'' when a request can go out now, else the reason to show."""
        if self.busy:
            return tr("Wait for the reply to finish, or stop it.")
        if not self.client.alive:
            return tr("The engine is not running. Restart it from the banner.")
        if self.model is None:
            return tr("The model is still loading.") if self.loading else \
                tr("No model is loaded. Reload it (Ctrl+R) or pick one in Settings.")
        return ""

    def send(self, text: str, attachments: list[Attachment], enable_thinking: bool) -> str:
        """Returns '' on success or the reason it was refused (nothing is stored then)."""
        reason = self.can_send()
        if reason:
            return reason
        if attachments and image_refusal(self.model):
            return image_refusal(self.model)
        if self.conversation_id is None:
            title = " ".join(text.split())[:60] or tr("Image")
            self.conversation_id = self.store.create_conversation(title).id
            self.conversation_opened.emit(self.conversation_id)
        user = self.store.add_message(self.conversation_id, "user", text, attachments=list(attachments))
        self.message_updated.emit(user)
        self._start_reply(enable_thinking)
        return ""

    def _engine_messages(self) -> list[dict]:
        out: list[dict] = []
        if self.settings.system_prompt:
            out.append({"role": "system", "content": self.settings.system_prompt})
        for m in self.store.messages(self.conversation_id):
            if m.role == "assistant" and (m.status == "streaming" or not m.content):
                continue   # the reply being generated, or a failed empty one
            if m.attachments:
                parts = [{"type": "image", "image": a.data} for a in m.attachments]
                parts.append({"type": "text", "text": m.content})
                out.append({"role": m.role, "content": parts})
            else:
                out.append({"role": m.role, "content": m.content})
        return out

    def _start_reply(self, enable_thinking: bool) -> None:
        reply = self.store.add_message(self.conversation_id, "assistant", "", status="streaming",
                                       model=self.model.name if self.model else "")
        messages = self._engine_messages()
        try:
            rid = self.client.generate(messages, self.settings.sampling_params(), enable_thinking)
        except RuntimeError as exc:
            self.store.update_message(reply.id, status="error", error=str(exc))
            reply.status, reply.error = "error", str(exc)
            self.message_updated.emit(reply)
            return
        self.active = ActiveReply(rid, reply, time.time())
        self.message_updated.emit(reply)
        self.busy_changed.emit(True)
        self.reply_started.emit(rid)
        self.conversations_changed.emit()

    def stop(self) -> None:
        if self.active is not None:
            self.client.cancel(self.active.request_id)

    def regenerate(self, message_id: int, enable_thinking: bool) -> str:
        reason = self.can_send()
        if reason:
            return reason
        self.store.delete_messages_from(self.conversation_id, message_id)
        self.conversation_opened.emit(self.conversation_id)
        self._start_reply(enable_thinking)
        return ""

    def edit_and_resend(self, message_id: int, text: str, attachments: list[Attachment],
                        enable_thinking: bool) -> str:
        reason = self.can_send()
        if reason:
            return reason
        self.store.delete_messages_from(self.conversation_id, message_id)
        self.conversation_opened.emit(self.conversation_id)
        return self.send(text, attachments, enable_thinking)

    # -- context meter --------------------------------------------------------------------------
    def context_used(self) -> int:
        """Tokens of this conversation (exact up to the last finished reply, estimated after it),
        thinking and image tokens included, plus the draft in the composer."""
        msgs = self.messages()
        used, start = 0, 0
        for i in range(len(msgs) - 1, -1, -1):
            m = msgs[i]
            if m.role == "assistant" and m.prompt_tokens:
                used, start = m.prompt_tokens + (m.completion_tokens or 0), i + 1
                break
        if start == 0 and self.settings.system_prompt:
            used += estimate_text_tokens(self.settings.system_prompt)
        for m in msgs[start:]:
            used += 4 + estimate_text_tokens(m.content) + estimate_text_tokens(m.reasoning)
            used += sum(image_tokens(a.width, a.height) for a in m.attachments)
        return used + self.draft_tokens

    def set_draft(self, text: str, attachments: list[Attachment]) -> None:
        self.draft_tokens = (estimate_text_tokens(text) + sum(image_tokens(a.width, a.height) for a in attachments)
                             if text or attachments else 0)
        self.update_context()

    def update_context(self) -> None:
        limit = self.model.context_limit if self.model else 0
        self.context_changed.emit(self.context_used(), limit)

    def shutdown(self) -> None:
        if self.active is not None:
            self._save_active()
        # the worker writes the current conversation's state to disk as it unloads (Settings → Conversation cache
        # (disk)): a 128K-token one is ~4 GB, seconds on an SSD; past the timeout it is stopped and recomputes later
        self.client.stop(timeout=SHUTDOWN_TIMEOUT_S)
