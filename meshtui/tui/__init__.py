"""The Textual dashboard: ``app.py`` (the app and ``run_dashboard``), ``screens/`` and
``widgets/`` (one per file), ``meshtui.tcss``. It talks only to ``meshtui.controller.core``'s
``Controller`` and the report, model and error dataclasses; nothing outside this package imports
Textual or Rich."""
