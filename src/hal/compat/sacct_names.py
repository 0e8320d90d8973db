"""sacct's field names as Slurm 22.05.8 reads them: any prefix of a name, case aside.

Slurm's sacct takes the first field of its own table whose name starts with what was
typed (``jobn`` is JobName, ``sta`` Start, not State; ``c`` Cluster), and any prefix of
``ALL`` (``a`` too) is every field (src/sacct/options.c; checked against sacct 22.05.8
with slurmdbd, docs/slurm-checks.md). Exact names therefore always win: Slurm orders its
table so that no name is a prefix of an earlier one.
"""

from __future__ import annotations

from collections.abc import Collection

from hal.core.errors import InvalidRequest

# Slurm 22.05.8's sacct field table, in its order, as ``sacct -e`` lists it (one string
# that reads as that list does)
_TABLE = (
    "Account AdminComment AllocCPUS AllocNodes AllocTRES AssocID AveCPU AveCPUFreq "
    "AveDiskRead AveDiskWrite AvePages AveRSS AveVMSize BlockID Cluster Comment Constraints "
    "ConsumedEnergy ConsumedEnergyRaw Container CPUTime CPUTimeRAW DBIndex DerivedExitCode "
    "Elapsed ElapsedRaw Eligible End ExitCode Flags GID Group JobID JobIDRaw JobName Layout "
    "MaxDiskRead MaxDiskReadNode MaxDiskReadTask MaxDiskWrite MaxDiskWriteNode "
    "MaxDiskWriteTask MaxPages MaxPagesNode MaxPagesTask MaxRSS MaxRSSNode MaxRSSTask "
    "MaxVMSize MaxVMSizeNode MaxVMSizeTask McsLabel MinCPU MinCPUNode MinCPUTask NCPUS "
    "NNodes NodeList NTasks Partition Priority QOS QOSRAW Reason ReqCPUFreq ReqCPUFreqGov "
    "ReqCPUFreqMax ReqCPUFreqMin ReqCPUS ReqMem ReqNodes ReqTRES Reservation ReservationId "
    "Reserved ResvCPU ResvCPURAW Start State Submit SubmitLine Suspended SystemComment "
    "SystemCPU Timelimit TimelimitRaw TotalCPU TRESUsageInAve TRESUsageInMax "
    "TRESUsageInMaxNode TRESUsageInMaxTask TRESUsageInMin TRESUsageInMinNode "
    "TRESUsageInMinTask TRESUsageInTot TRESUsageOutAve TRESUsageOutMax TRESUsageOutMaxNode "
    "TRESUsageOutMaxTask TRESUsageOutMin TRESUsageOutMinNode TRESUsageOutMinTask "
    "TRESUsageOutTot UID User UserCPU WCKey WCKeyID WorkDir"
)
SLURM_FIELD_ORDER = tuple(_TABLE.split())


def full_names(text: str, known: Collection[str]) -> str:
    """``jobn,sta%5,a`` → ``JobName,Start%5,<every known field>``: each item of a
    ``--format`` list with its prefix resolved as Slurm's sacct resolves it, to a Slurm
    name whose lower case is in ``known`` (HAL's fields). A prefix that is no Slurm field is left as
    typed (the caller reports it); one that names a field HAL does not print is an
    ``InvalidRequest`` that says which field Slurm would have printed."""
    out: list[str] = []
    for raw in text.split(","):
        name, percent, width = raw.strip().partition("%")
        name = name.strip()
        lower = name.lower()
        if not lower:
            continue
        if "all".startswith(lower):
            out += [f"{n}{percent}{width}" for n in SLURM_FIELD_ORDER if n.lower() in known]
            continue
        found = next((n for n in SLURM_FIELD_ORDER if n.lower().startswith(lower)), None)
        if found is not None and found.lower() not in known:
            raise InvalidRequest(
                f'Invalid field requested: "{name}" is Slurm\'s {found}, which HAL does '
                "not record, so its sacct cannot print it; run sacct --helpformat for the "
                "fields it does",
                field="format",
            )
        out.append(f"{found or name}{percent}{width}")
    return ",".join(out)
