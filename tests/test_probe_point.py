"""Where a uprobe goes in a function (trace/probe_point.py): hand-assembled x86-64 bytes."""

from __future__ import annotations

import pytest

from snumap_tui.trace import probe_point as P

try:
    import capstone  # noqa: F401
    HAVE_CAPSTONE = True
except ImportError:
    HAVE_CAPSTONE = False
needs_capstone = pytest.mark.skipif(not HAVE_CAPSTONE, reason="capstone is not installed")

ENDBR = bytes.fromhex("f30f1efa")
# GCC's outlined body of `#pragma omp parallel { for (k < work) ; }` at -O1:
#   mov (%rdi),%rdx; mov $0,%eax; test %rdx,%rdx; jle +9; add $1,%rax; cmp %rax,%rdx;
#   jne -9; ret
BODY = bytes.fromhex("488b17" "b800000000" "4885d2" "7e09" "4883c001" "4839c2" "75f7" "c3")


@needs_capstone
def test_body_probe_moves_to_its_first_conditional_jump():
    assert P.probe_skip(BODY) == 11
    assert P.emulated(BODY[11:])


@needs_capstone
def test_a_function_starting_with_an_emulated_instruction_keeps_its_entry():
    assert P.probe_skip(bytes.fromhex("55" "4889e5" "5dc3")) == 0          # push %rbp
    assert P.probe_skip(bytes.fromhex("4154" "c3")) == 0                  # push %r12


@needs_capstone
def test_endbr64_then_push_goes_past_the_endbr64():
    code = ENDBR + bytes.fromhex("4155" "4889fd" "415d" "c3")            # push %r13
    assert P.probe_skip(code) == 4
    assert P.fallback_skip(code) == 4


@needs_capstone
def test_stack_pointer_use_keeps_the_entry():
    # sub $0x28,%rsp first: after it [rsp] is no longer the return address
    assert P.probe_skip(bytes.fromhex("4883ec28" "7e02" "9090" "4883c428" "c3")) == 0
    # a red-zone store (movq $0,-8(%rsp)) before the first jump: a stack slot is touched
    code = bytes.fromhex("48c74424f800000000" "4885ff" "7e01" "90" "c3")
    assert P.probe_skip(code) == 0
    # instructions that move rsp although capstone lists no registers for them:
    # enter $8,$0; push %fs; pop %fs; leave
    for head in ("c8080000", "0fa0", "0fa1", "c9"):
        assert P.probe_skip(bytes.fromhex(head + "4885ff" "7e00" "c3")) == 0, head


@needs_capstone
def test_keep_args_refuses_to_pass_a_write_to_an_argument_register():
    assert P.probe_skip(BODY, keep_args=True) == 0                          # writes %rdx
    # only %rax written before the jump: an argument-capturing probe may move
    code = bytes.fromhex("b800000000" "4885ff" "7e01" "90" "c3")
    assert P.probe_skip(code, keep_args=True) == 8


@needs_capstone
def test_a_branch_back_into_the_prologue_keeps_the_entry():
    # mov $0,%eax; test %rdi,%rdi; jle (to the ret); add $1,%rax; jmp back to the test (5)
    code = bytes.fromhex("b800000000" "4885ff" "7e06" "4883c001" "ebf5" "c3")
    assert code[14] == 0xeb and 16 + (0xf5 - 256) == 5
    assert P.probe_skip(code) == 0
    # the same jump aimed at the entry itself is harmless: the entry is not passed over
    code = bytes.fromhex("b800000000" "4885ff" "7e06" "4883c001" "ebf0" "c3")
    assert P.probe_skip(code) == 8


@needs_capstone
def test_calls_returns_and_syscalls_before_an_emulated_instruction_keep_the_entry():
    assert P.probe_skip(bytes.fromhex("4885ff" "c3" "7e00")) == 0          # ret first
    assert P.probe_skip(bytes.fromhex("0f05" "7e00" "c3")) == 0            # syscall
    assert P.probe_skip(bytes.fromhex("ffd0" "7e00" "c3")) == 0            # call *%rax


def test_an_operand_size_prefixed_branch_is_not_taken_as_emulated():
    assert not P.emulated(bytes.fromhex("66e90000"))
    assert P.emulated(bytes.fromhex("0f8e00000000"))                       # jle rel32
    assert P.emulated(bytes.fromhex("e800000000"))                         # call rel32
    assert not P.emulated(ENDBR)
    assert not P.emulated(b"")


@needs_capstone
def test_undecodable_bytes_and_no_disassembler_fall_back(monkeypatch):
    # bytes that do not decode to the end (data in the text): only the endbr64+push rule
    assert P.probe_skip(BODY + b"\x0f\x0b\x0f") in (0,)
    assert P.probe_skip(ENDBR + bytes.fromhex("55") + b"\x06") == 4
    assert P.missing_note() is None
    monkeypatch.setattr(P, "_capstone", lambda: None)
    assert "pip install 'snumap[regions]'" in (P.missing_note() or "")
    assert P.probe_skip(BODY) == 0
    assert P.probe_skip(ENDBR + bytes.fromhex("53c3")) == 4
    assert P.probe_skip(b"") == 0


@needs_capstone
def test_a_long_prologue_is_not_passed_over():
    code = bytes.fromhex("4885ff") * (P.MAX_SKIP + 2) + bytes.fromhex("7e00c3")
    assert P.probe_skip(code) == 0
    short = bytes.fromhex("4885ff") * 3 + bytes.fromhex("7e00c3")
    assert P.probe_skip(short) == 9


@needs_capstone
def test_a_symbol_inside_the_passed_over_prologue_keeps_the_entry(tmp_path) -> None:
    """`inner` starts after the first instruction of `outer`: a call to it would reach a probe
    moved past that point without passing outer's entry, so outer's probe stays put; a
    function without such a neighbour moves."""
    import shutil
    import subprocess

    from snumap_tui.trace.elfsyms import load_elf

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    src = tmp_path / "f.S"
    src.write_text("""
        .text
        .globl outer, inner, alone
        .type outer, @function
        .type inner, @function
outer:  mov $0, %eax
inner:  test %rdi, %rdi
        jle 1f
        add $1, %rax
1:      ret
        .size outer, .-outer
        .type alone, @function
alone:  mov $0, %eax
        test %rdi, %rdi
        jle 2f
        add $1, %rax
2:      ret
        .size alone, .-alone
""")
    so = tmp_path / "f.so"
    subprocess.run(["gcc", "-shared", "-nostdlib", str(src), "-o", str(so)], check=True)
    elf = load_elf(so)
    assert elf.machine == "EM_X86_64"
    assert elf.probe_offset("outer") == elf.offset_of("outer")
    assert elf.probe_offset("alone") == elf.offset_of("alone") + 8      # at its jle
    # The same file marked as i386 code (e_machine EM_386 = 3, at offset 18): its bytes
    # would be 32-bit instructions, so no probe moves, whatever the host.
    data = bytearray(so.read_bytes())
    data[18:20] = (3).to_bytes(2, "little")
    i386 = tmp_path / "f386.so"
    i386.write_bytes(bytes(data))
    elf = load_elf(i386)
    assert elf.machine == "EM_386"
    assert elf.probe_offset("alone") == elf.offset_of("alone")
