"""The protocols spoken to GUIs and programs: GTP (``gtp/``), UCI (``uci``) and the JSON-lines
analysis engine (``analyze``)."""
