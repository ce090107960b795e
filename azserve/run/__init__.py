"""Starting, supervising and reporting on processes: train, serve, the supervisor and actor
lives, the live display, data-parallel ranks, compare, report and the cluster launcher."""
