"""GPU device isolation: a job opens only its own GPUs' device files (Slurm's
``ConstrainDevices=yes``).

An NVIDIA GPU is the character device ``/dev/nvidia<minor>``, major 195, minor from
NVML (``nvmlDeviceGetMinorNumber``). A job given GPU 1 of four is denied the other three
minors; a job given none is denied them all. The driver's shared files
(``/dev/nvidiactl``, ``/dev/nvidia-uvm``, ...) stay open to every job, as Slurm leaves
them: without one's own ``/dev/nvidia<minor>`` they reach no GPU. ``CUDA_VISIBLE_DEVICES``
only asks CUDA to look away; this stops a job that unsets it.

==========  ==============================================================================
cgroup1     the ``devices`` controller: the job's own ``<devices mount>/hal/<agent>/
            job_<id>.<n>`` with a ``devices.deny`` line per denied GPU.
cgroup2     no device files: an eBPF program of type ``BPF_PROG_TYPE_CGROUP_DEVICE``
            attached to the job's cgroup (as runc and Slurm do). It is loaded through the
            ``bpf`` system call with ``ctypes``; nothing to install. Attached with
            ``BPF_F_ALLOW_MULTI``, so a program of the host's (systemd's) still runs too,
            and the job's steps, in subgroups, are bound by it.
==========  ==============================================================================

This module runs in the step launcher after ``fork`` and must stay light: the standard
library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
import struct

NVIDIA_MAJOR = 195  # the major number NVIDIA's driver registers for /dev/nvidia<minor>

# bpf(2): commands, program and attach types, flags (linux/bpf.h)
_SYS_BPF = {"x86_64": 321, "aarch64": 280, "ppc64le": 361, "s390x": 351}
_BPF_PROG_LOAD = 5
_BPF_PROG_ATTACH = 8
_BPF_PROG_TYPE_CGROUP_DEVICE = 15
_BPF_CGROUP_DEVICE = 6
_BPF_F_ALLOW_MULTI = 2
_BPF_DEVCG_DEV_CHAR = 2
_ATTR_SIZE = 128  # bytes of union bpf_attr given; the kernel wants the unused rest zero

# instruction opcodes: class | size/op | source
_LDX_W = 0x61  # BPF_LDX | BPF_MEM | BPF_W: dst = *(u32 *)(src + off)
_AND32_K = 0x54  # BPF_ALU | BPF_AND | BPF_K
_JNE_K = 0x55  # BPF_JMP | BPF_JNE | BPF_K
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_MOV64_K = 0xB7  # BPF_ALU64 | BPF_MOV | BPF_K
_EXIT = 0x95  # BPF_JMP | BPF_EXIT


class DeviceControlError(OSError):
    """The kernel refused the device filter; the message says which step."""


def deny_lines(minors: tuple[int, ...]) -> list[str]:
    """The cgroup1 ``devices.deny`` lines for these GPU minors."""
    return [f"c {NVIDIA_MAJOR}:{minor} rwm" for minor in minors]


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, dst | (src << 4), off, imm)


def device_program(minors: tuple[int, ...]) -> bytes:
    """The eBPF program that refuses the character devices ``195:<minor>`` and allows
    every other device. Its input is ``struct bpf_cgroup_dev_ctx``: ``access_type``
    (the device type in its low 16 bits), ``major``, ``minor``, each a u32."""
    n = len(minors)
    if not n:  # allow all (the verifier refuses a "deny" no jump reaches)
        return _insn(_MOV64_K, dst=0, imm=1) + _insn(_EXIT)
    code = [
        _insn(_LDX_W, dst=2, src=1, off=0),  # r2 = access_type
        _insn(_AND32_K, dst=2, imm=0xFFFF),  # r2 = the device type
        _insn(_LDX_W, dst=3, src=1, off=4),  # r3 = major
        _insn(_LDX_W, dst=4, src=1, off=8),  # r4 = minor
        _insn(_JNE_K, dst=2, off=n + 1, imm=_BPF_DEVCG_DEV_CHAR),  # not a char device
        _insn(_JNE_K, dst=3, off=n, imm=NVIDIA_MAJOR),  # not a GPU
    ]
    for k, minor in enumerate(minors):
        code.append(_insn(_JEQ_K, dst=4, off=n + 1 - k, imm=minor))  # to "deny"
    code += [
        _insn(_MOV64_K, dst=0, imm=1),  # allow
        _insn(_EXIT),
        _insn(_MOV64_K, dst=0, imm=0),  # deny
        _insn(_EXIT),
    ]
    return b"".join(code)


def attach_device_filter(cgroup: str, minors: tuple[int, ...]) -> None:
    """Attach the filter denying ``minors`` to the cgroup2 directory ``cgroup``. The
    attachment holds the program: it lasts as long as the cgroup, without our fds."""
    prog = load_program(minors)
    try:
        target = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
        try:
            attr = struct.pack("<IIII", target, prog, _BPF_CGROUP_DEVICE, _BPF_F_ALLOW_MULTI)
            _bpf(_BPF_PROG_ATTACH, attr, "attach the device filter to " + cgroup)
        finally:
            os.close(target)
    finally:
        os.close(prog)


def load_program(minors: tuple[int, ...]) -> int:
    """Load the filter; returns the program's fd (the caller closes it). Where the
    kernel refuses it, loads it again with the verifier's log, for the reason."""
    program = device_program(minors)
    try:
        return _load(program)
    except DeviceControlError as err:
        log = ctypes.create_string_buffer(1 << 16)
        with contextlib.suppress(DeviceControlError):
            os.close(_load(program, log))  # refused again, with the log this time
        text = log.value.decode(errors="replace").strip()
        message = f"{err.strerror}: {text[-1000:]}" if text else str(err.strerror)
        raise DeviceControlError(err.errno, message) from None


def _load(program: bytes, log: ctypes.Array[ctypes.c_char] | None = None) -> int:
    insns = ctypes.create_string_buffer(program, len(program))
    license_ = ctypes.create_string_buffer(b"GPL")
    attr = struct.pack(
        "<IIQQIIQ",
        _BPF_PROG_TYPE_CGROUP_DEVICE,
        len(program) // 8,  # instructions of 8 bytes
        ctypes.addressof(insns),
        ctypes.addressof(license_),
        1 if log is not None else 0,  # log level
        len(log) if log is not None else 0,
        ctypes.addressof(log) if log is not None else 0,
    )
    return _bpf(_BPF_PROG_LOAD, attr, "load the device filter")


def _bpf(command: int, attr: bytes, doing: str) -> int:
    machine = platform.machine()
    number = _SYS_BPF.get(machine)
    if number is None:
        raise DeviceControlError(0, f"cannot {doing}: no bpf system call known on {machine}")
    buffer = ctypes.create_string_buffer(attr.ljust(_ATTR_SIZE, b"\0"), _ATTR_SIZE)
    result = int(_libc().syscall(number, command, buffer, _ATTR_SIZE))
    if result < 0:
        code = ctypes.get_errno()
        raise DeviceControlError(code, f"cannot {doing}: {os.strerror(code)}")
    return result


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)  # (9 µs a handle: two per job's filter)
