// An empty C program linked statically against glibc, as forkbox and busybox-static are:
// what glibc's start-up alone costs.
int main(void) {
    return 0;
}
