"""The protocols spoken to GUIs and programs: GTP (``gtp/``), UCI (``uci``) and USI (``usi``),
one session shared (``protocol``), and the JSON-lines analysis engine (``analyze``)."""
