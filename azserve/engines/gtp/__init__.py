"""The Go Text Protocol engine: the command table (``engine``), the board (``board``), the
clock (``clock``), the search's report (``report``), analysis for Sabaki and Lizzie
(``analyze``) and the stdin loop (``serve``)."""
