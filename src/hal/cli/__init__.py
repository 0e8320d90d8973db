"""The ``hal`` command. Imports ``client`` and ``compat`` for user commands; ``hal server``,
``hal up`` and ``hal agent`` import the server and agent packages lazily, so client commands
start fast and never load server code."""
