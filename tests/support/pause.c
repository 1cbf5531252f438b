/* The pod sandbox's process for the real-node test tier (tests/support/pause.py): it holds the
 * pod's namespaces open, reaps children re-parented to it and exits 0 on SIGINT or SIGTERM, as
 * the kubelet's pause image does (kubernetes/kubernetes build/pause). Built with gcc -static. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
    (void)sig;
    _exit(0);
}

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction term = {.sa_handler = stop};
    struct sigaction child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
    if (sigaction(SIGINT, &term, NULL) != 0 || sigaction(SIGTERM, &term, NULL) != 0 ||
        sigaction(SIGCHLD, &child, NULL) != 0) {
        return 1;
    }
    for (;;) {
        pause();
    }
}
