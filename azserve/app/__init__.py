"""The top floor: config schema and TOML loading, the CLI and its commands, the process mains
(serve, train, launch), the supervisor, analysis, play, evaluation, reports and the benchmarks.
It is the only package that imports everything; nothing below imports it."""
