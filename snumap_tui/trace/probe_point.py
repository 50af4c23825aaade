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

import platform
from typing import Any

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


def emulated(code: bytes) -> bool:
    """Whether the kernel emulates (does not single-step) the x86-64 instruction whose bytes
    start CODE: push reg (optionally REX.B), call/jmp rel, jcc rel8/rel32, one-byte nop. An
    operand-size prefix (0x66) makes the kernel refuse to emulate a branch."""
    if not code:
        return False
    b0 = code[0]
    if 0x50 <= b0 <= 0x57:
        return True
    if b0 == 0x41 and len(code) > 1 and 0x50 <= code[1] <= 0x57:
        return True
    if b0 in (0x90, 0xe8, 0xe9, 0xeb) or 0x70 <= b0 <= 0x7f:
        return True
    return b0 == 0x0f and len(code) > 1 and 0x80 <= code[1] <= 0x8f


def missing_note() -> str | None:
    """What a recording with probes should say when capstone is not there, else None (also
    where probes never move: not x86-64)."""
    if platform.machine() != "x86_64" or _disassembler() is not None:
        return None
    return ("regions: capstone is not installed, so probes stay at function entries, where "
            "most are single-stepped (~14 us a hit instead of ~0.3 us): "
            "pip install 'snumap[regions]'")


def _disassembler() -> Any:
    try:
        import capstone
    except ImportError:
        return None
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = True
    return md


def _regs(md: Any, insn: Any) -> tuple[set[str], set[str]]:
    read, written = insn.regs_access()
    return {md.reg_name(r) for r in read}, {md.reg_name(r) for r in written}


def _mem_on_stack(md: Any, insn: Any) -> bool:
    import capstone.x86 as X

    for op in insn.operands:
        if op.type == X.X86_OP_MEM and op.mem.base and md.reg_name(op.mem.base) in _STACK:
            return True
    return False


def _branch_target(insn: Any) -> int | None:
    import capstone
    import capstone.x86 as X

    if insn.group(capstone.CS_GRP_JUMP) or insn.group(capstone.CS_GRP_CALL):
        ops = insn.operands
        if len(ops) == 1 and ops[0].type == X.X86_OP_IMM:
            return int(ops[0].imm)
    return None


def fallback_skip(code: bytes) -> int:
    """Without a disassembler: past a leading ``endbr64`` when a ``push`` follows it."""
    rest = code[4:6]
    if code[:4] == ENDBR64 and rest and rest[0] != 0x90 and emulated(rest) and (
            0x50 <= rest[0] <= 0x57 or rest[0] == 0x41):
        return 4
    return 0


def probe_skip(code: bytes, keep_args: bool = False) -> int:
    """How many bytes past a function's entry its uprobe goes. CODE: the function's bytes
    (its symbol's size, or as much as is known). 0 keeps the probe at the entry."""
    if not code:
        return 0
    if emulated(code):
        return 0
    md = _disassembler()
    if md is None:
        return fallback_skip(code)
    code = code[:MAX_FUNC_BYTES]
    insns = list(md.disasm(code, 0))
    if not insns or insns[-1].address + insns[-1].size != len(code):
        return fallback_skip(code)      # data in the text, or a size we cannot trust
    import capstone

    flow = (capstone.CS_GRP_JUMP, capstone.CS_GRP_CALL, capstone.CS_GRP_RET, capstone.CS_GRP_INT,
            capstone.CS_GRP_IRET, capstone.CS_GRP_BRANCH_RELATIVE)
    point = None
    for insn in insns[:MAX_SKIP]:
        raw = bytes(insn.bytes)
        if insn.address and emulated(raw):
            point = insn.address
            break
        if any(insn.group(g) for g in flow):
            return 0
        if insn.mnemonic in ("syscall", "sysenter", "ud2", "hlt", "int3") or \
                insn.mnemonic.startswith(_STACK_OPS):
            return 0        # capstone lists no registers for enter, push/pop fs/gs
        read, written = _regs(md, insn)
        if (read | written) & _STACK or _mem_on_stack(md, insn):
            return 0
        if keep_args and written & _ARGS:
            return 0
    if point is None:
        return 0
    for insn in insns:
        t = _branch_target(insn)
        if t is not None and 0 < t <= point:
            return 0
    return point
