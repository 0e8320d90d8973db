"""The scheduler: pure decisions over a snapshot (``framework`` + ``plugins``) and the async
shell that feeds it (``service``). See scheduler/README.md."""
