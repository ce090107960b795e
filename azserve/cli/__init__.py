"""The ``azserve`` command: ``main`` builds the parser from one module per command, each with
its flags (``register(sub)``) and its main (``run(args)``)."""
