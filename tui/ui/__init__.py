"""The dashboard (Textual): the app, its screens, messages and key map. It renders the
core's immutable snapshots (:mod:`tunedeck.model`) with :mod:`tunedeck.widgets` and sends intents to
the core; nothing below it imports Textual."""
