"""Who plays a judged game, who decides it and how strong the players are: the in-process
agent, the players (ours, GTP and UCI engines, OpenSpiel's MCTS) and the lineup that builds
them, the referee (the one game loop), the worker pool, match, evaluate, ratings, curves and
the ladder."""
