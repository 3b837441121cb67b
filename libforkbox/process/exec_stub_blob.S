/* The exec stub's ELF image (build/exec-stub, from exec_stub.c), embedded read-only in
 * forkbox; exec_guard.cpp copies it into a sealed memfd. The Makefile assembles this with
 * -I$(BUILD) so .incbin finds the stub of the same build. */
	.section .rodata
	.balign 16
	.global forkbox_exec_stub_start
	.type forkbox_exec_stub_start, %object
forkbox_exec_stub_start:
	.incbin "exec-stub"
	.global forkbox_exec_stub_end
	.type forkbox_exec_stub_end, %object
forkbox_exec_stub_end:
	.size forkbox_exec_stub_start, forkbox_exec_stub_end - forkbox_exec_stub_start
	.section .note.GNU-stack, "", %progbits
