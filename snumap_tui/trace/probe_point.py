"""Where in a function a uprobe costs least: the first instruction the kernel emulates.

A uprobe replaces one instruction with ``int3``. On the hit the kernel either *emulates* the
original instruction (x86-64: ``push reg``, ``call/jmp rel``, ``jcc rel``, one-byte ``nop``;
arch/x86/kernel/uprobes.c) or copies it to a per-process page and *single-steps* it there, a
second trap. Measured on this project's KVM guest (bench/regions_overhead.py): ~0.3 us a hit
emulated, ~14 us single-stepped -- and a single-stepped body of a short OpenMP region slowed the
whole region by tens of microseconds more. GCC's outlined OpenMP bodies and libgomp's barrier
and critical entry points start with loads (``mov``, ``test``): every hit single-stepped.

So the probe moves forward, within the straight-line code at the function's entry, to the
first instruction the kernel emulates, provided that

- nothing before it reads or writes the stack pointer or a stack slot: the return address is
  still at ``[rsp]``, so an entry+return probe (uretprobe) placed there hijacks the right word,
  exactly as at the entry;
- nothing before it is a branch, call, return or system call: every call passes it, once;
- no direct branch in the function targets an instruction after the entry and up to it (a loop
  back into the prologue would hit it again);
- with ``keep_args``, nothing before it writes an argument register (probes that capture an
  argument read it there);
- the whole function disassembles (no data in the text to misread).

Otherwise the probe stays at the entry. The instructions passed over are a few loads and
compares: the time stamp moves by nanoseconds. Decoding is capstone's (the ``regions`` extra);
without it the probe stays at the entry (or just past ``endbr64; push``).
"""

from __future__ import annotations

import functools
import platform
import re
from typing import Any

from snumap_tui.extras import install_extra

# At most this many instructions are passed over, and at most this many bytes decoded.
MAX_SKIP = 24
MAX_FUNC_BYTES = 256 * 1024

ARG_REGS = frozenset({"rdi", "rsi", "rdx", "rcx", "r8", "r9"})
_ALIASES = {
    "rdi": ("edi", "di", "dil"), "rsi": ("esi", "si", "sil"), "rdx": ("edx", "dx", "dl", "dh"),
    "rcx": ("ecx", "cx", "cl", "ch"), "r8": ("r8d", "r8w", "r8b"), "r9": ("r9d", "r9w", "r9b"),
    "rsp": ("esp", "sp", "spl"),
}
_STACK = frozenset({"rsp", *_ALIASES["rsp"]})
_ARGS = frozenset({r for a in ARG_REGS for r in (a, *_ALIASES[a])})
ENDBR64 = b"\xf3\x0f\x1e\xfa"
# Mnemonics that move the stack pointer whatever capstone says of their registers.
_STACK_OPS = ("push", "pop", "enter", "leave")
_NUMBER = re.compile(r"0x[0-9a-f]+|[0-9]+")
_NEVER_PASSED = ("syscall", "sysenter", "ud2", "hlt", "int3")


def _push(code: bytes) -> bool:
    """``push reg`` (optionally REX.B): the prologue instruction the kernel emulates."""
    return bool(code) and (0x50 <= code[0] <= 0x57 or (
        code[0] == 0x41 and len(code) > 1 and 0x50 <= code[1] <= 0x57))


def emulated(code: bytes) -> bool:
    """Whether the kernel emulates (does not single-step) the x86-64 instruction whose bytes
    start CODE: push reg (optionally REX.B), call/jmp rel, jcc rel8/rel32, one-byte nop. An
    operand-size prefix (0x66) makes the kernel refuse to emulate a branch."""
    if not code:
        return False
    b0 = code[0]
    if _push(code) or b0 in (0x90, 0xe8, 0xe9, 0xeb) or 0x70 <= b0 <= 0x7f:
        return True
    return b0 == 0x0f and len(code) > 1 and 0x80 <= code[1] <= 0x8f


@functools.cache
def _capstone() -> Any:
    """capstone (the ``regions`` extra) and its two x86-64 decoders -- one with operand
    detail for the few prologue instructions, one without for whole functions -- made once
    per process; None without capstone."""
    try:
        import capstone
        import capstone.x86
    except ImportError:
        return None
    detail = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    detail.detail = True
    lite = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    flow = (capstone.CS_GRP_JUMP, capstone.CS_GRP_CALL, capstone.CS_GRP_RET,
            capstone.CS_GRP_INT, capstone.CS_GRP_IRET, capstone.CS_GRP_BRANCH_RELATIVE)
    return capstone, detail, lite, flow


def missing_note() -> str | None:
    """What a recording with probes should say when capstone is not there, else None (also
    where probes never move: not x86-64)."""
    if platform.machine() != "x86_64" or _capstone() is not None:
        return None
    return ("capstone is not installed, so probes stay at function entries, where "
            "most are single-stepped (~14 us a hit instead of ~0.3 us): "
            + install_extra("regions"))


def _touches_stack(cs: Any, md: Any, insn: Any) -> bool:
    """Whether INSN reads or writes rsp, directly or as a memory operand's base."""
    read, written = insn.regs_access()
    if any(md.reg_name(r) in _STACK for r in (*read, *written)):
        return True
    return any(op.type == cs.x86.X86_OP_MEM and op.mem.base
               and md.reg_name(op.mem.base) in _STACK for op in insn.operands)


def _writes_arg(md: Any, insn: Any) -> bool:
    return any(md.reg_name(r) in _ARGS for r in insn.regs_access()[1])


def _branches_into(lite: Any, code: bytes, upto: int) -> bool | None:
    """Whether a direct jump or call in CODE targets an address in (0, UPTO]; None when CODE
    does not decode to its end (data in the text, or a size we cannot trust)."""
    end = 0
    for address, size, mnemonic, op_str in lite.disasm_lite(code, 0):
        end = address + size
        # a direct target is a bare number: hex, or decimal below 10 (capstone's style)
        if mnemonic.startswith(("j", "call", "loop")) and _NUMBER.fullmatch(op_str) \
                and 0 < int(op_str, 0) <= upto:
            return True
    return None if end != len(code) else False


def fallback_skip(code: bytes) -> int:
    """Without a disassembler: past a leading ``endbr64`` when a ``push`` follows it."""
    return 4 if code[:4] == ENDBR64 and _push(code[4:6]) else 0


def probe_skip(code: bytes, keep_args: bool = False) -> int:
    """How many bytes past a function's entry its uprobe goes. CODE: the function's bytes
    (its symbol's size, or as much as is known). 0 keeps the probe at the entry. Only the
    prologue is decoded in detail; the whole function is decoded (without detail) only
    once a point is found, for the branches that could jump over the entry."""
    if not code or emulated(code):
        return 0
    got = _capstone()
    if got is None:
        return fallback_skip(code)
    cs, md, lite, flow = got
    code = code[:MAX_FUNC_BYTES]
    point = None
    for i, insn in enumerate(md.disasm(code, 0)):
        if i == MAX_SKIP:
            return 0
        if insn.address and emulated(bytes(insn.bytes)):
            point = insn.address
            break
        if any(insn.group(g) for g in flow) or insn.mnemonic in _NEVER_PASSED or \
                insn.mnemonic.startswith(_STACK_OPS):
            return 0        # capstone lists no registers for enter, push/pop fs/gs
        if _touches_stack(cs, md, insn) or (keep_args and _writes_arg(md, insn)):
            return 0
    if point is None:
        return 0
    into = _branches_into(lite, code, point)
    if into is None:
        return fallback_skip(code)
    return 0 if into else point
