"""Slurm's languages, read and written: time limits, sizes, host lists, arrays,
dependencies, signals, GRES and licenses (``syntax``); output file-name patterns
(``filenames``); ``--distribution`` (``distribution``); ``srun --multi-prog`` files
(``multi_prog``); scrontab lines (``crontab``); ``topology.conf`` (``topology_conf``); and
the Slurm rules that the server, the agents and the commands share: a step's layout and
its ranks (``steps``), job mail's words (``mail``) and the ``SLURM_*`` variables that
describe a job (``job_variables``).

Imports ``hal.core`` and the libraries that parse for it (python-hostlist, cronsim); every
layer above may import it, so a Slurm string is read the same way on the server, on the
node and in the commands. ``hal.core`` knows no Slurm syntax.
"""
