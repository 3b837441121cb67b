// The cheapest process there is: no libc, no start-up code; exits at its first instruction.
void _start(void) {
    __asm__ volatile("mov $60, %eax\n\txor %edi, %edi\n\tsyscall");
}
