"""The rating ladder: which pairs play (``schedule``), playing one game (``play``), the games
file (``store``) and the table and plot (``output``)."""
