"""sacctmgr's field names and TRES strings: the spellings tools write (``DefaultA``,
``MaxJ``, ``account%256``) and Slurm's converted memory units."""

from __future__ import annotations

import pytest

from hal.compat.sacctmgr_fields import find_field, parse_format, table, tres
from hal.wire.priority import TresInfo


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("defaultaccount", "defaultaccount"),
        ("DefaultA", "defaultaccount"),
        ("U", "user"),
        ("Acct", "account"),
        ("MaxJ", "maxjobs"),
        ("MaxJobsPU", "maxjobspu"),
        ("MaxTRESPU", "maxtrespu"),
        ("MaxTRESPerN", "maxtrespernode"),
        ("GrpTRES", "grptres"),
        ("Prio", "priority"),
        ("Fairshare", "share"),
    ],
)
def test_format_names_match_as_slurms_abbreviations(name: str, key: str) -> None:
    found = find_field(name)
    assert found is not None and found.key == key


def test_a_width_and_an_unknown_name() -> None:
    [(field, width)] = parse_format("account%256")
    assert (field.title, width) == ("Account", 256)
    with pytest.raises(ValueError, match="Unknown field 'bogus'"):
        parse_format("user,bogus")


def test_titles_and_values_are_cut_to_the_width() -> None:
    columns = parse_format("grptresrunmins,user%4")
    lines = table([{"user": "alexandra"}], columns, header=True, parsable="")
    assert lines == ["GrpTRESRunMin User", "------------- ----", "              ale+"]


def test_tres_in_slurms_order_with_memory_in_whole_units() -> None:
    tib = 2**40
    assert tres(TresInfo(gpus=16, cpus=512, nodes=32, memory_bytes=2 * tib)) == (
        "cpu=512,mem=2T,node=32,gres/gpu=16"
    )
    assert tres(TresInfo(memory_bytes=1000 * 2**20)) == "mem=1000M"
    assert tres(TresInfo(memory_bytes=1536 * 2**30)) == "mem=1536G"
    assert tres(TresInfo()) == ""
