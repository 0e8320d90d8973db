"""A job's --mail-type and recipient are kept in its stored spec (a JSON document: no
schema migration), so a job still pending or running when the server restarts still
sends its mail; specs stored before mail existed load with none."""

from __future__ import annotations

import json

from hal.core.job import JobSpec
from hal.slurm.mail import MailType
from hal.state.codec import spec_from_json, spec_to_json


def test_mail_settings_round_trip() -> None:
    flags = int(MailType.BEGIN | MailType.TIME_LIMIT_80 | MailType.ARRAY_TASKS)
    spec = JobSpec(user="alice", script="#!/bin/sh\n", mail_type=flags, mail_user="a@x.org")
    back = spec_from_json(spec_to_json(spec), spec.script)
    assert (back.mail_type, back.mail_user) == (flags, "a@x.org")


def test_specs_stored_before_mail_load_without_it() -> None:
    d = json.loads(spec_to_json(JobSpec(user="bob", script="", mail_type=2, mail_user="b")))
    d.pop("mail_type")
    d.pop("mail_user")
    spec = spec_from_json(json.dumps(d), "#!/bin/sh\n")
    assert (spec.mail_type, spec.mail_user) == (0, "")
