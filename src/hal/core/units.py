"""Byte units. Apart from ``resources`` so that reading a size (``sbatch --mem``, whose
start-up counts) imports no dataclass."""

MiB = 1024 * 1024
GiB = 1024 * MiB
